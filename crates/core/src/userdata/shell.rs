//! The `shell_quote` template filter: a value as exactly one POSIX shell word, so a
//! variable or name holding `$(...)`, backticks, quotes, spaces or `;` can never change
//! what a join script or an install script does. `tojson` is not enough there: inside
//! double quotes the shell still expands `$` and backticks.

/// Characters that stand for themselves in a shell word wherever it appears (no
/// globbing, expansion, quoting or tilde), so a value made of them is left bare.
fn is_plain(c: char) -> bool {
    c.is_ascii_alphanumeric() || "_./:=+@%,-".contains(c)
}

/// `value` as one shell word: bare when every character is plain, else single-quoted
/// with each `'` written as `'\''`. Control characters (a newline above all) are refused:
/// inside a YAML block scalar or a heredoc a newline would end more than the word.
pub fn quote(value: &str) -> Result<String, String> {
    if let Some(c) = value.chars().find(|c| c.is_control()) {
        return Err(format!(
            "the value holds the control character U+{:04X}, which a shell word here cannot carry safely",
            u32::from(c)
        ));
    }
    if !value.is_empty() && value.chars().all(is_plain) {
        return Ok(value.to_string());
    }
    Ok(format!("'{}'", value.replace('\'', r"'\''")))
}

/// The filter: strings, numbers and booleans; anything else (and undefined) is an error.
pub(super) fn shell_quote_filter(
    value: &minijinja::Value,
) -> Result<minijinja::Value, minijinja::Error> {
    use minijinja::value::ValueKind;
    let err = |msg: String| minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, msg);
    let text = match value.kind() {
        ValueKind::Undefined => {
            return Err(minijinja::Error::new(
                minijinja::ErrorKind::UndefinedError,
                "undefined value passed to shell_quote",
            ))
        }
        ValueKind::String => value.as_str().unwrap_or_default().to_string(),
        ValueKind::Number | ValueKind::Bool => value.to_string(),
        other => return Err(err(format!("shell_quote takes a string, not a {other}"))),
    };
    quote(&text).map(minijinja::Value::from).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::quote;

    #[test]
    fn plain_words_stay_bare_everything_else_is_one_quoted_word() {
        assert_eq!(quote("v1.31.4+k3s1").as_deref(), Ok("v1.31.4+k3s1"));
        assert_eq!(quote("").as_deref(), Ok("''"));
        assert_eq!(quote("a b").as_deref(), Ok("'a b'"));
        assert_eq!(quote("$(id)").as_deref(), Ok("'$(id)'"));
        assert_eq!(quote("it's").as_deref(), Ok(r"'it'\''s'"));
        assert_eq!(quote("~root").as_deref(), Ok("'~root'"));
        assert!(quote("a\nb").is_err());
        assert!(quote("a\rb").is_err());
    }
}
