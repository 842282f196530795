//! `nodewright check` for Kamatera: the API key works, and each group's datacenter, image
//! and CPU (type, count and RAM) are offered to this account, read from the API's list
//! endpoints (the ones Kamatera's own Terraform provider and Apache Libcloud read):
//!
//! - `GET /service/server?datacenter=1` → `[{"id", "name", "category", "subCategory"}]`;
//! - `GET /service/server?capabilities=1&datacenter=DC` → `{"cpuTypes": [{"id",
//!   "cpuCores", "ramMB"}], ...}`;
//! - an image id (`DC:...`): `GET /service/server?images=1&datacenter=DC` → `[{"id", ...}]`;
//!   an image name: the server options `GET /service/server` → `{"diskImages": {DC:
//!   [{"description", "id"}]}}`, where the service itself looks names up at create.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::api::string_or_int;
use super::provider::KamateraProvider;
use super::{KamateraSettings, PROVIDER};
use crate::cloud::CloudError;

#[derive(Debug, Clone, Deserialize)]
struct Datacenter {
    #[serde(deserialize_with = "string_or_int")]
    id: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct Capabilities {
    #[serde(rename = "cpuTypes", default)]
    cpu_types: Vec<CpuType>,
}

#[derive(Debug, Clone, Deserialize)]
struct CpuType {
    id: String,
    #[serde(rename = "cpuCores", default)]
    cores: Vec<Value>,
    #[serde(rename = "ramMB", default)]
    ram_mb: Vec<Value>,
}

#[derive(Debug, Clone, Deserialize)]
struct ImageRow {
    #[serde(deserialize_with = "string_or_int")]
    id: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct ServerOptions {
    #[serde(rename = "diskImages", default)]
    disk_images: BTreeMap<String, Vec<DiskImage>>,
}

#[derive(Debug, Clone, Deserialize)]
struct DiskImage {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    description: Option<String>,
}

/// Numbers of a list that may hold them as numbers or as text.
fn numbers(list: &[Value]) -> Vec<u64> {
    list.iter()
        .filter_map(|v| match v {
            Value::Number(n) => n.as_u64(),
            Value::String(s) => s.trim().parse().ok(),
            _ => None,
        })
        .collect()
}

fn not_found(what: &str, name: impl Into<String>, detail: String) -> CloudError {
    CloudError::NotFound {
        provider: PROVIDER.into(),
        what: what.into(),
        name: name.into(),
        detail,
    }
}

/// What is read once per datacenter.
#[derive(Default)]
struct Seen {
    capabilities: BTreeMap<String, Capabilities>,
    images: BTreeMap<String, Vec<ImageRow>>,
    options: Option<ServerOptions>,
}

impl KamateraProvider {
    async fn get_list<T: serde::de::DeserializeOwned>(
        &self,
        call: &str,
        query: &[(&str, &str)],
    ) -> Result<T, CloudError> {
        let query = Some(query).filter(|q| !q.is_empty());
        self.send(call, reqwest::Method::GET, "/service/server", query, None)
            .await
    }

    /// The API key works and every group's datacenter, image and CPU exist; one line per
    /// group saying what was found.
    pub async fn check(&self) -> Result<Vec<String>, CloudError> {
        self.list_all().await?;
        let datacenters: Vec<Datacenter> = self
            .get_list("GET /service/server?datacenter=1", &[("datacenter", "1")])
            .await?;
        let ids: Vec<&str> = datacenters.iter().map(|d| d.id.as_str()).collect();
        let mut seen = Seen::default();
        let mut lines = vec!["credentials ok".to_string()];
        for (group, s) in &self.groups {
            if !ids.contains(&s.datacenter.as_str()) {
                return Err(not_found(
                    "datacenter",
                    &s.datacenter,
                    format!("group {group}; offered: {}", ids.join(", ")),
                ));
            }
            let mut sizes = Vec::new();
            for size in s.size_list() {
                let mut one = s.clone();
                one.cpu = size.cpu.clone();
                one.ram = size.ram;
                one.sizes.clear();
                self.check_cpu(group, &one, &mut seen).await?;
                sizes.push(format!("CPU {} with {} MB", size.cpu, size.ram.0));
            }
            self.check_image(group, s, &mut seen).await?;
            lines.push(format!(
                "group {group}: datacenter {}, image {}, {} exist",
                s.datacenter,
                s.image,
                sizes.join("; ")
            ));
        }
        Ok(lines)
    }

    async fn check_cpu(
        &self,
        group: &str,
        s: &KamateraSettings,
        seen: &mut Seen,
    ) -> Result<(), CloudError> {
        let dc = s.datacenter.as_str();
        if !seen.capabilities.contains_key(dc) {
            let caps: Capabilities = self
                .get_list(
                    "GET /service/server?capabilities=1",
                    &[("capabilities", "1"), ("datacenter", dc)],
                )
                .await?;
            seen.capabilities.insert(dc.to_string(), caps);
        }
        let caps = seen.capabilities.get(dc).cloned().unwrap_or_default();
        let kind: String = s.cpu.chars().filter(|c| c.is_ascii_alphabetic()).collect();
        let count: Option<u64> = s
            .cpu
            .trim_end_matches(|c: char| c.is_ascii_alphabetic())
            .parse()
            .ok();
        let Some(t) = caps.cpu_types.iter().find(|t| t.id == kind) else {
            let offered: Vec<&str> = caps.cpu_types.iter().map(|t| t.id.as_str()).collect();
            return Err(not_found(
                "CPU type",
                kind,
                format!(
                    "group {group}, cpu {}; datacenter {dc} offers {}",
                    s.cpu,
                    offered.join(", ")
                ),
            ));
        };
        let cores = numbers(&t.cores);
        if !count.is_some_and(|c| cores.is_empty() || cores.contains(&c)) {
            return Err(not_found(
                "CPU count",
                &s.cpu,
                format!("group {group}; type {kind} comes with {cores:?} CPUs in {dc}"),
            ));
        }
        let ram = numbers(&t.ram_mb);
        if !ram.is_empty() && !ram.contains(&s.ram.0) {
            return Err(not_found(
                "RAM size",
                format!("{} MB", s.ram.0),
                format!("group {group}; type {kind} comes with {ram:?} MB in {dc}"),
            ));
        }
        Ok(())
    }

    async fn check_image(
        &self,
        group: &str,
        s: &KamateraSettings,
        seen: &mut Seen,
    ) -> Result<(), CloudError> {
        let dc = s.datacenter.as_str();
        let image = s.image.trim();
        let found = if let Some((image_dc, _)) = image.split_once(':') {
            if image_dc != dc {
                return Err(not_found(
                    "image",
                    image,
                    format!(
                        "group {group}: an image id of datacenter {image_dc}, the group is in {dc}"
                    ),
                ));
            }
            if !seen.images.contains_key(dc) {
                let rows: Vec<ImageRow> = self
                    .get_list(
                        "GET /service/server?images=1",
                        &[("images", "1"), ("datacenter", dc)],
                    )
                    .await?;
                seen.images.insert(dc.to_string(), rows);
            }
            seen.images
                .get(dc)
                .is_some_and(|rows| rows.iter().any(|r| r.id == image))
        } else {
            if seen.options.is_none() {
                let options: ServerOptions = self.get_list("GET /service/server", &[]).await?;
                seen.options = Some(options);
            }
            seen.options
                .as_ref()
                .and_then(|o| o.disk_images.get(dc))
                .is_some_and(|list| {
                    list.iter().any(|i| {
                        i.description.as_deref().map(str::trim) == Some(image)
                            || i.id.as_deref() == Some(image)
                    })
                })
        };
        if found {
            Ok(())
        } else {
            Err(not_found(
                "image",
                image,
                format!("group {group}, datacenter {dc}"),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_read_numbers_as_numbers_or_text() {
        let caps: Capabilities = serde_json::from_str(
            r#"{"cpuTypes": [{"id": "B", "name": "Type B", "cpuCores": [1, "2", 4], "ramMB": [1024, "2048"]}], "diskSizeGB": [5]}"#,
        )
        .expect("capabilities");
        assert_eq!(numbers(&caps.cpu_types[0].cores), vec![1, 2, 4]);
        assert_eq!(numbers(&caps.cpu_types[0].ram_mb), vec![1024, 2048]);
        let dcs: Vec<Datacenter> = serde_json::from_str(
            r#"[{"id": "EU", "name": "The Netherlands", "category": "Europe", "subCategory": "Amsterdam"}]"#,
        )
        .expect("datacenters");
        assert_eq!(dcs[0].id, "EU");
        let o: ServerOptions = serde_json::from_str(
            r#"{"datacenters": {"EU": "EU: The Netherlands"}, "cpu": ["1B"], "diskImages": {"EU": [{"description": "ubuntu_server_24.04_64-bit", "id": "EU:1", "sizeGB": 10}]}}"#,
        )
        .expect("options");
        assert_eq!(o.disk_images["EU"][0].id.as_deref(), Some("EU:1"));
    }
}
