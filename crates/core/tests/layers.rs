//! The layers of the core, held by a test: the vocabulary (`model`) imports nothing of the
//! crate; config reads only the vocabulary (and each provider's settings); the planner is
//! pure and never reaches an adapter; the adapters (`cluster`, `cloud`) never reach each
//! other, the planner or the actuator, and no provider reaches another's folder.
//!
//! It reads every `src/**/*.rs` and collects the paths each file names (`use crate::x`,
//! `crate::x::y` in code, `super::` chains that leave the top-level module); every one
//! must be allowed by [`ALLOWED`], a table that itself has no circle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Top-level modules of the crate and what each may import (top-level module names, or a
/// longer path such as `cloud::proxmox::settings`, matched as a prefix). `*` allows all.
const ALLOWED: &[(&str, &[&str])] = &[
    // The vocabulary: a leaf.
    ("model", &[]),
    ("yaml", &[]),
    // Metrics and the HTTP endpoint: below the adapters, which count their calls into it.
    ("telemetry", &["model"]),
    // Retry-After pacing, shared by the Kubernetes and cloud clients.
    ("pacing", &["telemetry"]),
    // User data rendering: a leaf below config (minijinja, Butane), on the label names.
    ("userdata", &["model", "yaml"]),
    // Config: the vocabulary, YAML reading, the user-data settings and template list, and
    // each provider's own settings module.
    (
        "config",
        &[
            "model",
            "yaml",
            "userdata",
            // The provider table's settings half (its client half is in `cloud::build`,
            // which the loop drives from the config: `run::clouds`).
            "cloud::registry",
            "cloud::kamatera::settings",
            "cloud::openstack::settings",
            "cloud::proxmox::settings",
        ],
    ),
    // The pure planner: the vocabulary and config only.
    ("plan", &["model", "config"]),
    // Adapters: the vocabulary, metrics; never each other, the planner or act. The
    // Kubernetes side reads the config's label and taint settings; the clouds never read
    // the config (config reads their settings; the loop builds their clients from it), so
    // the two never import each other.
    (
        "cluster",
        &["model", "config", "telemetry", "pacing", "yaml"],
    ),
    (
        "cloud",
        &["model", "telemetry", "pacing", "yaml", "userdata"],
    ),
    // The actuator and the loop sit on top.
    ("act", &["*"]),
    ("run", &["*"]),
    ("lib", &["*"]),
];

/// Crates the planner and the vocabulary never use: no I/O, no clients, no runtime.
const IMPURE_CRATES: &[&str] = &[
    "kube",
    "k8s_openapi",
    "tokio",
    "reqwest",
    "hyper",
    "axum",
    "rustls",
    "futures",
];

/// `f` relative to `src/`, with `/` separators.
fn rel_path(f: &Path) -> String {
    f.strip_prefix(src_dir())
        .expect("under src")
        .to_string_lossy()
        .replace('\\', "/")
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `rel` (`plan/steps/pools.rs`) as its module path (`plan`, `steps`, `pools`).
fn module_path(rel: &str) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_string)
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// The code of a file without comments, string and char literals (so a doc link or a
/// message naming `crate::x` is no import).
fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            i += 2;
            while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                i += 1;
            }
            i += 2;
        } else if c == b'r' && (b.get(i + 1) == Some(&b'"') || b.get(i + 1) == Some(&b'#')) {
            // Raw string r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&b'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&b'"') {
                out.push(c as char);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == b'"' && (0..hashes).all(|k| b.get(j + 1 + k) == Some(&b'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == b'\'' && b.get(i + 2) == Some(&b'\'') {
            // 'x'
            i += 3;
            out.push_str("' '");
        } else if c == b'\'' && b.get(i + 1) == Some(&b'\\') {
            // '\n', '\'', '\u{..}'
            i += 2;
            while i < b.len() && b[i] != b'\'' {
                i += 1;
            }
            i += 1;
            out.push_str("' '");
        } else {
            // Multi-byte UTF-8 is copied byte-wise through a char boundary check.
            let ch = src[i..].chars().next().expect("a char");
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

/// The paths (below the crate root, as `a::b::c`, lowercase module segments only) that
/// the file at module path `here` names.
fn imports(code: &str, here: &[String]) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let path = regex::Regex::new(
        r"(?:^|[^A-Za-z0-9_:])((?:crate|super|self)(?:\s*::\s*(?:[A-Za-z_][A-Za-z0-9_]*|\{))+)",
    )
    .expect("a regex");
    for m in path.captures_iter(code) {
        let whole = m.get(1).expect("group 1");
        let text: String = whole
            .as_str()
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        let mut segs: Vec<String> = text.split("::").map(str::to_string).collect();
        let tails: Vec<Vec<String>> = if segs.last().map(String::as_str) == Some("{") {
            segs.pop();
            // A `use a::{b, c::{d, e}}` group: each member extends the prefix.
            expand_group(&code[whole.end() - 1..])
        } else {
            vec![Vec::new()]
        };
        for tail in tails {
            let mut full = segs.clone();
            full.extend(tail);
            if let Some(abs) = absolute(&full, here) {
                found.insert(abs);
            }
        }
    }
    found
}

/// The members of the `{...}` group `text` starts with, each as its path segments
/// (`{b, c::{d, e}}`: `b`, `c::d`, `c::e`).
fn expand_group(text: &str) -> Vec<Vec<String>> {
    let mut depth = 0;
    let mut end = text.len();
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    end = i;
                    break;
                }
            }
            _ => {}
        }
    }
    let inner = text.get(1..end).unwrap_or("");
    // Split at the commas of this level only.
    let mut members = Vec::new();
    let (mut level, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => level += 1,
            '}' => level -= 1,
            ',' if level == 0 => {
                members.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    members.push(&inner[start..]);
    let mut out = Vec::new();
    for m in members {
        let m: String = m
            .split(" as ")
            .next()
            .unwrap_or("")
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        if m.is_empty() {
            continue;
        }
        match m.find('{') {
            Some(open) => {
                let head: Vec<String> = m[..open]
                    .trim_end_matches("::")
                    .split("::")
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect();
                for tail in expand_group(&m[open..]) {
                    let mut p = head.clone();
                    p.extend(tail);
                    out.push(p);
                }
            }
            None => out.push(m.split("::").map(str::to_string).collect()),
        }
    }
    out
}

/// `full` (`super::super::model::Server`) made absolute from module `here`, keeping the
/// module segments only; `None` for a path that stays inside `here`'s top-level module.
fn absolute(full: &[String], here: &[String]) -> Option<String> {
    let mut cur: Vec<String> = here.to_vec();
    let mut rest = full;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            cur.clear();
            rest = &rest[1..];
        }
        Some("self") => rest = &rest[1..],
        _ => {}
    }
    while rest.first().map(String::as_str) == Some("super") {
        cur.pop();
        rest = &rest[1..];
    }
    cur.extend(rest.iter().cloned());
    // Module segments are lowercase; an item (`Server`, `LABEL_GROUP`) ends the path.
    let modules: Vec<String> = cur
        .into_iter()
        .take_while(|s| {
            s.chars()
                .next()
                .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        })
        .filter(|s| s != "self")
        .collect();
    if modules.is_empty() {
        return None;
    }
    Some(modules.join("::"))
}

/// Every cross-module import of the crate: (file relative to `src/`, its top-level
/// module, imported path).
fn edges() -> Vec<(String, String, String)> {
    let src = src_dir();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut out = Vec::new();
    for f in files {
        let rel = rel_path(&f);
        let here = module_path(&rel);
        let top = here.first().cloned().unwrap_or_else(|| "lib".to_string());
        let text = std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("{rel}: {e}"));
        for path in imports(&code_only(&text), &here) {
            let target_top = path.split("::").next().unwrap_or("");
            if target_top != top {
                out.push((rel.clone(), top.clone(), path));
            }
        }
    }
    out
}

fn allowed(top: &str, path: &str) -> bool {
    let Some((_, ok)) = ALLOWED.iter().find(|(m, _)| *m == top) else {
        panic!("top-level module `{top}` has no row in ALLOWED: say what it may import");
    };
    ok.iter()
        .any(|a| *a == "*" || path == *a || path.starts_with(&format!("{a}::")))
}

#[test]
fn no_module_imports_a_layer_it_may_not() {
    let wrong: Vec<String> = edges()
        .into_iter()
        .filter(|(_, top, path)| !allowed(top, path))
        .map(|(file, top, path)| format!("{file} ({top}) imports crate::{path}"))
        .collect();
    assert!(
        wrong.is_empty(),
        "imports against the layering (model ← config ← plan; adapters on model/config only):\n  {}",
        wrong.join("\n  ")
    );
}

/// The table's own graph of top-level modules (a row allowing `cloud::registry` allows
/// `cloud`; `*` is the top of the stack and allows no edge back into it): no circle, so
/// no two layers can ever import each other, whatever files they hold.
#[test]
fn the_allowed_layers_have_no_circle() {
    let tops: BTreeSet<&str> = ALLOWED.iter().map(|(m, _)| *m).collect();
    let below = |m: &str| -> Vec<&str> {
        let ok = ALLOWED
            .iter()
            .find(|(n, _)| *n == m)
            .map(|(_, ok)| *ok)
            .unwrap_or(&[]);
        if ok.contains(&"*") {
            return Vec::new();
        }
        let mut out: Vec<&str> = ok
            .iter()
            .map(|a| a.split("::").next().unwrap_or(a))
            .collect();
        out.sort();
        out.dedup();
        out.retain(|t| *t != m);
        out
    };
    // Depth-first search for a back edge, reporting the circle it closes.
    fn visit<'a>(
        m: &'a str,
        below: &dyn Fn(&str) -> Vec<&'a str>,
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<Vec<&'a str>> {
        if let Some(i) = path.iter().position(|p| *p == m) {
            let mut circle = path[i..].to_vec();
            circle.push(m);
            return Some(circle);
        }
        if done.contains(m) {
            return None;
        }
        path.push(m);
        for next in below(m) {
            if let Some(c) = visit(next, below, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(m);
        None
    }
    let mut done = BTreeSet::new();
    for m in &tops {
        let circle = visit(m, &below, &mut Vec::new(), &mut done);
        assert!(circle.is_none(), "ALLOWED has a circle: {circle:?}");
    }
    for m in &tops {
        for t in below(m) {
            assert!(
                tops.contains(t),
                "{m} may import {t}, which has no row in ALLOWED"
            );
        }
    }
}

#[test]
fn no_provider_imports_another_providers_folder() {
    let cloud = src_dir().join("cloud");
    let providers: BTreeSet<String> = std::fs::read_dir(&cloud)
        .expect("src/cloud")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.is_dir())
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
    assert!(providers.len() >= 3, "providers found: {providers:?}");
    let mut files = Vec::new();
    rust_files(&cloud, &mut files);
    let mut wrong = Vec::new();
    for f in files {
        let rel = rel_path(&f);
        let here = module_path(&rel);
        let Some(own) = here.get(1).filter(|p| providers.contains(*p)) else {
            continue;
        };
        let text = std::fs::read_to_string(&f).expect("readable");
        for path in imports(&code_only(&text), &here) {
            let segs: Vec<&str> = path.split("::").collect();
            if segs.len() >= 2
                && segs[0] == "cloud"
                && providers.contains(segs[1])
                && segs[1] != own.as_str()
            {
                wrong.push(format!("{rel} imports crate::{path}"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "providers reaching into each other:\n  {}",
        wrong.join("\n  ")
    );
}

/// `code` up to its first inline `#[cfg(test)] mod x {` (test modules close the files).
fn without_test_modules(code: &str) -> String {
    let inline =
        regex::Regex::new(r"#\[cfg\(test\)\]\s*(?:pub(?:\([a-z]+\))?\s+)?mod\s+[a-z_0-9]+\s*\{")
            .expect("a regex");
    match inline.find(code) {
        Some(m) => code[..m.start()].to_string(),
        None => code.to_string(),
    }
}

/// The planner and the vocabulary stay pure: no client, runtime or I/O crate in their
/// code, so they run in a test, a replay or `nodewright plan` alike.
#[test]
fn the_planner_and_the_vocabulary_use_no_client_or_runtime_crate() {
    let mut wrong = Vec::new();
    for dir in ["plan", "model"] {
        let mut files = Vec::new();
        rust_files(&src_dir().join(dir), &mut files);
        for f in files {
            let rel = rel_path(&f);
            // Test code may write temporary files; the planner's own code may not.
            if rel.split('/').any(|s| s == "tests" || s == "tests.rs") {
                continue;
            }
            let code =
                without_test_modules(&code_only(&std::fs::read_to_string(&f).expect("readable")));
            for krate in IMPURE_CRATES {
                let used = regex::Regex::new(&format!(r"(?:^|[^A-Za-z0-9_:]){krate}::"))
                    .expect("a regex")
                    .is_match(&code);
                if used {
                    wrong.push(format!("{} uses {krate}", f.display()));
                }
            }
            for io in [
                "std::fs",
                "std::net",
                "std::process",
                "SystemTime::now",
                "Instant::now",
            ] {
                if code.contains(io) {
                    wrong.push(format!("{} uses {io}", f.display()));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "impure code in the planner or the vocabulary:\n  {}",
        wrong.join("\n  ")
    );
}

/// The checker itself: it sees a plan file naming the cloud adapter, whether by `use`, a
/// group or a path in code, and not one named in a comment or a string.
#[test]
fn the_checker_sees_a_planner_file_importing_an_adapter() {
    let here = module_path("plan/steps/pools.rs");
    // Each path named, by its top-level module, with whether a plan file may name it.
    let seen = |src: &str| -> BTreeMap<String, bool> {
        imports(&code_only(src), &here)
            .into_iter()
            .filter(|p| p.split("::").next() != Some("plan"))
            .map(|p| {
                let ok = allowed("plan", &p);
                (p.split("::").next().unwrap_or("").to_string(), ok)
            })
            .collect()
    };
    let bad = seen("use crate::cloud::CloudProvider;\nfn f() {}");
    assert_eq!(bad.get("cloud"), Some(&false), "{bad:?}");
    let bad = seen("use crate::{config::Config, cluster::{convert, kube_api::Kube}};");
    assert_eq!(bad.get("cluster"), Some(&false), "{bad:?}");
    assert_eq!(bad.get("config"), Some(&true), "{bad:?}");
    let nested = imports(
        &code_only("use crate::{config::Config, cluster::{convert, kube_api::Kube}};"),
        &here,
    );
    assert!(
        nested.contains("cluster::convert") && nested.contains("cluster::kube_api"),
        "{nested:?}"
    );
    let bad = seen("fn f() { let _ = super::super::super::act::rfc3339(t); }");
    assert_eq!(bad.get("act"), Some(&false), "{bad:?}");
    let fine = seen("/// see [`crate::cloud::Server`]\nfn f() { let s = \"crate::act::x\"; }");
    assert!(fine.is_empty(), "{fine:?}");
    let fine = seen("use crate::model::{Server, LABEL_GROUP};\nuse super::StepResult;");
    assert!(fine.values().all(|ok| *ok), "{fine:?}");
}
