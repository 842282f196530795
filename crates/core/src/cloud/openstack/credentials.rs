//! The `OS_*` credentials file users already have (the YAML form of an openrc file).

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Deserialize;

/// Keys understood in a credentials file. Anything else starting with `OS_` is
/// accepted with a warning; other keys are an error.
const KNOWN_KEYS: &[&str] = &[
    "OS_AUTH_URL",
    "OS_IDENTITY_API_VERSION",
    "OS_USERNAME",
    "OS_PASSWORD",
    "OS_USER_DOMAIN_NAME",
    "OS_USER_DOMAIN_ID",
    "OS_PROJECT_DOMAIN_NAME",
    "OS_PROJECT_DOMAIN_ID",
    "OS_TENANT_ID",
    "OS_TENANT_NAME",
    "OS_PROJECT_ID",
    "OS_PROJECT_NAME",
    "OS_REGION",
    "OS_REGION_NAME",
    "OS_INTERFACE",
    "OS_ENDPOINT_TYPE",
    "OS_AUTH_TYPE",
    "OS_APPLICATION_CREDENTIAL_ID",
    "OS_APPLICATION_CREDENTIAL_NAME",
    "OS_APPLICATION_CREDENTIAL_SECRET",
    "OS_CACERT",
    "OS_INSECURE",
];

/// Error loading a credentials file; the message names the offending key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{source_name}: {message}")]
pub struct CredentialsError {
    /// File path, or `credentials` when parsed from a string.
    pub source_name: String,
    pub message: String,
}

/// A Keystone domain, by name or by id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DomainRef {
    Name(String),
    Id(String),
}

/// The project a token is scoped to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProjectScope {
    Id(String),
    Name { name: String, domain: DomainRef },
}

/// How to authenticate against Keystone v3.
#[derive(Clone, PartialEq, Eq)]
pub enum AuthMethod {
    Password {
        username: String,
        password: String,
        user_domain: DomainRef,
        project: ProjectScope,
    },
    /// Application credentials are already scoped to a project.
    ApplicationCredentialId { id: String, secret: String },
    ApplicationCredentialName {
        name: String,
        username: String,
        user_domain: DomainRef,
        secret: String,
    },
}

impl fmt::Debug for AuthMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AuthMethod::Password {
                username,
                user_domain,
                project,
                ..
            } => f
                .debug_struct("Password")
                .field("username", username)
                .field("password", &"<redacted>")
                .field("user_domain", user_domain)
                .field("project", project)
                .finish(),
            AuthMethod::ApplicationCredentialId { id, .. } => f
                .debug_struct("ApplicationCredentialId")
                .field("id", id)
                .field("secret", &"<redacted>")
                .finish(),
            AuthMethod::ApplicationCredentialName {
                name,
                username,
                user_domain,
                ..
            } => f
                .debug_struct("ApplicationCredentialName")
                .field("name", name)
                .field("username", username)
                .field("user_domain", user_domain)
                .field("secret", &"<redacted>")
                .finish(),
        }
    }
}

/// Endpoint interface to pick from the service catalog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interface {
    Public,
    Internal,
    Admin,
}

impl Interface {
    pub fn as_str(self) -> &'static str {
        match self {
            Interface::Public => "public",
            Interface::Internal => "internal",
            Interface::Admin => "admin",
        }
    }
}

/// OpenStack credentials as loaded from an `OS_*` YAML file. `Debug` redacts secrets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenStackCredentials {
    /// Keystone URL as given (with or without the `/v3` suffix).
    pub auth_url: String,
    pub auth: AuthMethod,
    pub region: Option<String>,
    pub interface: Interface,
    /// Extra PEM root certificate(s) to trust.
    pub cacert: Option<PathBuf>,
    /// Skip TLS verification. Only ever true when the file says so explicitly.
    pub insecure: bool,
}

/// A scalar YAML value: the file may hold strings, numbers or booleans.
#[derive(Deserialize)]
#[serde(untagged)]
enum Scalar {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Null(()),
    Other(serde::de::IgnoredAny),
}

/// The single place this module parses YAML.
fn parse_yaml<T: DeserializeOwned>(s: &str) -> Result<T, String> {
    crate::yaml::from_str(s).map_err(|e| e.to_string())
}

impl OpenStackCredentials {
    /// Loads a credentials file.
    pub fn from_file(path: &Path) -> Result<Self, CredentialsError> {
        let source_name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| CredentialsError {
            source_name: source_name.clone(),
            message: format!("cannot read credentials file: {e}"),
        })?;
        Self::parse(&text, &source_name)
    }

    /// Parses the YAML text of a credentials file.
    pub fn from_yaml_str(text: &str) -> Result<Self, CredentialsError> {
        Self::parse(text, "credentials")
    }

    fn parse(text: &str, source_name: &str) -> Result<Self, CredentialsError> {
        let err = |message: String| CredentialsError {
            source_name: source_name.to_string(),
            message,
        };
        let raw: Option<BTreeMap<String, Scalar>> = parse_yaml(text).map_err(|e| {
            err(format!(
                "not a YAML mapping of OS_* keys to strings or numbers: {e}"
            ))
        })?;
        let raw = raw.unwrap_or_default();
        let mut values: BTreeMap<String, String> = BTreeMap::new();
        for (key, value) in raw {
            if !key.starts_with("OS_") {
                return Err(err(format!(
                    "unexpected key '{key}': only OS_* keys are allowed in an OpenStack credentials file"
                )));
            }
            if !KNOWN_KEYS.contains(&key.as_str()) {
                // Other OS_* keys of an openrc are ignored; one a typo away from a known
                // key is a mistake that would otherwise surface as a failed login.
                if let Some(meant) = KNOWN_KEYS
                    .iter()
                    .find(|k| strsim::levenshtein(k, &key) <= 2)
                {
                    return Err(err(format!("unknown key '{key}'; did you mean '{meant}'?")));
                }
                tracing::warn!(key = %key, file = %source_name, "ignoring unknown OpenStack credentials key");
            }
            let is_text = matches!(value, Scalar::Str(_));
            let text = match value {
                Scalar::Bool(b) => b.to_string(),
                Scalar::Int(i) => i.to_string(),
                Scalar::Float(f) => f.to_string(),
                Scalar::Str(s) => s,
                Scalar::Null(()) => continue,
                Scalar::Other(_) => {
                    return Err(err(format!(
                        "key '{key}' must be a string or a number, not a list or mapping"
                    )))
                }
            };
            if !is_text && !matches!(key.as_str(), "OS_IDENTITY_API_VERSION" | "OS_INSECURE") {
                // YAML turned it into a number: leading zeros or exponents are lost.
                tracing::warn!(key = %key, file = %source_name, "OpenStack credentials value is not a quoted string; if authentication fails, quote it");
            }
            let text = text.trim().to_string();
            if !text.is_empty() {
                values.insert(key, text);
            }
        }
        let get = |k: &str| values.get(k).cloned();
        let first = |a: &str, b: &str| get(a).or_else(|| get(b));

        let auth_url = get("OS_AUTH_URL").ok_or_else(|| {
            err("missing OS_AUTH_URL: expected the Keystone URL, e.g. https://keystone.example.org:5000/v3".into())
        })?;
        if !(auth_url.starts_with("https://") || auth_url.starts_with("http://")) {
            return Err(err(format!(
                "OS_AUTH_URL '{auth_url}' must be an http:// or https:// URL"
            )));
        }
        if let Some(v) = get("OS_IDENTITY_API_VERSION") {
            if !matches!(v.as_str(), "3" | "3.0" | "v3") {
                return Err(err(format!(
                    "OS_IDENTITY_API_VERSION is '{v}': only Keystone v3 (3) is supported"
                )));
            }
        }

        let user_domain = || {
            get("OS_USER_DOMAIN_ID")
                .map(DomainRef::Id)
                .or_else(|| get("OS_USER_DOMAIN_NAME").map(DomainRef::Name))
        };
        let app_secret = get("OS_APPLICATION_CREDENTIAL_SECRET");
        let app_id = get("OS_APPLICATION_CREDENTIAL_ID");
        let app_name = get("OS_APPLICATION_CREDENTIAL_NAME");
        let auth_type = get("OS_AUTH_TYPE");
        let wants_app = app_id.is_some()
            || app_name.is_some()
            || app_secret.is_some()
            || auth_type.as_deref() == Some("v3applicationcredential");

        let auth = if wants_app {
            let secret = app_secret.ok_or_else(|| {
                err("missing OS_APPLICATION_CREDENTIAL_SECRET: expected the secret of the application credential".into())
            })?;
            if let Some(id) = app_id {
                AuthMethod::ApplicationCredentialId { id, secret }
            } else if let Some(name) = app_name {
                let username = get("OS_USERNAME").ok_or_else(|| {
                    err("missing OS_USERNAME: an application credential given by OS_APPLICATION_CREDENTIAL_NAME needs its owner's user name (or give OS_APPLICATION_CREDENTIAL_ID instead)".into())
                })?;
                let user_domain = user_domain().ok_or_else(|| {
                    err("missing OS_USER_DOMAIN_NAME or OS_USER_DOMAIN_ID: expected the domain of OS_USERNAME, e.g. Default".into())
                })?;
                AuthMethod::ApplicationCredentialName {
                    name,
                    username,
                    user_domain,
                    secret,
                }
            } else {
                return Err(err("missing OS_APPLICATION_CREDENTIAL_ID: expected the id (or OS_APPLICATION_CREDENTIAL_NAME) of the application credential".into()));
            }
        } else {
            let username = get("OS_USERNAME").ok_or_else(|| {
                err("missing OS_USERNAME: expected the user name for password authentication (or OS_APPLICATION_CREDENTIAL_ID and _SECRET)".into())
            })?;
            let password = get("OS_PASSWORD").ok_or_else(|| {
                err("missing OS_PASSWORD: expected the password of OS_USERNAME".into())
            })?;
            let user_domain = user_domain().ok_or_else(|| {
                err("missing OS_USER_DOMAIN_NAME or OS_USER_DOMAIN_ID: expected the domain of OS_USERNAME, e.g. Default".into())
            })?;
            let project = if let Some(id) = first("OS_PROJECT_ID", "OS_TENANT_ID") {
                ProjectScope::Id(id)
            } else if let Some(name) = first("OS_PROJECT_NAME", "OS_TENANT_NAME") {
                let domain = get("OS_PROJECT_DOMAIN_ID")
                    .map(DomainRef::Id)
                    .or_else(|| get("OS_PROJECT_DOMAIN_NAME").map(DomainRef::Name))
                    .unwrap_or_else(|| user_domain.clone());
                ProjectScope::Name { name, domain }
            } else {
                return Err(err("missing OS_PROJECT_ID (or OS_TENANT_ID, OS_PROJECT_NAME, OS_TENANT_NAME): expected the project to scope the token to".into()));
            };
            AuthMethod::Password {
                username,
                password,
                user_domain,
                project,
            }
        };

        let interface = match first("OS_INTERFACE", "OS_ENDPOINT_TYPE")
            .map(|s| s.to_ascii_lowercase())
            .as_deref()
        {
            None | Some("public") | Some("publicurl") => Interface::Public,
            Some("internal") | Some("internalurl") => Interface::Internal,
            Some("admin") | Some("adminurl") => Interface::Admin,
            Some(other) => {
                return Err(err(format!(
                    "OS_INTERFACE is '{other}': expected public, internal or admin"
                )))
            }
        };

        let insecure = match get("OS_INSECURE")
            .map(|s| s.to_ascii_lowercase())
            .as_deref()
        {
            None | Some("false") | Some("0") | Some("no") => false,
            Some("true") | Some("1") | Some("yes") => true,
            Some(other) => {
                return Err(err(format!(
                    "OS_INSECURE is '{other}': expected true or false"
                )))
            }
        };
        if insecure {
            tracing::warn!(file = %source_name, "OS_INSECURE is set: TLS certificates of the OpenStack API will NOT be verified");
        }

        Ok(OpenStackCredentials {
            auth_url,
            auth,
            region: first("OS_REGION_NAME", "OS_REGION"),
            interface,
            cacert: get("OS_CACERT").map(PathBuf::from),
            insecure,
        })
    }

    /// The URL to `POST` password/application-credential auth requests to.
    pub fn tokens_url(&self) -> String {
        let base = self.auth_url.trim_end_matches('/');
        if base.ends_with("/v3") {
            format!("{base}/auth/tokens")
        } else {
            format!("{base}/v3/auth/tokens")
        }
    }
}
