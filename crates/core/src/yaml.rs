//! The one place YAML is parsed, and serde's error wording turned into the user's (a
//! misspelt key gets its likely meaning): the config and every provider's credentials
//! file read through here. serde_yaml is archived; swapping to a maintained fork means
//! changing this module only.

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
    // A bare number where a duration goes: humantime_serde refuses the string "30".
    if let Some(number) = msg
        .strip_prefix("invalid value: string \"")
        .and_then(|rest| rest.strip_suffix("\", expected a duration"))
        .filter(|n| n.parse::<f64>().is_ok())
    {
        return format!(
            "`{number}` has no unit; add a unit, e.g. `{number}s` (or `{number}m`, `{number}h`)"
        );
    }
    if msg.contains("invalid duration") || msg.contains("time unit") {
        return format!("{msg}; expected a duration such as `30s`, `15m` or `72h`");
    }
    // Sizes explain themselves ("`x` is not a size; expected ..."); say it only once.
    if (msg.contains("ByteSize") || msg.contains("byte size") || msg.contains("unit"))
        && !msg.contains("e.g.")
        && !msg.contains("expected")
    {
        return format!("{msg}; expected a size such as `512 MiB` or `9 GiB`");
    }
    msg.to_string()
}

/// Drops serde_yaml's own `path: ` prefix and ` at line L column C` suffix; both are
/// reported separately.
pub(crate) fn strip_location(msg: &str) -> &str {
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
