//! Proxmox VE: clone a template VM per node, ownership in VM tags.

use std::collections::BTreeMap;
use std::path::Path;

use async_trait::async_trait;
use serde::Deserialize;

use crate::cloud::{CloudError, CloudProvider, CreateRequest, Server};

/// Provider name used in errors, logs and [`crate::cloud::Server::provider`].
pub const PROVIDER: &str = "proxmox";

/// Per-node-group Proxmox settings (the `proxmox` key of a node group).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProxmoxSettings {}

/// Account credentials, from the file named by `PROXMOX_CREDENTIALS_FILE`.
#[derive(Clone)]
pub struct ProxmoxCredentials {}

impl ProxmoxCredentials {
    pub fn from_file(path: &Path) -> Result<Self, CloudError> {
        Err(CloudError::Other {
            provider: PROVIDER.into(),
            message: format!("{}: the proxmox provider is not implemented yet", path.display()),
        })
    }
}

pub struct ProxmoxProvider {}

impl ProxmoxProvider {
    pub fn new(
        _credentials: ProxmoxCredentials,
        _groups: BTreeMap<String, ProxmoxSettings>,
    ) -> Result<Self, CloudError> {
        Ok(ProxmoxProvider {})
    }
}

fn unimplemented_err() -> CloudError {
    CloudError::Other {
        provider: PROVIDER.into(),
        message: "the proxmox provider is not implemented yet".into(),
    }
}

#[async_trait]
impl CloudProvider for ProxmoxProvider {
    fn name(&self) -> &str {
        PROVIDER
    }
    async fn list_servers(&self, _cluster: &str) -> Result<Vec<Server>, CloudError> {
        Err(unimplemented_err())
    }
    async fn create_server(&self, _req: &CreateRequest) -> Result<Server, CloudError> {
        Err(unimplemented_err())
    }
    async fn delete_server(&self, _id: &str) -> Result<(), CloudError> {
        Err(unimplemented_err())
    }
}
