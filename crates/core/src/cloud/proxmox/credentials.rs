//! The Proxmox credentials file (YAML, named by `PROXMOX_CREDENTIALS_FILE`):
//!
//! ```yaml
//! url: https://pve1.example.org:8006     # /api2/json is appended when missing
//! tokenId: nodewright@pve!autoscaler     # USER@REALM!TOKENID
//! tokenSecret: 1b2c...                   # or: username + password (ticket auth)
//! caFile: /etc/nodewright/pve-ca.pem     # optional: trust this CA (PEM)
//! fingerprint: "AB:CD:..."               # optional: pin the server certificate (SHA-256)
//! insecureSkipTlsVerify: false           # explicit opt-out of TLS verification
//! ```

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{other, PROVIDER};
use crate::cloud::CloudError;

/// How requests authenticate.
#[derive(Clone, PartialEq, Eq)]
pub enum ProxmoxAuth {
    /// `Authorization: PVEAPIToken=USER@REALM!TOKENID=SECRET` on every request.
    Token { token_id: String, secret: String },
    /// A ticket from `POST /access/ticket`: cookie `PVEAuthCookie`, plus the
    /// `CSRFPreventionToken` header on writes; renewed before its 2 h lifetime ends.
    Password { username: String, password: String },
}

impl fmt::Debug for ProxmoxAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProxmoxAuth::Token { token_id, .. } => f
                .debug_struct("Token")
                .field("token_id", token_id)
                .field("secret", &"<redacted>")
                .finish(),
            ProxmoxAuth::Password { username, .. } => f
                .debug_struct("Password")
                .field("username", username)
                .field("password", &"<redacted>")
                .finish(),
        }
    }
}

/// Which server certificates are trusted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlsTrust {
    /// The system's web PKI roots (plus `ca_file`, when given).
    Verify { ca_file: Option<PathBuf> },
    /// Exactly the certificate with this SHA-256 fingerprint (name and expiry are not
    /// checked: the pin is the trust).
    Fingerprint([u8; 32]),
    /// No verification at all (`insecureSkipTlsVerify: true`).
    Insecure,
}

/// Proxmox VE credentials as loaded from a YAML file. `Debug` redacts secrets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxmoxCredentials {
    /// API base URL ending in `/api2/json`.
    pub url: String,
    pub auth: ProxmoxAuth,
    pub tls: TlsTrust,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Raw {
    url: Option<String>,
    token_id: Option<String>,
    token_secret: Option<String>,
    username: Option<String>,
    password: Option<String>,
    ca_file: Option<PathBuf>,
    fingerprint: Option<String>,
    #[serde(default)]
    insecure_skip_tls_verify: bool,
}

/// Parses `AB:CD:...` (or plain hex) into a SHA-256 digest.
pub fn parse_fingerprint(s: &str) -> Option<[u8; 32]> {
    let hex: String = s
        .chars()
        .filter(|c| *c != ':' && !c.is_whitespace())
        .collect();
    if hex.len() != 64 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// `AB:CD:...` form of a fingerprint, as Proxmox shows it.
pub fn format_fingerprint(fp: &[u8]) -> String {
    fp.iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

impl ProxmoxCredentials {
    /// Loads a credentials file; errors name the file and the offending key.
    pub fn from_file(path: &Path) -> Result<Self, CloudError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            other(format!(
                "{}: cannot read credentials file: {e}",
                path.display()
            ))
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses the YAML text of a credentials file.
    pub fn from_yaml_str(text: &str) -> Result<Self, CloudError> {
        Self::parse(text, "credentials")
    }

    fn parse(text: &str, source: &str) -> Result<Self, CloudError> {
        let err = |m: String| other(format!("{source}: {m}"));
        let raw: Raw = crate::yaml::from_str(text).map_err(|e| {
            err(format!(
                "not a valid Proxmox credentials file: {}",
                crate::yaml::explain_serde_message(&e.to_string())
            ))
        })?;
        let nonempty =
            |v: Option<String>| v.map(|s| s.trim().to_string()).filter(|s| !s.is_empty());
        let url = nonempty(raw.url).ok_or_else(|| {
            err("missing url: expected the API URL, e.g. https://pve1.example.org:8006".into())
        })?;
        if !(url.starts_with("https://") || url.starts_with("http://")) {
            return Err(err(format!("url '{url}' must be an https:// URL")));
        }
        let base = url.trim_end_matches('/');
        let url = if base.ends_with("/api2/json") {
            base.to_string()
        } else {
            format!("{base}/api2/json")
        };
        let token_id = nonempty(raw.token_id);
        let token_secret = nonempty(raw.token_secret);
        let username = nonempty(raw.username);
        let password = nonempty(raw.password);
        let auth = match (token_id, token_secret, username, password) {
            (Some(_), Some(_), Some(_), _) | (Some(_), Some(_), _, Some(_)) => {
                return Err(err(
                    "both tokenId/tokenSecret and username/password are set: use one".into(),
                ))
            }
            (Some(token_id), Some(secret), None, None) => {
                let valid = token_id
                    .split_once('!')
                    .is_some_and(|(user, tok)| user.contains('@') && !tok.is_empty());
                if !valid {
                    return Err(err(format!(
                        "tokenId '{token_id}' must look like USER@REALM!TOKENID, e.g. nodewright@pve!autoscaler"
                    )));
                }
                ProxmoxAuth::Token { token_id, secret }
            }
            (Some(_), None, _, _) => {
                return Err(err(
                    "missing tokenSecret: expected the secret of tokenId".into()
                ))
            }
            (None, Some(_), _, _) => {
                return Err(err(
                    "missing tokenId: expected USER@REALM!TOKENID for tokenSecret".into(),
                ))
            }
            (None, None, Some(username), Some(password)) => {
                if !username.contains('@') {
                    return Err(err(format!(
                        "username '{username}' must include the realm, e.g. {username}@pve"
                    )));
                }
                ProxmoxAuth::Password { username, password }
            }
            (None, None, Some(_), None) => {
                return Err(err(
                    "missing password: expected the password of username".into()
                ))
            }
            (None, None, None, Some(_)) => {
                return Err(err(
                    "missing username: expected USER@REALM for password".into()
                ))
            }
            (None, None, None, None) => {
                return Err(err(
                    "missing tokenId and tokenSecret (or username and password)".into(),
                ))
            }
        };
        let fingerprint = nonempty(raw.fingerprint);
        let tls = match (raw.insecure_skip_tls_verify, fingerprint, raw.ca_file) {
            (true, None, None) => {
                tracing::warn!(file = %source, "insecureSkipTlsVerify is set: the Proxmox API certificate will NOT be verified");
                TlsTrust::Insecure
            }
            (true, _, _) => {
                return Err(err(
                    "insecureSkipTlsVerify contradicts caFile/fingerprint: remove one".into(),
                ))
            }
            (false, Some(_), Some(_)) => {
                return Err(err("caFile and fingerprint are both set: use one".into()))
            }
            (false, Some(fp), None) => TlsTrust::Fingerprint(parse_fingerprint(&fp).ok_or_else(
                || {
                    err(format!(
                    "fingerprint '{fp}' is not a SHA-256 fingerprint (64 hex digits, optionally colon-separated)"
                ))
                },
            )?),
            (false, None, ca_file) => TlsTrust::Verify { ca_file },
        };
        let _ = PROVIDER;
        Ok(ProxmoxCredentials { url, auth, tls })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_and_password_files() {
        let c = ProxmoxCredentials::from_yaml_str(
            "url: https://pve:8006/\ntokenId: nw@pve!auto\ntokenSecret: s3cr3t\n",
        )
        .expect("parses");
        assert_eq!(c.url, "https://pve:8006/api2/json");
        assert!(matches!(c.auth, ProxmoxAuth::Token { .. }));
        assert!(!format!("{c:?}").contains("s3cr3t"));
        let c = ProxmoxCredentials::from_yaml_str(
            "url: https://pve:8006\nusername: root@pam\npassword: hunter2\nfingerprint: \"AA:bb:cc:dd:ee:ff:00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff:00:11:22:33:44:55:66:77:88:99\"\n",
        )
        .expect("parses");
        assert!(!format!("{c:?}").contains("hunter2"));
        assert!(matches!(c.tls, TlsTrust::Fingerprint(fp) if fp[0] == 0xaa));
    }

    #[test]
    fn errors_name_the_key() {
        let e = |t: &str| {
            ProxmoxCredentials::from_yaml_str(t)
                .expect_err("rejected")
                .to_string()
        };
        assert!(e("tokenId: a@b!c\ntokenSecret: x\n").contains("missing url"));
        assert!(e("url: https://x\ntokenId: a@b!c\n").contains("tokenSecret"));
        assert!(e("url: https://x\ntokenId: nope\ntokenSecret: x\n").contains("tokenId"));
        assert!(
            e("url: https://x\nusername: a@b\npassword: p\nfingerprint: zz\n")
                .contains("fingerprint")
        );
        assert!(e("url: https://x\nusername: a@b\npassword: p\nbogus: 1\n").contains("bogus"));
        assert!(e(
            "url: https://x\nusername: a@b\npassword: p\ninsecureSkipTlsVerify: true\ncaFile: /x\n"
        )
        .contains("insecureSkipTlsVerify"));
    }
}
