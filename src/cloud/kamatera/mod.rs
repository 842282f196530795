//! Kamatera: the cloudcli REST API, ownership in server tags.

use std::collections::BTreeMap;
use std::path::Path;

use async_trait::async_trait;
use serde::Deserialize;

use crate::cloud::{CloudError, CloudProvider, CreateRequest, Server};

/// Provider name used in errors, logs and [`crate::cloud::Server::provider`].
pub const PROVIDER: &str = "kamatera";

/// Per-node-group Kamatera settings (the `kamatera` key of a node group).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KamateraSettings {}

/// Account credentials, from the file named by `KAMATERA_CREDENTIALS_FILE`.
#[derive(Clone)]
pub struct KamateraCredentials {}

impl KamateraCredentials {
    pub fn from_file(path: &Path) -> Result<Self, CloudError> {
        Err(CloudError::Other {
            provider: PROVIDER.into(),
            message: format!("{}: the kamatera provider is not implemented yet", path.display()),
        })
    }
}

pub struct KamateraProvider {}

impl KamateraProvider {
    pub fn new(
        _credentials: KamateraCredentials,
        _groups: BTreeMap<String, KamateraSettings>,
    ) -> Result<Self, CloudError> {
        Ok(KamateraProvider {})
    }
}

fn unimplemented_err() -> CloudError {
    CloudError::Other {
        provider: PROVIDER.into(),
        message: "the kamatera provider is not implemented yet".into(),
    }
}

#[async_trait]
impl CloudProvider for KamateraProvider {
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
