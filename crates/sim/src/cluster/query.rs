//! Query parameters read as the real API server reads them, so every client's spelling
//! means what it means against a real cluster.
//!
//! Booleans follow apimachinery's query conversion (not Go's `strconv.ParseBool`): a
//! missing parameter is false, `0` and `false` in any case are false, and anything else,
//! the empty string included, is true. So the official Python client's `watch=True`
//! watches. Integers that do not parse are a 400 naming the parameter, and the list and
//! watch options are checked with the real server's rules (a 422 on `ListOptions`).

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;

use super::meta;
use super::selectors::{FieldSelector, LabelSelector};
use super::status::ApiError;

/// The decoded query string. Only the first of repeated parameters counts, as Go's
/// `url.Values.Get` and the query conversion take the first.
#[derive(Debug, Default, Clone)]
pub struct Query(BTreeMap<String, String>);

impl Query {
    pub fn parse(q: Option<&str>) -> Self {
        let mut map = BTreeMap::new();
        for pair in q.unwrap_or_default().split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            map.entry(meta::percent_decode(k, true))
                .or_insert_with(|| meta::percent_decode(v, true));
        }
        Query(map)
    }

    pub fn get(&self, k: &str) -> Option<&str> {
        self.0.get(k).map(String::as_str)
    }

    /// A non-empty value.
    pub fn non_empty(&self, k: &str) -> Option<&str> {
        self.get(k).filter(|v| !v.is_empty())
    }

    /// A boolean parameter: absent, `0` or `false` (any case) is false, all else true.
    pub fn flag(&self, k: &str) -> bool {
        self.opt_flag(k).unwrap_or(false)
    }

    /// A boolean whose absence matters (`sendInitialEvents`).
    pub fn opt_flag(&self, k: &str) -> Option<bool> {
        self.get(k)
            .map(|v| !(v == "0" || v.eq_ignore_ascii_case("false")))
    }

    /// A signed integer parameter; a value that does not parse is a 400.
    pub fn int(&self, k: &str) -> Result<Option<i64>, ApiError> {
        match self.get(k) {
            None => Ok(None),
            Some(v) => v.parse::<i64>().map(Some).map_err(|_| {
                ApiError::bad_request(format!(
                    "unable to parse query parameter {k}={v:?}: strconv.ParseInt: parsing {v:?}: invalid syntax"
                ))
            }),
        }
    }
}

/// `resourceVersionMatch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionMatch {
    NotOlderThan,
    Exact,
}

/// The options of a list or watch request (`metav1.ListOptions`).
#[derive(Debug, Clone, Default)]
pub struct ListOptions {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    pub watch: bool,
    pub bookmarks: bool,
    /// `resourceVersion`, None when unset or empty.
    pub rv: Option<String>,
    pub rv_match: Option<VersionMatch>,
    pub send_initial_events: Option<bool>,
    pub timeout: Option<Duration>,
    /// 0 means no limit.
    pub limit: u64,
    pub continue_token: Option<String>,
}

/// One `field.Error` of the options' validation.
fn forbidden(field: &str, why: &str) -> (String, String, &'static str) {
    (
        field.to_string(),
        format!("Forbidden: {why}"),
        "FieldValueForbidden",
    )
}

/// The 422 the real server answers when the options contradict each other.
fn invalid_options(errors: Vec<(String, String, &'static str)>) -> ApiError {
    let parts: Vec<String> = errors.iter().map(|(f, m, _)| format!("{f}: {m}")).collect();
    let joined = if parts.len() == 1 {
        parts[0].clone()
    } else {
        format!("[{}]", parts.join(", "))
    };
    let causes: Vec<_> = errors
        .iter()
        .map(|(f, m, r)| json!({"reason": r, "message": m, "field": f}))
        .collect();
    ApiError {
        details: Some(json!({"group": "meta.k8s.io", "kind": "ListOptions", "causes": causes})),
        ..ApiError::new(
            422,
            "Invalid",
            format!("ListOptions.meta.k8s.io \"\" is invalid: {joined}"),
        )
    }
}

impl ListOptions {
    /// Decodes and validates, with `watch` already decided by the caller (it also picks
    /// the verb).
    pub fn parse(q: &Query, watch: bool) -> Result<Self, ApiError> {
        let labels = LabelSelector::parse(q.get("labelSelector").unwrap_or_default())
            .map_err(|e| ApiError::bad_request(format!("unable to parse labelSelector: {e}")))?;
        let fields = FieldSelector::parse(q.get("fieldSelector").unwrap_or_default())
            .map_err(|e| ApiError::bad_request(format!("unable to parse fieldSelector: {e}")))?;
        let timeout = q
            .int("timeoutSeconds")?
            .filter(|t| *t > 0)
            .map(|t| Duration::from_secs(t.unsigned_abs()));
        let limit = q
            .int("limit")?
            .filter(|l| *l > 0)
            .unwrap_or(0)
            .unsigned_abs();
        let rv_match_raw = q.non_empty("resourceVersionMatch");
        let opts = ListOptions {
            labels,
            fields,
            watch,
            bookmarks: q.flag("allowWatchBookmarks"),
            rv: q.non_empty("resourceVersion").map(str::to_string),
            rv_match: match rv_match_raw {
                Some("NotOlderThan") => Some(VersionMatch::NotOlderThan),
                Some("Exact") => Some(VersionMatch::Exact),
                _ => None,
            },
            send_initial_events: q.opt_flag("sendInitialEvents"),
            timeout,
            limit,
            continue_token: q.non_empty("continue").map(str::to_string),
        };
        opts.validate(rv_match_raw)?;
        Ok(opts)
    }

    /// The real server's `ValidateListOptions` (with the WatchList feature on).
    fn validate(&self, rv_match: Option<&str>) -> Result<(), ApiError> {
        let mut errors = Vec::new();
        let field = "resourceVersionMatch";
        if self.watch {
            if self.send_initial_events.is_some()
                && self.rv_match != Some(VersionMatch::NotOlderThan)
            {
                errors.push(forbidden(
                    field,
                    "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                ));
            }
            if let Some(m) = rv_match {
                if self.send_initial_events.is_none() {
                    errors.push(forbidden(
                        field,
                        "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                    ));
                }
                if m != "NotOlderThan" {
                    errors.push((
                        field.into(),
                        format!("Unsupported value: {m:?}: supported values: \"NotOlderThan\""),
                        "FieldValueNotSupported",
                    ));
                }
                if self.continue_token.is_some() {
                    errors.push(forbidden(
                        field,
                        "resourceVersionMatch is forbidden when continue is provided",
                    ));
                }
            }
        } else {
            if let Some(m) = rv_match {
                if self.rv.is_none() {
                    errors.push(forbidden(
                        field,
                        "resourceVersionMatch is forbidden unless resourceVersion is provided",
                    ));
                }
                if self.continue_token.is_some() {
                    errors.push(forbidden(
                        field,
                        "resourceVersionMatch is forbidden when continue is provided",
                    ));
                }
                if m != "NotOlderThan" && m != "Exact" {
                    errors.push((
                        field.into(),
                        format!("Unsupported value: {m:?}: supported values: \"Exact\", \"NotOlderThan\", \"\""),
                        "FieldValueNotSupported",
                    ));
                }
                if m == "Exact" && self.rv.as_deref() == Some("0") {
                    errors.push(forbidden(
                        field,
                        "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                    ));
                }
            }
            if self.send_initial_events.is_some() {
                errors.push(forbidden(
                    "sendInitialEvents",
                    "sendInitialEvents is forbidden for list",
                ));
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(invalid_options(errors))
        }
    }

    /// `resourceVersion` as a number; None for unset and "0". A value that is not a
    /// number is a 400, as from the real server.
    pub fn rv_number(&self) -> Result<Option<u64>, ApiError> {
        match self.rv.as_deref() {
            None | Some("0") => Ok(None),
            Some(r) => r
                .parse::<u64>()
                .map(Some)
                .map_err(|_| ApiError::bad_request(format!("invalid resource version: {r:?}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Query {
        Query::parse(Some(s))
    }

    #[test]
    fn booleans_as_the_real_server_reads_them() {
        for yes in ["true", "True", "TRUE", "1", "t", "yes", "", "anything"] {
            assert!(q(&format!("watch={yes}")).flag("watch"), "{yes:?}");
        }
        for no in ["false", "False", "FALSE", "fAlSe", "0"] {
            assert!(!q(&format!("watch={no}")).flag("watch"), "{no:?}");
        }
        assert!(!q("other=1").flag("watch"));
        assert!(
            q("watch").flag("watch"),
            "a bare key is an empty value: true"
        );
        assert_eq!(
            q("sendInitialEvents=False").opt_flag("sendInitialEvents"),
            Some(false)
        );
        assert_eq!(q("x=1").opt_flag("sendInitialEvents"), None);
        // The first of repeated parameters counts.
        assert!(!q("watch=false&watch=true").flag("watch"));
    }

    #[test]
    fn integers_that_do_not_parse_are_a_bad_request() {
        let err = ListOptions::parse(&q("timeoutSeconds=soon"), true).err();
        let err = err.map(|e| (e.code, e.message.contains("timeoutSeconds")));
        assert_eq!(err, Some((400, true)));
        let opts = ListOptions::parse(&q("limit=-3&timeoutSeconds=5"), false).ok();
        assert_eq!(opts.as_ref().map(|o| o.limit), Some(0));
        assert_eq!(opts.and_then(|o| o.timeout), Some(Duration::from_secs(5)));
    }

    #[test]
    fn options_validated_as_the_real_server_does() {
        let code = |s: &str, watch: bool| ListOptions::parse(&q(s), watch).err().map(|e| e.code);
        assert_eq!(code("sendInitialEvents=true", true), Some(422));
        assert_eq!(
            code(
                "sendInitialEvents=true&resourceVersionMatch=NotOlderThan",
                true
            ),
            None
        );
        assert_eq!(code("resourceVersionMatch=NotOlderThan", true), Some(422));
        assert_eq!(
            code(
                "sendInitialEvents=true&resourceVersionMatch=NotOlderThan",
                false
            ),
            Some(422)
        );
        assert_eq!(code("resourceVersionMatch=Exact", false), Some(422));
        assert_eq!(
            code("resourceVersion=0&resourceVersionMatch=Exact", false),
            Some(422)
        );
        assert_eq!(
            code("resourceVersion=5&resourceVersionMatch=Exact", false),
            None
        );
        let err = ListOptions::parse(&q("sendInitialEvents=1"), false).err();
        assert_eq!(
            err.map(|e| e.message),
            Some("ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list".to_string())
        );
    }
}
