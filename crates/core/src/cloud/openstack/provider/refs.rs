//! What real Nova refuses only when a server is created, checked by `nodewright check`
//! beforehand: the key pair, the security groups (in Neutron) and the availability zone
//! a group names. Nova answers a create naming a missing one with 400; finding out at
//! the first scale-up is too late.

use serde::Deserialize;

use super::*;

#[derive(Deserialize)]
struct SecurityGroup {
    id: String,
    #[serde(default)]
    name: String,
}

#[derive(Deserialize)]
struct SecurityGroupList {
    #[serde(default)]
    security_groups: Vec<SecurityGroup>,
}

#[derive(Deserialize)]
struct ZoneState {
    #[serde(default)]
    available: bool,
}

#[derive(Deserialize)]
struct Zone {
    #[serde(rename = "zoneName")]
    zone_name: String,
    #[serde(rename = "zoneState")]
    zone_state: ZoneState,
}

#[derive(Deserialize)]
struct ZoneList {
    #[serde(rename = "availabilityZoneInfo", default)]
    availability_zone_info: Vec<Zone>,
}

impl OpenStackProvider {
    /// The key pair exists for the user (`GET /os-keypairs/{name}`).
    pub(super) async fn check_key_pair(&self, name: &str) -> Result<(), CloudError> {
        let call = "GET /os-keypairs/{name}";
        let resp = self
            .send(call, |s| {
                Ok(self.nova(
                    self.http
                        .get(format!("{}/os-keypairs/{}", s.compute, seg(name))),
                ))
            })
            .await?;
        if resp.status() == reqwest::StatusCode::NOT_FOUND {
            return Err(not_found(Kind::KeyPair, name));
        }
        ensure_success(call, resp).await.map(drop)
    }

    /// Each security group exists in Neutron, by name or id, and a name is not ambiguous
    /// (Nova refuses a create naming a missing one, and one whose name is shared).
    pub(super) async fn check_security_groups(&self, names: &[String]) -> Result<(), CloudError> {
        if names.is_empty() {
            return Ok(());
        }
        let neutron = |s: &Session| -> Result<String, CloudError> {
            s.network
                .as_deref()
                .map(|b| versioned(b, "v2.0"))
                .ok_or_else(|| {
                    other("no 'network' (Neutron) endpoint in the service catalog".into())
                })
        };
        let call = "GET /v2.0/security-groups";
        let resp = self
            .send(call, |s| {
                Ok(self
                    .http
                    .get(format!("{}/security-groups", neutron(s)?))
                    .query(&[("fields", "id"), ("fields", "name")]))
            })
            .await?;
        let list: SecurityGroupList = read_json(call, ensure_success(call, resp).await?).await?;
        for name in names {
            if list.security_groups.iter().any(|g| g.id == *name) {
                continue;
            }
            match list
                .security_groups
                .iter()
                .filter(|g| g.name == *name)
                .count()
            {
                1 => {}
                0 => return Err(not_found(Kind::SecurityGroup, name)),
                n => {
                    return Err(other(format!(
                        "security group name '{name}' is ambiguous ({n} groups); use its id"
                    )))
                }
            }
        }
        Ok(())
    }

    /// The availability zone is listed and available (`GET /os-availability-zone`).
    pub(super) async fn check_availability_zone(&self, zone: &str) -> Result<(), CloudError> {
        let call = "GET /os-availability-zone";
        let resp = self
            .send(call, |s| {
                Ok(self.nova(self.http.get(format!("{}/os-availability-zone", s.compute))))
            })
            .await?;
        let list: ZoneList = read_json(call, ensure_success(call, resp).await?).await?;
        match list
            .availability_zone_info
            .iter()
            .find(|z| z.zone_name == zone)
        {
            Some(z) if z.zone_state.available => Ok(()),
            Some(_) => Err(other(format!(
                "availability zone '{zone}' is not available; Nova refuses creates in it"
            ))),
            None => {
                let known: Vec<&str> = list
                    .availability_zone_info
                    .iter()
                    .filter(|z| z.zone_state.available)
                    .map(|z| z.zone_name.as_str())
                    .collect();
                Err(other(format!(
                    "availability zone '{zone}' not found; available: {}",
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                )))
            }
        }
    }
}
