use std::fmt;
use std::path::{Path, PathBuf};

pub(crate) use crate::yaml::did_you_mean;
use crate::yaml::{explain_serde_message, strip_location, PathError};

/// One thing wrong with the config, located by field path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigProblem {
    /// Field path such as `nodeGroups[0].maxSize`; empty for the document itself.
    pub path: String,
    pub line: Option<usize>,
    /// What was found and what is expected.
    pub message: String,
}

impl ConfigProblem {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigProblem {
            path: path.into(),
            line: None,
            message: message.into(),
        }
    }
}

impl fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = if self.path.is_empty() {
            "(top level)"
        } else {
            &self.path
        };
        match self.line {
            Some(line) => write!(f, "{path} (line {line}): {}", self.message),
            None => write!(f, "{path}: {}", self.message),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {}: {message}", path.display())]
    Read { path: PathBuf, message: String },
    #[error("{}", render_invalid(file.as_deref(), problems))]
    Invalid {
        file: Option<PathBuf>,
        problems: Vec<ConfigProblem>,
    },
}

fn render_invalid(file: Option<&Path>, problems: &[ConfigProblem]) -> String {
    let mut out = match file {
        Some(f) => format!("invalid config {}:", f.display()),
        None => "invalid config:".to_string(),
    };
    for p in problems {
        out.push_str("\n  - ");
        out.push_str(&p.to_string());
    }
    out
}

impl ConfigError {
    pub(super) fn in_file(self, path: &Path) -> ConfigError {
        match self {
            ConfigError::Invalid { problems, .. } => ConfigError::Invalid {
                file: Some(path.to_path_buf()),
                problems,
            },
            other => other,
        }
    }

    /// The individual problems (empty for I/O errors).
    pub fn problems(&self) -> &[ConfigProblem] {
        match self {
            ConfigError::Invalid { problems, .. } => problems,
            ConfigError::Read { .. } => &[],
        }
    }

    pub(super) fn from_yaml(e: PathError, text: &str) -> ConfigError {
        let message = strip_location(&e.message);
        // serde reports a repeated key at its parent; point at the key itself.
        let (path, message) = match message
            .strip_prefix("duplicate field `")
            .and_then(|rest| rest.split('`').next())
        {
            Some(field) if e.path.is_empty() => (
                field.to_string(),
                format!("key `{field}` appears more than once; expected each key once"),
            ),
            Some(field) => (
                format!("{}.{field}", e.path),
                format!("key `{field}` appears more than once; expected each key once"),
            ),
            None => (e.path, explain_serde_message(&e.message)),
        };
        // serde places an error raised while reading a value (a size, a quantity, a
        // repeated key) at the start of the enclosing mapping; the key is at or after it.
        // A syntax error is where serde says, past the last key read.
        let line = match (super::locate::key_line(text, &path), e.line) {
            (Some(key), Some(serde)) => Some(key.max(serde)),
            (key, serde) => key.or(serde),
        };
        ConfigError::Invalid {
            file: None,
            problems: vec![ConfigProblem {
                path,
                line,
                message,
            }],
        }
    }
}
