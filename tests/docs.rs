//! What a first reading of README and docs/ trips on: template files named that do not
//! ship, a `--serve` snippet that sets only some of the variables, Event reasons the code
//! posts that no page explains.

use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// README, docs/*.md, the shipped configs and examples, and the deploy files.
fn user_facing_files() -> Vec<PathBuf> {
    let root = repo();
    let mut out = vec![root.join("README.md")];
    let mut stack = vec![
        root.join("docs"),
        root.join("config"),
        root.join("examples"),
        root.join("deploy"),
    ];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if matches!(
                p.extension().and_then(|x| x.to_str()),
                Some("md" | "yaml" | "yml")
            ) {
                out.push(p);
            }
        }
    }
    out
}

/// Words of `text` that end in `.j2`, trimmed of the quoting and punctuation around them.
fn template_names(text: &str) -> Vec<String> {
    text.split(|c: char| c.is_whitespace() || "`'\"(),:[]{}".contains(c))
        .map(|w| w.trim_end_matches('.'))
        .filter(|w| w.ends_with(".j2"))
        .map(|w| w.rsplit('/').next().unwrap_or(w).to_string())
        .collect()
}

#[test]
fn docs_and_examples_name_only_template_files_that_ship() {
    let shipped: Vec<String> = std::fs::read_dir(repo().join("templates"))
        .expect("templates/")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(shipped.len() >= 4, "templates/ lists {shipped:?}");
    let mut missing = Vec::new();
    for f in user_facing_files() {
        for name in template_names(&read(&f)) {
            // `my-*.j2` stands for a user's own template in examples.
            if !shipped.contains(&name) && !name.starts_with("my-") {
                missing.push(format!(
                    "{}: {name}",
                    f.strip_prefix(repo()).unwrap_or(&f).display()
                ));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "template files named but not shipped in templates/ ({shipped:?}):\n{}",
        missing.join("\n")
    );
}

#[test]
fn readme_serve_snippet_exports_every_variable_nodewright_reads() {
    let readme = read(&repo().join("README.md"));
    let start = readme
        .find("simulate --serve --dir /tmp/nw")
        .expect("README has the --serve snippet");
    let block = &readme[start..];
    let block = &block[..block.find("```").expect("snippet ends")];
    let credentials = nodewright::cloud::registry::PROVIDERS
        .iter()
        .map(|p| p.credentials_env);
    for var in [
        nodewright::config::ENV_CONFIG_FILE,
        nodewright::config::ENV_KUBECONFIG_FILE,
    ]
    .into_iter()
    .chain(credentials)
    {
        assert!(
            block.contains(&format!("{var}=/tmp/nw/")),
            "README's --serve snippet does not export {var}:\n{block}"
        );
    }
}

/// The Event reasons `act/events.rs` posts: the second argument of its `ev(...)` calls and
/// the reason constants it names.
fn posted_event_reasons() -> Vec<String> {
    let src = read(&repo().join("crates/core/src/act/events.rs"));
    let code = src.split("#[cfg(test)]").next().unwrap_or(&src);
    let mut out = Vec::new();
    for (i, _) in code.match_indices("ev(") {
        let rest = &code[i + 3..];
        let Some(comma) = rest.find(',') else {
            continue;
        };
        let arg = rest[comma + 1..].trim_start();
        if let Some(lit) = arg.strip_prefix('"') {
            if let Some(end) = lit.find('"') {
                out.push(lit[..end].to_string());
            }
        } else {
            let ident: String = arg
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let decl = format!("const {ident}: &str = \"");
            if let Some(at) = code.find(&decl) {
                let v = &code[at + decl.len()..];
                out.extend(v.find('"').map(|end| v[..end].to_string()));
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

#[test]
fn every_event_reason_posted_is_documented_in_readme() {
    let readme = read(&repo().join("README.md"));
    let reasons = posted_event_reasons();
    for known in [
        "TriggeredScaleUp",
        "NotTriggerScaleUp",
        "ProvisioningFailed",
    ] {
        assert!(
            reasons.iter().any(|r| r == known),
            "the scan of act/events.rs found {reasons:?}, not {known}"
        );
    }
    let undocumented: Vec<&String> = reasons
        .iter()
        .filter(|r| !readme.contains(&format!("`{r}`")))
        .collect();
    assert!(
        undocumented.is_empty(),
        "Event reasons posted but not explained in README: {undocumented:?}"
    );
}

#[test]
fn readme_opening_names_every_provider_as_available() {
    let readme = read(&repo().join("README.md"));
    let opening = readme.split("\n## ").next().unwrap_or_default();
    for p in ["Proxmox VE", "OpenStack", "Kamatera"] {
        assert!(opening.contains(p), "README's opening does not name {p}");
    }
    assert!(
        !opening.contains(" next."),
        "README's opening still says a provider comes next:\n{opening}"
    );
}

/// README's Reliability table gives the figures of the loop's deadlines, retries, backoff
/// and Event limits: they are the code's constants, so a change to one shows here.
#[test]
fn readme_reliability_figures_are_the_constants() {
    use nodewright::cluster::events;
    let readme = read(&repo().join("README.md"));
    let secs = |d: std::time::Duration| d.as_secs();
    let expected = [
        format!(
            "observe deadline {} s per provider",
            secs(nodewright::act::DEFAULT_OBSERVE_DEADLINE)
        ),
        format!(
            "a `Retry-After` is honoured up to {} s",
            secs(nodewright::cloud::http::MAX_RETRY_AFTER)
        ),
        format!(
            "reads are tried {} more times within the call",
            nodewright::cloud::http::READ_RETRIES
        ),
        format!(
            "tried again at once {} times, then held back {} s, doubling to {} s",
            nodewright::plan::backoff::RETRIED_AT_ONCE,
            secs(nodewright::plan::backoff::FIRST_WAIT),
            secs(nodewright::plan::backoff::MAX_WAIT)
        ),
        format!(
            "call deadline of {} s",
            secs(nodewright::cluster::deadline::DEFAULT_CALL_DEADLINE)
        ),
        format!(
            "the process stops within {} s",
            secs(nodewright::cli::SHUTDOWN_GRACE)
        ),
        format!(
            "unchanged for {} s",
            secs(nodewright::config::reload::SETTLE)
        ),
        format!(
            "Events: {} per object, then one per {} s; {} in all, then {} a second",
            events::OBJECT_BURST,
            secs(events::OBJECT_REFILL),
            events::BURST,
            events::PER_SECOND
        ),
    ];
    let missing: Vec<&String> = expected
        .iter()
        .filter(|e| !readme.contains(e.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "README's Reliability section does not say these (as the code has them): {missing:#?}"
    );
}

/// README's configuration and environment tables come from the provider rows
/// (`cloud/registry.rs`): each provider's settings block and credentials variable are
/// described there as its row says, and `provider:` lists exactly the registered names.
#[test]
fn readme_provider_tables_follow_the_provider_rows() {
    use nodewright::cloud::registry::PROVIDERS;
    let readme = read(&repo().join("README.md"));
    for p in PROVIDERS {
        let settings = format!(
            "| `nodeGroups[].{name}` | with `provider: {name}` | {} |",
            p.settings_docs,
            name = p.name
        );
        assert!(
            readme.lines().any(|l| l == settings),
            "README's configuration table lacks the row of provider {}:\n{settings}",
            p.name
        );
        let credentials = format!("| `{}` | {} |", p.credentials_env, p.credentials_docs);
        assert!(
            readme.lines().any(|l| l == credentials),
            "README's environment table lacks the row of provider {}:\n{credentials}",
            p.name
        );
    }
    let names: Vec<String> = PROVIDERS.iter().map(|p| format!("`{}`", p.name)).collect();
    let listed = match names.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    };
    let provider = format!("| `nodeGroups[].provider` | required | {listed} |");
    assert!(
        readme.lines().any(|l| l == provider),
        "README's configuration table should list the registered providers:\n{provider}"
    );
}

#[test]
fn readme_lists_every_node_state_the_metrics_count() {
    let readme = read(&repo().join("README.md"));
    let bullet = readme
        .split("\n- ")
        .find(|b| b.contains("`nodewright_nodes{group, state}`"))
        .expect("README says what nodewright_nodes counts");
    let missing: Vec<&str> = nodewright::plan::summary::NODE_STATES
        .iter()
        .copied()
        .filter(|s| !bullet.contains(&format!("`{s}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "README's nodewright_nodes misses {missing:?}"
    );
}
