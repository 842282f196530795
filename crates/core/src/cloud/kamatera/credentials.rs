//! The Kamatera credentials file (YAML), named by `KAMATERA_CREDENTIALS_FILE`:
//!
//! ```yaml
//! url: https://cloudcli.cloudwm.com   # optional
//! clientId: 1a2b3c...
//! secret: 9f8e7d...
//! ```

use std::fmt;
use std::path::Path;

use serde::Deserialize;

use super::PROVIDER;
use crate::cloud::CloudError;

/// The public cloudcli API endpoint.
pub const DEFAULT_URL: &str = "https://cloudcli.cloudwm.com";

/// API key of a Kamatera account. `Debug` redacts the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct KamateraCredentials {
    /// Base URL of the cloudcli API, without a trailing `/`.
    pub url: String,
    pub client_id: String,
    pub secret: String,
}

impl fmt::Debug for KamateraCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KamateraCredentials")
            .field("url", &self.url)
            .field("client_id", &self.client_id)
            .field("secret", &"<redacted>")
            .finish()
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Raw {
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    client_id: Option<String>,
    #[serde(default)]
    secret: Option<String>,
}

impl KamateraCredentials {
    pub fn new(
        url: impl Into<String>,
        client_id: impl Into<String>,
        secret: impl Into<String>,
    ) -> Self {
        KamateraCredentials {
            url: url.into().trim_end_matches('/').to_string(),
            client_id: client_id.into(),
            secret: secret.into(),
        }
    }

    /// Loads a credentials file; errors name the file and the key.
    pub fn from_file(path: &Path) -> Result<Self, CloudError> {
        let text = std::fs::read_to_string(path).map_err(|e| CloudError::Other {
            provider: PROVIDER.into(),
            message: format!("{}: cannot read credentials file: {e}", path.display()),
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses the YAML text of a credentials file.
    pub fn from_yaml_str(text: &str) -> Result<Self, CloudError> {
        Self::parse(text, "credentials")
    }

    fn parse(text: &str, source: &str) -> Result<Self, CloudError> {
        let err = |message: String| CloudError::Other {
            provider: PROVIDER.into(),
            message: format!("{source}: {message}"),
        };
        // serde_yaml's messages quote the offending key, never a value.
        let raw: Option<Raw> = crate::yaml::from_str(text).map_err(|e| {
            err(format!(
                "not a Kamatera credentials file (keys url, clientId, secret): {}",
                crate::yaml::explain_serde_message(&e.to_string())
            ))
        })?;
        let raw = raw.ok_or_else(|| err("empty; expected the keys clientId and secret".into()))?;
        let nonempty =
            |v: Option<String>| v.map(|s| s.trim().to_string()).filter(|s| !s.is_empty());
        let client_id = nonempty(raw.client_id).ok_or_else(|| {
            err("missing clientId: expected the Client ID of a Kamatera API key (console → API Keys)".into())
        })?;
        let secret = nonempty(raw.secret).ok_or_else(|| {
            err("missing secret: expected the Secret of the Kamatera API key".into())
        })?;
        let url = nonempty(raw.url).unwrap_or_else(|| DEFAULT_URL.to_string());
        if !(url.starts_with("https://") || url.starts_with("http://")) {
            return Err(err(format!(
                "url `{url}` must be an http:// or https:// URL, e.g. {DEFAULT_URL}"
            )));
        }
        Ok(KamateraCredentials::new(url, client_id, secret))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_redacts() {
        let c = KamateraCredentials::from_yaml_str("clientId: abc\nsecret: s3cr3t-value\n")
            .expect("parses");
        assert_eq!(c.url, DEFAULT_URL);
        assert_eq!(c.client_id, "abc");
        let dbg = format!("{c:?}");
        assert!(
            !dbg.contains("s3cr3t-value") && dbg.contains("<redacted>"),
            "{dbg}"
        );
        let c = KamateraCredentials::from_yaml_str(
            "url: http://127.0.0.1:1234/\nclientId: abc\nsecret: x\n",
        )
        .expect("parses");
        assert_eq!(c.url, "http://127.0.0.1:1234");
    }

    #[test]
    fn errors_name_the_key() {
        let e = KamateraCredentials::from_yaml_str("clientId: abc\n").unwrap_err();
        assert!(e.to_string().contains("missing secret"), "{e}");
        let e = KamateraCredentials::from_yaml_str("secret: hunter2-secret\n").unwrap_err();
        assert!(e.to_string().contains("missing clientId"), "{e}");
        assert!(!e.to_string().contains("hunter2"), "{e}");
        let e = KamateraCredentials::from_yaml_str("clientId: a\nsecret: b\nclient_secret: c\n")
            .unwrap_err();
        assert!(e.to_string().contains("client_secret"), "{e}");
        let e = KamateraCredentials::from_yaml_str("clientID: a\nsecret: b\n").unwrap_err();
        assert!(
            e.to_string()
                .contains("unknown key `clientID`; did you mean `clientId`?"),
            "{e}"
        );
        let e = KamateraCredentials::from_yaml_str("clientId: a\nsecret: b\nurl: ftp://x\n")
            .unwrap_err();
        assert!(e.to_string().contains("ftp://x"), "{e}");
        let e = KamateraCredentials::from_yaml_str("").unwrap_err();
        assert!(e.to_string().contains("empty"), "{e}");
    }
}
