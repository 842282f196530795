//! The syntax Kubernetes gives names, label keys and label values, shared by the
//! node-group and the buffer validation (a leaf both import, so neither imports the other).

use super::ConfigProblem;

pub(crate) fn check_dns_label(p: &mut Vec<ConfigProblem>, path: &str, v: &str) {
    if !is_dns_label(v) {
        p.push(ConfigProblem::new(
            path,
            format!("`{v}` is not a valid name; expected 1-63 lowercase letters, digits or '-', starting and ending with a letter or digit"),
        ));
    }
}

pub(crate) fn is_dns_label(v: &str) -> bool {
    !v.is_empty()
        && v.len() <= 63
        && v.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !v.starts_with('-')
        && !v.ends_with('-')
}

pub(crate) fn is_label_value(v: &str) -> bool {
    v.len() <= 63
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        && v.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
        && v.bytes().last().is_some_and(|b| b.is_ascii_alphanumeric())
}

/// Label and taint keys: optional DNS subdomain prefix, `/`, and a name like a label value.
pub(crate) fn check_qualified_name(key: &str) -> Result<(), &'static str> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        let ok = !prefix.is_empty() && prefix.len() <= 253 && prefix.split('.').all(is_dns_label);
        if !ok {
            return Err("the prefix before '/' must be a lowercase DNS subdomain");
        }
    }
    if name.is_empty() || !is_label_value(name) {
        return Err("expected a name of at most 63 characters of [A-Za-z0-9._-], starting and ending alphanumeric, with an optional `prefix/`");
    }
    Ok(())
}
