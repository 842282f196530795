//! The line of a config key, found from its field path (`nodeGroups[0].maxSize`) in the
//! YAML text. serde reports an error raised while reading a value (a size, a quantity, a
//! repeated key) and every later semantic check at the enclosing mapping or not at all;
//! a person wants the line of the key itself.
//!
//! This reads block-style YAML as people write configs: `key: value` lines, `- ` sequence
//! items, and flow collections (`{a: 1}`, `[a, b]`) on one line. A path it cannot follow
//! to its end gives `None`, and the caller keeps whatever line it had.

/// One line's structure: the columns of its leading `- ` markers and its key, if any.
struct Line<'a> {
    dashes: Vec<usize>,
    key: Option<(usize, &'a str)>,
    /// Column of the first character that is not a space (the first dash or the key).
    indent: usize,
}

fn parse_line(text: &str) -> Option<Line<'_>> {
    let indent = text.len() - text.trim_start_matches(' ').len();
    let mut rest = &text[indent..];
    if rest.is_empty() || rest.starts_with('#') || rest.starts_with("---") {
        return None;
    }
    let mut col = indent;
    let mut dashes = Vec::new();
    while rest == "-" || rest.starts_with("- ") {
        dashes.push(col);
        let after = rest[1..].trim_start_matches(' ');
        col += rest.len() - after.len();
        rest = after;
    }
    Some(Line {
        dashes,
        key: key_of(rest).map(|k| (col, k)),
        indent,
    })
}

/// The key of `key: value` (quotes removed), if `s` starts with one.
fn key_of(s: &str) -> Option<&str> {
    if s.starts_with(['{', '[', '#', '|', '>']) {
        return None;
    }
    if let Some(q) = s.chars().next().filter(|c| *c == '"' || *c == '\'') {
        let inner = &s[1..];
        let end = inner.find(q)?;
        let after = &inner[end + 1..];
        return (after.starts_with(": ") || after == ":").then_some(&inner[..end]);
    }
    let end = s.find(": ").or_else(|| s.strip_suffix(':').map(str::len))?;
    let key = s[..end].trim_end();
    (!key.is_empty()).then_some(key)
}

/// The 1-based line of the key (or sequence item) `path` names in `text`, when the whole
/// path can be followed.
pub(super) fn key_line(text: &str, path: &str) -> Option<usize> {
    if path.is_empty() {
        return None;
    }
    let lines: Vec<Option<Line<'_>>> = text.lines().map(parse_line).collect();
    // The lines of the current mapping or sequence, and the column its keys or dashes
    // sit at (`None`: the column of its first line).
    let (mut start, mut end, mut col) = (0usize, lines.len(), None::<usize>);
    let mut rest = path;
    let mut found = None;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('[') {
            let (index, tail) = after.split_once(']')?;
            let index: usize = index.parse().ok()?;
            let at = col.or_else(|| first_column(&lines[start..end], true))?;
            let items: Vec<usize> = (start..end)
                .filter(|&i| lines[i].as_ref().is_some_and(|l| l.dashes.contains(&at)))
                .collect();
            let item = *items.get(index)?;
            found = Some(item);
            start = item;
            end = items.get(index + 1).copied().unwrap_or(end);
            col = Some(at + 2);
            rest = tail;
        } else {
            let rest_key = rest.strip_prefix('.').unwrap_or(rest);
            let at = col.or_else(|| first_column(&lines[start..end], false))?;
            let (line, key) = (start..end)
                .filter_map(|i| match &lines[i] {
                    Some(Line {
                        key: Some((c, k)), ..
                    }) if *c == at => Some((i, *k)),
                    _ => None,
                })
                .filter(|(_, k)| {
                    rest_key
                        .strip_prefix(k)
                        .is_some_and(|t| t.is_empty() || t.starts_with(['.', '[']))
                })
                // The longest key that fits (`labels.a.b/c` may be the key `a.b/c`);
                // of a repeated key, the last, which is the one in error.
                .max_by_key(|(_, k)| k.len())?;
            found = Some(line);
            rest = &rest_key[key.len()..];
            if !rest.is_empty() {
                // The value's lines: up to the next line at or left of the key, but a
                // sequence may sit at the key's own column.
                let next = (line + 1..end)
                    .find(|&i| {
                        lines[i].as_ref().is_some_and(|l| {
                            l.indent < at || (l.indent == at && l.dashes.first() != Some(&at))
                        })
                    })
                    .unwrap_or(end);
                if !(line + 1..next).any(|i| lines[i].is_some()) {
                    // The value is on the key's line (a flow collection): that line.
                    return found.map(|l| l + 1);
                }
                start = line + 1;
                end = next;
                col = None;
            }
        }
    }
    found.map(|l| l + 1)
}

/// The column of the first key (or, for a sequence, the first dash) in `lines`.
fn first_column(lines: &[Option<Line<'_>>], dash: bool) -> Option<usize> {
    let first = lines.iter().flatten().next()?;
    if dash {
        first.dashes.first().copied()
    } else {
        first
            .dashes
            .first()
            .map(|d| d + 2)
            .or(first.key.map(|(c, _)| c))
    }
}

#[cfg(test)]
mod tests {
    use super::key_line;

    const TEXT: &str = "\
clusterName: dev
# a comment
freeMemoryTarget: 9 GiB
nodeGroups:
- name: workers
  maxSize: 3
  openstack: {flavor: m1.large}
  labels:
    role: worker
    nodewright.io/group: x
  userData:
    template: t.j2
    variables:
      k3s_url: u
- name: big
  resources:
    memory: 9 GiB
";

    #[test]
    fn finds_the_keys_own_line_at_any_depth() {
        assert_eq!(key_line(TEXT, "freeMemoryTarget"), Some(3));
        assert_eq!(key_line(TEXT, "nodeGroups[0].maxSize"), Some(6));
        assert_eq!(key_line(TEXT, "nodeGroups[0].name"), Some(5));
        assert_eq!(key_line(TEXT, "nodeGroups[1].resources.memory"), Some(17));
        assert_eq!(
            key_line(TEXT, "nodeGroups[0].labels.nodewright.io/group"),
            Some(10)
        );
        assert_eq!(
            key_line(TEXT, "nodeGroups[0].userData.variables.k3s_url"),
            Some(14)
        );
    }

    #[test]
    fn a_flow_value_is_on_its_keys_line() {
        assert_eq!(key_line(TEXT, "nodeGroups[0].openstack.flavor"), Some(7));
    }

    #[test]
    fn a_path_that_is_not_there_gives_none() {
        assert_eq!(key_line(TEXT, "nodeGroups[2].maxSize"), None);
        assert_eq!(key_line(TEXT, "nodeGroups[0].minSize"), None);
        assert_eq!(key_line(TEXT, ""), None);
    }
}
