//! Keystone v3: token issue, expiry and the service catalog.

use std::fmt;
use std::time::{Duration, SystemTime};

use serde::Deserialize;
use serde_json::{json, Value};

use super::credentials::{AuthMethod, DomainRef, Interface, OpenStackCredentials, ProjectScope};
use super::http::{api_error, error_message, transport};
use super::time::parse_timestamp;
use super::PROVIDER;
use crate::cloud::CloudError;

/// A token with the endpoints this provider uses, resolved from its catalog.
#[derive(Clone)]
pub struct Session {
    pub token: String,
    pub expires_at: SystemTime,
    /// Renew once this instant has passed (ahead of `expires_at`).
    pub renew_after: SystemTime,
    pub compute: String,
    pub image: Option<String>,
    pub network: Option<String>,
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("token", &"<redacted>")
            .field("expires_at", &self.expires_at)
            .field("compute", &self.compute)
            .field("image", &self.image)
            .field("network", &self.network)
            .finish()
    }
}

impl Session {
    pub fn needs_renewal(&self, now: SystemTime) -> bool {
        now >= self.renew_after
    }
}

fn domain_json(d: &DomainRef) -> Value {
    match d {
        DomainRef::Id(id) => json!({ "id": id }),
        DomainRef::Name(name) => json!({ "name": name }),
    }
}

/// The JSON body of `POST /v3/auth/tokens` for these credentials.
pub fn auth_body(creds: &OpenStackCredentials) -> Value {
    match &creds.auth {
        AuthMethod::Password {
            username,
            password,
            user_domain,
            project,
        } => {
            let scope = match project {
                ProjectScope::Id(id) => json!({ "project": { "id": id } }),
                ProjectScope::Name { name, domain } => {
                    json!({ "project": { "name": name, "domain": domain_json(domain) } })
                }
            };
            json!({ "auth": {
                "identity": {
                    "methods": ["password"],
                    "password": { "user": {
                        "name": username,
                        "domain": domain_json(user_domain),
                        "password": password,
                    } }
                },
                "scope": scope,
            } })
        }
        AuthMethod::ApplicationCredentialId { id, secret } => json!({ "auth": { "identity": {
            "methods": ["application_credential"],
            "application_credential": { "id": id, "secret": secret },
        } } }),
        AuthMethod::ApplicationCredentialName {
            name,
            username,
            user_domain,
            secret,
        } => json!({ "auth": { "identity": {
            "methods": ["application_credential"],
            "application_credential": {
                "name": name,
                "secret": secret,
                "user": { "name": username, "domain": domain_json(user_domain) },
            },
        } } }),
    }
}

#[derive(Deserialize)]
struct TokenResponse {
    token: TokenBody,
}

#[derive(Deserialize)]
struct TokenBody {
    expires_at: String,
    #[serde(default)]
    catalog: Vec<CatalogService>,
}

#[derive(Deserialize)]
struct CatalogService {
    #[serde(rename = "type")]
    service_type: String,
    #[serde(default)]
    endpoints: Vec<CatalogEndpoint>,
}

#[derive(Deserialize)]
struct CatalogEndpoint {
    interface: String,
    #[serde(default)]
    region: Option<String>,
    #[serde(default)]
    region_id: Option<String>,
    url: String,
}

fn find_endpoint(
    catalog: &[CatalogService],
    service_type: &str,
    interface: Interface,
    region: Option<&str>,
) -> Option<String> {
    catalog
        .iter()
        .filter(|s| s.service_type == service_type)
        .flat_map(|s| s.endpoints.iter())
        .find(|e| {
            e.interface == interface.as_str()
                && region.is_none_or(|r| {
                    e.region_id.as_deref() == Some(r) || e.region.as_deref() == Some(r)
                })
        })
        .map(|e| e.url.trim_end_matches('/').to_string())
}

fn describe_catalog(catalog: &[CatalogService]) -> String {
    let mut parts: Vec<String> = Vec::new();
    for s in catalog {
        for e in &s.endpoints {
            parts.push(format!(
                "{}/{}/{}",
                s.service_type,
                e.interface,
                e.region_id
                    .as_deref()
                    .or(e.region.as_deref())
                    .unwrap_or("-")
            ));
        }
    }
    if parts.is_empty() {
        "the catalog is empty".into()
    } else {
        format!("available: {}", parts.join(", "))
    }
}

/// How long before expiry a token is renewed: 5 minutes, or half the lifetime of
/// short-lived tokens.
fn renewal_margin(lifetime: Duration) -> Duration {
    (lifetime / 2).min(Duration::from_secs(300))
}

/// Issues a new token and resolves the endpoints from its catalog.
pub async fn authenticate(
    http: &reqwest::Client,
    creds: &OpenStackCredentials,
    gate: &crate::cloud::http::RetryAfterGate,
) -> Result<Session, CloudError> {
    let call = "POST /v3/auth/tokens";
    gate.wait(PROVIDER).await;
    let resp = http
        .post(creds.tokens_url())
        .json(&auth_body(creds))
        .send()
        .await
        .map_err(|e| transport(call, &e))?;
    gate.note(resp.status().as_u16(), resp.headers());
    let status = resp.status();
    if status == reqwest::StatusCode::UNAUTHORIZED || status == reqwest::StatusCode::FORBIDDEN {
        let text = crate::cloud::http::read_text(PROVIDER, call, resp)
            .await
            .unwrap_or_else(|e| e.to_string());
        return Err(CloudError::Auth {
            provider: PROVIDER.into(),
            message: format!(
                "Keystone at {} refused the credentials (HTTP {}): {}",
                creds.auth_url,
                status.as_u16(),
                error_message(&text)
            ),
        });
    }
    if !status.is_success() {
        let text = crate::cloud::http::read_text(PROVIDER, call, resp)
            .await
            .unwrap_or_else(|e| e.to_string());
        return Err(api_error(call, status.as_u16(), &text));
    }
    let token = resp
        .headers()
        .get("x-subject-token")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .ok_or_else(|| CloudError::Auth {
            provider: PROVIDER.into(),
            message: "Keystone response has no X-Subject-Token header".into(),
        })?;
    let bytes = crate::cloud::http::read_body(PROVIDER, call, resp).await?;
    let body: TokenResponse = serde_json::from_slice(&bytes).map_err(|e| CloudError::Auth {
        provider: PROVIDER.into(),
        message: format!("unexpected Keystone token response: {e}"),
    })?;
    let expires_at = parse_timestamp(&body.token.expires_at).ok_or_else(|| CloudError::Auth {
        provider: PROVIDER.into(),
        message: format!("cannot parse token expires_at '{}'", body.token.expires_at),
    })?;
    let now = SystemTime::now();
    let lifetime = expires_at.duration_since(now).unwrap_or_default();
    let renew_after = expires_at - renewal_margin(lifetime);

    let region = creds.region.as_deref();
    let catalog = &body.token.catalog;
    let compute = find_endpoint(catalog, "compute", creds.interface, region).ok_or_else(|| {
        CloudError::Other {
            provider: PROVIDER.into(),
            message: format!(
                "no 'compute' endpoint with interface {} in region {} in the service catalog ({})",
                creds.interface.as_str(),
                region.unwrap_or("(any)"),
                describe_catalog(catalog)
            ),
        }
    })?;
    Ok(Session {
        token,
        expires_at,
        renew_after,
        compute,
        image: find_endpoint(catalog, "image", creds.interface, region),
        network: find_endpoint(catalog, "network", creds.interface, region),
    })
}
