//! The one place YAML is parsed. serde_yaml is archived; swapping to a maintained
//! fork means changing this module only.

use serde::de::DeserializeOwned;

pub use serde_yaml::Error;
pub use serde_yaml::Value;

/// Parses YAML into `T`.
pub fn from_str<T: DeserializeOwned>(s: &str) -> Result<T, Error> {
    serde_yaml::from_str(s)
}

/// Parses YAML into `T`, reporting the path of the field that failed (`nodeGroups[0].maxSize`).
pub fn from_str_with_path<T: DeserializeOwned>(s: &str) -> Result<T, PathError> {
    let de = serde_yaml::Deserializer::from_str(s);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        PathError {
            path: if path == "." { String::new() } else { path },
            line: inner.location().map(|l| l.line()),
            message: inner.to_string(),
        }
    })
}

/// Serializes `value` as YAML.
pub fn to_string<T: serde::Serialize>(value: &T) -> Result<String, Error> {
    serde_yaml::to_string(value)
}

/// A YAML error with the field path it happened at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathError {
    /// Dotted path such as `nodeGroups[0].maxSize`; empty for the document root.
    pub path: String,
    pub line: Option<usize>,
    pub message: String,
}
