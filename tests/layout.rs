//! One module-file style and one test layout, kept by this test (it only reads files).
//!
//! - A module with children is a folder, `foo/mod.rs`: never `foo.rs` beside `foo/`.
//! - A module's unit tests are its child module `tests`: inline at the end of the file,
//!   or `x/tests.rs`, or `x/tests/mod.rs` with one file per concern. No other
//!   `#[cfg(test)] mod`, no `*_tests.rs` file, no `#[path]` attribute.
//! - An integration test binary is `tests/<topic>.rs`, or `tests/<topic>/main.rs` when it
//!   needs several files; the helpers they share are the `nodewright-testkit` crate
//!   (`crates/testkit`), not a folder of `tests/`.
//!
//! README's "Layout of the code and the tests" says the same for people.

use std::path::{Path, PathBuf};

/// `#[cfg(test)]` modules that are not a module's tests (test-only helpers shared by
/// several test modules), as (file from the repository root, module name, why). None
/// today; one added here says why it cannot be a `tests` module.
const NOT_TESTS: &[(&str, &str, &str)] = &[];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `p` relative to the repository, with `/` separators.
fn rel(p: &Path) -> String {
    p.strip_prefix(repo())
        .unwrap_or(p)
        .to_string_lossy()
        .replace('\\', "/")
}

/// The folders of Rust code: the root package's and every crate's.
fn roots() -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut packages = vec![repo()];
    let mut crates: Vec<PathBuf> = std::fs::read_dir(repo().join("crates"))
        .expect("crates/")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.join("Cargo.toml").is_file())
        .collect();
    crates.sort();
    assert!(crates.len() >= 3, "crates found: {crates:?}");
    packages.extend(crates);
    for package in packages {
        for dir in ["src", "tests", "examples", "benches"] {
            let d = package.join(dir);
            if d.is_dir() {
                out.push(d);
            }
        }
    }
    out
}

/// Every file and folder below `dir`, depth first, sorted.
fn walk(dir: &Path, files: &mut Vec<PathBuf>, dirs: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("an entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            dirs.push(p.clone());
            walk(&p, files, dirs);
        } else {
            files.push(p);
        }
    }
}

fn is_rust(p: &Path) -> bool {
    p.extension().is_some_and(|x| x == "rs")
}

/// The code of a Rust file without comments and with string and char literals emptied,
/// so a `#[path` or a `mod x {` named in a doc comment or a message is not code. Line
/// breaks are kept.
fn code_only(src: &str) -> String {
    let c: Vec<char> = src.chars().collect();
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < c.len() {
        let at = |k: usize| c.get(k).copied().unwrap_or('\0');
        if at(i) == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if at(i) == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < c.len() {
                if at(i) == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if at(i) == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if c[i] == '\n' {
                        out.push('\n');
                    }
                    i += 1;
                }
            }
        } else if at(i) == 'r'
            && (at(i + 1) == '"' || at(i + 1) == '#')
            && (i == 0 || !ident(c[i - 1]) || (c[i - 1] == 'b' && (i < 2 || !ident(c[i - 2]))))
        {
            // A raw string: r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while at(j) == '#' {
                hashes += 1;
                j += 1;
            }
            if at(j) != '"' {
                out.push(c[i]);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= c.len() {
                    break;
                }
                if c[j] == '"' && (1..=hashes).all(|h| at(j + h) == '#') {
                    j += 1 + hashes;
                    break;
                }
                if c[j] == '\n' {
                    out.push('\n');
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if at(i) == '"' {
            let mut j = i + 1;
            while j < c.len() && c[j] != '"' {
                if c[j] == '\\' {
                    j += 1;
                }
                if at(j) == '\n' {
                    out.push('\n');
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j + 1;
        } else if at(i) == '\'' && (at(i + 1) == '\\' || at(i + 2) == '\'') {
            // A char literal ('x', '\n', '\u{..}'); a lifetime ('a) has no closing quote.
            let mut j = i + 1;
            if at(j) == '\\' {
                j += 2;
            } else {
                j += 1;
            }
            while j < c.len() && c[j] != '\'' {
                j += 1;
            }
            out.push_str("' '");
            i = j + 1;
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

/// The `#[cfg(test)]` modules of `code` (from [`code_only`]): (name, where its inline
/// body ends, if it has one).
fn test_modules(code: &str) -> Vec<(String, Option<usize>)> {
    let re = regex::Regex::new(
        r"#\s*\[\s*cfg\s*\(\s*test\s*\)\s*\]\s*(?:#\s*\[[^\]]*\]\s*)*(?:pub(?:\s*\([^)]*\))?\s+)?mod\s+([A-Za-z_][A-Za-z0-9_]*)\s*([;{])",
    )
    .expect("a regex");
    re.captures_iter(code)
        .map(|m| {
            let name = m[1].to_string();
            let open = m.get(2).expect("group 2");
            let end = (open.as_str() == "{").then(|| {
                let mut depth = 0usize;
                for (k, ch) in code[open.start()..].char_indices() {
                    match ch {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                return open.start() + k + 1;
                            }
                        }
                        _ => {}
                    }
                }
                code.len()
            });
            (name, end)
        })
        .collect()
}

/// What is wrong with the layout of the tree at `roots`, one line per problem, naming
/// the file.
fn problems(roots: &[PathBuf]) -> Vec<String> {
    let path_attr = regex::Regex::new(r"#\s*!?\s*\[\s*path\s*=").expect("a regex");
    let mut wrong = Vec::new();
    for root in roots {
        let mut files = Vec::new();
        let mut dirs = Vec::new();
        walk(root, &mut files, &mut dirs);
        for d in &dirs {
            let beside = d.with_extension("rs");
            if beside.is_file() {
                wrong.push(format!(
                    "{}: beside the folder {}/; make it {}/mod.rs",
                    rel(&beside),
                    rel(d),
                    rel(d)
                ));
            }
        }
        // An integration test folder is a test binary: tests/<topic>/main.rs.
        if root.file_name().is_some_and(|n| n == "tests") {
            let mut top: Vec<PathBuf> = std::fs::read_dir(root)
                .expect("tests/")
                .map(|e| e.expect("an entry").path())
                .filter(|p| p.is_dir())
                .collect();
            top.sort();
            for d in top {
                let (mut inner, mut sub) = (Vec::new(), Vec::new());
                walk(&d, &mut inner, &mut sub);
                if inner.iter().any(|f| is_rust(f)) && !d.join("main.rs").is_file() {
                    wrong.push(format!(
                        "{}/: Rust files in a folder of tests/ without main.rs; a test \
                         binary is tests/<topic>.rs or tests/<topic>/main.rs, shared \
                         helpers belong in crates/testkit",
                        rel(&d)
                    ));
                }
            }
        }
        for f in files.iter().filter(|f| is_rust(f)) {
            let name = f.file_name().map(|n| n.to_string_lossy().into_owned());
            if name.as_deref().is_some_and(|n| n.ends_with("_tests.rs")) {
                wrong.push(format!(
                    "{}: a *_tests.rs file; a module's tests are its child `tests` \
                     (x/tests.rs beside x/mod.rs)",
                    rel(f)
                ));
            }
            let text = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{}: {e}", rel(f)));
            let code = code_only(&text);
            if path_attr.is_match(&code) {
                wrong.push(format!(
                    "{}: a #[path] attribute; put the file where its module is",
                    rel(f)
                ));
            }
            for (name, end) in test_modules(&code) {
                let allowed = NOT_TESTS
                    .iter()
                    .any(|(file, module, _)| *file == rel(f) && *module == name);
                if name != "tests" && !allowed {
                    wrong.push(format!(
                        "{}: #[cfg(test)] mod {name}; a module's unit tests are its \
                         child module `tests`",
                        rel(f)
                    ));
                }
                if let Some(end) = end.filter(|e| !code[*e..].trim().is_empty()) {
                    let line = code[..end].lines().count();
                    wrong.push(format!(
                        "{}: code after the inline #[cfg(test)] mod {name} (ends on line \
                         {line}); the tests close the file",
                        rel(f)
                    ));
                }
            }
        }
    }
    wrong
}

#[test]
fn the_tree_has_one_module_file_style_and_one_test_layout() {
    let roots = roots();
    assert!(roots.iter().any(|r| r.ends_with("crates/core/src")));
    let wrong = problems(&roots);
    assert!(
        wrong.is_empty(),
        "layout (see README, \"Layout of the code and the tests\"):\n  {}",
        wrong.join("\n  ")
    );
}

/// Every kind of problem is found, in a small tree written here; the check cannot pass
/// by finding nothing.
#[test]
fn each_kind_of_layout_problem_is_named_with_its_file() {
    let dir = tempfile::tempdir().expect("tmp");
    let src = dir.path().join("src");
    let write = |p: &str, text: &str| {
        let p = src.join(p);
        std::fs::create_dir_all(p.parent().expect("a parent")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    };
    write("lib.rs", "mod a;\nmod b;\n");
    write("a.rs", "mod c;\n");
    write("a/c.rs", "fn f() {}\n");
    write(
        "b/mod.rs",
        "#[cfg(test)]\n#[path = \"b_tests.rs\"]\nmod tests;\n",
    );
    write("b/b_tests.rs", "#[test]\nfn t() {}\n");
    write(
        "d/mod.rs",
        "fn f() {}\n#[cfg(test)]\nmod more_tests {\n    #[test]\n    fn t() { let _ = '{'; }\n}\nfn g() {}\n",
    );
    // Named only in comments and strings: not code.
    write(
        "e/mod.rs",
        "//! #[path = \"x.rs\"] mod x;\n/* #[cfg(test)] mod y {} */\nconst S: &str = r#\"#[path = \"z\"]\"#;\n\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn t() { let _ = \"}\"; }\n}\n",
    );
    let tests = dir.path().join("tests");
    std::fs::create_dir_all(tests.join("common")).expect("mkdir");
    std::fs::write(tests.join("common/mod.rs"), "pub fn h() {}\n").expect("write");
    std::fs::create_dir_all(tests.join("data")).expect("mkdir");
    std::fs::write(tests.join("data/x.yaml"), "a: 1\n").expect("write");

    let wrong = problems(&[src, tests]);
    let has = |file: &str, what: &str| wrong.iter().any(|w| w.contains(file) && w.contains(what));
    assert!(has("src/a.rs", "beside the folder"), "{wrong:#?}");
    assert!(has("src/b/mod.rs", "#[path]"), "{wrong:#?}");
    assert!(has("src/b/b_tests.rs", "*_tests.rs"), "{wrong:#?}");
    assert!(has("src/d/mod.rs", "mod more_tests"), "{wrong:#?}");
    assert!(has("src/d/mod.rs", "code after"), "{wrong:#?}");
    assert!(has("tests/common/", "without main.rs"), "{wrong:#?}");
    assert!(!wrong.iter().any(|w| w.contains("e/mod.rs")), "{wrong:#?}");
    assert!(!wrong.iter().any(|w| w.contains("data")), "{wrong:#?}");
    assert_eq!(wrong.len(), 6, "{wrong:#?}");
}
