//! The variables a template reads, so a group's variable the template never reads (most
//! often a misspelt optional one, `k3s_versoin`, which strict mode cannot catch because
//! the template guards it with `is defined` or `default`) is reported.

use std::collections::BTreeSet;
use std::path::Path;

use super::{environment, BUILTIN_VARIABLES};

/// The names `template` (with the templates it includes or imports, by literal name)
/// reads from its context, built-ins left out. `None` when that cannot be known: the
/// template does not parse, or it includes a template chosen at render time.
pub fn template_variables(templates_dir: &Path, template: &str) -> Option<BTreeSet<String>> {
    let mut names = all_variables(templates_dir, template)?;
    names.retain(|n| !BUILTIN_VARIABLES.contains(&n.as_str()));
    Some(names)
}

/// Whether `template` reads the API server's version (`kube_version` or
/// `server_version`), so the nodes it makes run it; `false` when that cannot be known.
pub fn reads_server_version(templates_dir: &Path, template: &str) -> bool {
    all_variables(templates_dir, template)
        .is_some_and(|n| n.contains("kube_version") || n.contains("server_version"))
}

/// Every name `template` and what it pulls in read, built-ins included.
fn all_variables(templates_dir: &Path, template: &str) -> Option<BTreeSet<String>> {
    let env = environment(templates_dir);
    let mut names = BTreeSet::new();
    let mut todo = vec![template.to_string()];
    let mut seen = BTreeSet::new();
    while let Some(name) = todo.pop() {
        if !seen.insert(name.clone()) {
            continue;
        }
        let t = env.get_template(&name).ok()?;
        names.extend(t.undeclared_variables(false));
        todo.extend(referenced_templates(t.source())?);
    }
    Some(names)
}

/// The templates `source` pulls in by `include`, `import`, `from` or `extends`; `None`
/// when one of them is not a string literal.
fn referenced_templates(source: &str) -> Option<Vec<String>> {
    let mut out = Vec::new();
    for tag in source.split("{%").skip(1) {
        let tag = tag.split("%}").next().unwrap_or_default();
        let tag = tag.trim_start_matches(['-', '+']).trim_start();
        let Some(arg) = ["include", "import", "from", "extends"]
            .iter()
            .find_map(|kw| {
                tag.strip_prefix(kw)
                    .filter(|r| r.starts_with([' ', '\t', '\n']))
            })
        else {
            continue;
        };
        let arg = arg.trim_start();
        let quote = arg.chars().next().filter(|c| *c == '"' || *c == '\'')?;
        let literal = arg[1..].split(quote).next()?;
        out.push(literal.to_string());
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn optional_variables_count_as_read_and_builtins_do_not() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            dir.path().join("t.j2"),
            "{{ node_name }} {{ url }}{% if extra is defined %}{{ extra }}{% endif %} {{ v | default('') }}{% include 'part.j2' %}",
        )
        .expect("write");
        std::fs::write(dir.path().join("part.j2"), "{{ from_part }}").expect("write");
        let names = template_variables(dir.path(), "t.j2").expect("known");
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        assert_eq!(names, ["extra", "from_part", "url", "v"]);
    }

    #[test]
    fn an_include_chosen_at_render_time_makes_them_unknown() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("t.j2"), "{% include name %}").expect("write");
        assert_eq!(template_variables(dir.path(), "t.j2"), None);
    }
}
