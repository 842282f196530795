use std::fmt;
use std::path::{Path, PathBuf};

use crate::yaml::PathError;

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

    pub(super) fn from_yaml(e: PathError, _text: &str) -> ConfigError {
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
        ConfigError::Invalid {
            file: None,
            problems: vec![ConfigProblem {
                path,
                line: e.line,
                message,
            }],
        }
    }
}

/// Turns serde's wording into one that says what was found, what is expected and,
/// for a misspelt key, what was probably meant.
pub(crate) fn explain_serde_message(raw: &str) -> String {
    let msg = strip_location(raw);
    if let Some(rest) = msg.strip_prefix("unknown field `") {
        let (field, expected) = match rest.split_once('`') {
            Some((field, tail)) => (field, tail),
            None => (rest, ""),
        };
        let candidates = backticked(expected);
        let mut out = format!("unknown key `{field}`");
        if let Some(best) = did_you_mean(field, &candidates) {
            out.push_str(&format!("; did you mean `{best}`?"));
        }
        if !candidates.is_empty() {
            out.push_str(&format!(" (expected one of: {})", candidates.join(", ")));
        }
        return out;
    }
    if let Some(rest) = msg.strip_prefix("unknown variant `") {
        let (variant, expected) = rest.split_once('`').unwrap_or((rest, ""));
        let candidates = backticked(expected);
        let mut out = format!("unknown value `{variant}`");
        if let Some(best) = did_you_mean(variant, &candidates) {
            out.push_str(&format!("; did you mean `{best}`?"));
        }
        out.push_str(&format!(" (expected one of: {})", candidates.join(", ")));
        return out;
    }
    if let Some(rest) = msg.strip_prefix("missing field `") {
        let field = rest.split('`').next().unwrap_or(rest);
        return format!("required key `{field}` is missing");
    }
    if msg.contains("invalid duration") || msg.contains("time unit") {
        return format!("{msg}; expected a duration such as `30s`, `15m` or `72h`");
    }
    if (msg.contains("ByteSize") || msg.contains("byte size") || msg.contains("unit"))
        && !msg.contains("e.g.")
    {
        return format!("{msg}; expected a size such as `512 MiB` or `9 GiB`");
    }
    msg.to_string()
}

/// Drops serde_yaml's own `path: ` prefix and ` at line L column C` suffix; both are
/// reported separately.
fn strip_location(msg: &str) -> &str {
    let msg = match msg.rfind(" at line ") {
        Some(i) if msg[i..].contains(" column ") => &msg[..i],
        _ => msg,
    };
    match msg.split_once(": ") {
        Some((prefix, rest)) if !prefix.is_empty() && !prefix.contains(' ') => rest,
        _ => msg,
    }
}

fn backticked(s: &str) -> Vec<String> {
    s.split('`')
        .enumerate()
        .filter(|(i, _)| i % 2 == 1)
        .map(|(_, part)| part.to_string())
        .collect()
}

/// The closest candidate, if it is close enough to be a plausible typo.
pub(crate) fn did_you_mean(word: &str, candidates: &[String]) -> Option<String> {
    candidates
        .iter()
        .map(|c| {
            (
                strsim::jaro_winkler(&word.to_lowercase(), &c.to_lowercase()),
                c,
            )
        })
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_close_key() {
        let m = explain_serde_message(
            "unknown field `freeMemoryTaget`, expected one of `clusterName`, `freeMemoryTarget` at line 2 column 1",
        );
        assert!(m.contains("did you mean `freeMemoryTarget`"), "{m}");
        assert!(!m.contains("line 2"), "{m}");
    }

    #[test]
    fn no_suggestion_for_unrelated_key() {
        let m =
            explain_serde_message("unknown field `zzz`, expected `clusterName` or `nodeGroups`");
        assert!(!m.contains("did you mean"), "{m}");
    }
}
