//! Names in the group settings resolved to ids: flavors, Glance images, Neutron
//! networks and server groups, each remembered for a while.

use serde::Deserialize;

use super::*;

#[derive(Deserialize)]
struct GlanceImage {
    id: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    created_at: String,
}

#[derive(Deserialize)]
struct GlanceList {
    #[serde(default)]
    images: Vec<GlanceImage>,
}

#[derive(Deserialize)]
struct NeutronNetwork {
    id: String,
}

#[derive(Deserialize)]
struct NeutronList {
    #[serde(default)]
    networks: Vec<NeutronNetwork>,
}

impl OpenStackProvider {
    pub(super) async fn list_flavors(&self) -> Result<Vec<Flavor>, CloudError> {
        let call = "GET /flavors/detail";
        let mut all = Vec::new();
        let mut query: Option<String> = None;
        for _ in 0..1000 {
            let q = query.clone();
            let resp = self
                .send(call, |s| {
                    let mut url = format!("{}/flavors/detail", s.compute);
                    if let Some(q) = &q {
                        url = format!("{url}?{q}");
                    }
                    Ok(self.nova(self.http.get(url)))
                })
                .await?;
            let page: FlavorList = read_json(call, ensure_success(call, resp).await?).await?;
            let done = page.flavors.is_empty();
            all.extend(page.flavors);
            query = next_query(&page.flavors_links);
            if query.is_none() || done {
                break;
            }
        }
        Ok(all)
    }

    pub(super) async fn flavor(&self, name: &str) -> Result<Flavor, CloudError> {
        if let Some(Resolved::Flavor(f)) = self.cached(Kind::Flavor, name) {
            return Ok(f);
        }
        let flavors = self.list_flavors().await?;
        let find = |name: &str| {
            flavors
                .iter()
                .find(|f| f.id == name)
                .or_else(|| flavors.iter().find(|f| f.name == name))
                .cloned()
        };
        // One listing resolves every group's flavor, so groups with different flavors
        // cost one call per cycle, not one each.
        for wanted in self.groups.values().flat_map(|g| g.flavor.all()) {
            if wanted != name {
                if let Some(f) = find(wanted) {
                    self.remember(Kind::Flavor, wanted, Resolved::Flavor(f));
                }
            }
        }
        let found = find(name);
        let flavor = match found {
            Some(f) => f,
            None => {
                // A private flavor may be usable by id without being listed.
                let call = "GET /flavors/{id}";
                let resp = self
                    .send(call, |s| {
                        Ok(self.nova(
                            self.http
                                .get(format!("{}/flavors/{}", s.compute, seg(name))),
                        ))
                    })
                    .await?;
                if resp.status().is_success() {
                    #[derive(Deserialize)]
                    struct One {
                        flavor: Flavor,
                    }
                    read_json::<One>(call, resp).await?.flavor
                } else {
                    let suggestion = flavors
                        .iter()
                        .map(|f| (strsim::jaro_winkler(&f.name, name), &f.name))
                        .filter(|(score, _)| *score > 0.8)
                        .max_by(|a, b| a.0.total_cmp(&b.0))
                        .map(|(_, n)| n.clone());
                    if let Some(s) = suggestion {
                        tracing::warn!(flavor = %name, suggestion = %s, "unknown OpenStack flavor; did you mean the suggestion?");
                    }
                    return Err(not_found(Kind::Flavor, name));
                }
            }
        };
        self.remember(Kind::Flavor, name, Resolved::Flavor(flavor.clone()));
        Ok(flavor)
    }

    pub(super) async fn image_id(&self, name: &str) -> Result<String, CloudError> {
        if let Some(Resolved::Id(id)) = self.cached(Kind::Image, name) {
            return Ok(id);
        }
        let glance = |s: &Session| -> Result<String, CloudError> {
            s.image
                .as_deref()
                .map(|b| versioned(b, "v2"))
                .ok_or_else(|| other("no 'image' (Glance) endpoint in the service catalog".into()))
        };
        if looks_like_uuid(name) {
            let call = "GET /v2/images/{id}";
            let resp = self
                .send(call, |s| {
                    Ok(self
                        .http
                        .get(format!("{}/images/{}", glance(s)?, seg(name))))
                })
                .await?;
            if resp.status().is_success() {
                let img: GlanceImage = read_json(call, resp).await?;
                self.remember(Kind::Image, name, Resolved::Id(img.id.clone()));
                return Ok(img.id);
            }
            if resp.status() != reqwest::StatusCode::NOT_FOUND {
                ensure_success(call, resp).await?;
            }
        }
        let call = "GET /v2/images?name=";
        let resp = self
            .send(call, |s| {
                Ok(self
                    .http
                    .get(format!("{}/images", glance(s)?))
                    .query(&[("name", name)]))
            })
            .await?;
        let list: GlanceList = read_json(call, ensure_success(call, resp).await?).await?;
        let mut candidates: Vec<&GlanceImage> = list
            .images
            .iter()
            .filter(|i| i.status == "active")
            .collect();
        if candidates.is_empty() {
            candidates = list.images.iter().collect();
        }
        // Several images of one name: take the newest (ISO timestamps sort as text).
        candidates.sort_by(|a, b| b.created_at.cmp(&a.created_at));
        if candidates.len() > 1 {
            tracing::warn!(image = %name, count = candidates.len(), chosen = %candidates[0].id, "several images share this name; using the newest");
        }
        let id = candidates
            .first()
            .map(|i| i.id.clone())
            .ok_or_else(|| not_found(Kind::Image, name))?;
        self.remember(Kind::Image, name, Resolved::Id(id.clone()));
        Ok(id)
    }

    pub(super) async fn network_id(&self, name: &str) -> Result<String, CloudError> {
        if let Some(Resolved::Id(id)) = self.cached(Kind::Network, name) {
            return Ok(id);
        }
        let neutron = |s: &Session| -> Result<String, CloudError> {
            s.network
                .as_deref()
                .map(|b| versioned(b, "v2.0"))
                .ok_or_else(|| {
                    other("no 'network' (Neutron) endpoint in the service catalog".into())
                })
        };
        for field in ["id", "name"] {
            if field == "id" && !looks_like_uuid(name) {
                continue;
            }
            let call = if field == "id" {
                "GET /v2.0/networks?id="
            } else {
                "GET /v2.0/networks?name="
            };
            let resp = self
                .send(call, |s| {
                    Ok(self
                        .http
                        .get(format!("{}/networks", neutron(s)?))
                        .query(&[(field, name)]))
                })
                .await?;
            let list: NeutronList = read_json(call, ensure_success(call, resp).await?).await?;
            match list.networks.as_slice() {
                [] => continue,
                [one] => {
                    self.remember(Kind::Network, name, Resolved::Id(one.id.clone()));
                    return Ok(one.id.clone());
                }
                many => {
                    return Err(other(format!(
                        "network name '{name}' is ambiguous ({} networks); use its id",
                        many.len()
                    )))
                }
            }
        }
        Err(not_found(Kind::Network, name))
    }

    /// Id of a server group of the project, by id or name (`GET /os-server-groups`).
    pub(super) async fn server_group_id(&self, name: &str) -> Result<String, CloudError> {
        if let Some(Resolved::Id(id)) = self.cached(Kind::ServerGroup, name) {
            return Ok(id);
        }
        let call = "GET /os-server-groups";
        let resp = self
            .send(call, |s| {
                Ok(self.nova(
                    self.http
                        .get(format!("{}/os-server-groups", s.compute))
                        // Nova pages by limit/offset, without links; one page this
                        // size holds every group of any sane project.
                        .query(&[("limit", "1000")]),
                ))
            })
            .await?;
        let list: ServerGroupList = read_json(call, ensure_success(call, resp).await?).await?;
        let id = match list.server_groups.iter().find(|g| g.id == name) {
            Some(g) => g.id.clone(),
            None => {
                let named: Vec<&str> = list
                    .server_groups
                    .iter()
                    .filter(|g| g.name == name)
                    .map(|g| g.id.as_str())
                    .collect();
                match named.as_slice() {
                    [] => return Err(not_found(Kind::ServerGroup, name)),
                    [one] => one.to_string(),
                    many => {
                        return Err(other(format!(
                            "server group name '{name}' is ambiguous ({} groups: {}); use its id",
                            many.len(),
                            many.join(", ")
                        )))
                    }
                }
            }
        };
        self.remember(Kind::ServerGroup, name, Resolved::Id(id.clone()));
        Ok(id)
    }
}
