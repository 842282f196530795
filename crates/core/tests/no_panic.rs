//! No panic on any input: config parsing, quantities, the Butane translator and
//! user-data rendering get every file of `fuzz/corpus/<target>/` (the regression inputs),
//! then proptest-made input: arbitrary strings, token soups of the format's own
//! syntax, and corpus files with such soups spliced in. An error is a fine answer; a
//! panic fails the test. (Why proptest and not cargo-fuzz: see `fuzz/README.md`.)

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use nodewright_core::config::Config;
use nodewright_core::model::{parse_quantity, quantity_value, Quantity};
use nodewright_core::userdata::{self, butane, RenderContext, UserDataConfig};
use proptest::prelude::*;

fn corpus(target: &str) -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut files: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let bytes = std::fs::read(e.path()).unwrap_or_default();
            (name, String::from_utf8_lossy(&bytes).into_owned())
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no corpus in {}", dir.display());
    files
}

const YAML_TOKENS: &[&str] = &[
    "\n",
    "\n  ",
    "\n    ",
    " ",
    "- ",
    ": ",
    ":",
    "{",
    "}",
    "[",
    "]",
    ",",
    "'",
    "\"",
    "&a ",
    "*a",
    "!!binary ",
    "!!str ",
    "? ",
    "|",
    ">",
    "#",
    "---",
    "...",
    "~",
    "null",
    "-1",
    "0",
    "1e308",
    "18446744073709551616",
    "99999999999999999999 EiB",
    "1 GiB",
    "0.5",
    "Ki",
    "m",
    "nodeGroups:",
    "- name: g",
    "provider: openstack",
    "provider: proxmox",
    "provider: kamatera",
    "maxSize: 3",
    "minSize: 9",
    "openstack: {flavor: f, image: i}",
    "userData: {template: t.sh.j2}",
    "clusterName: c",
    "freeMemoryTarget: 1 GiB",
    "buffers:",
    "disruption:",
    "budgets:",
    "schedule:",
    "cron: \"* * * * *\"",
    "limits:",
    "variant: fcos",
    "version: 1.4.0",
    "storage:",
    "files:",
    "path: /a",
    "contents:",
    "inline: x",
    "source: \"data:;base64,QQ==\"",
    "source: \"data:,%41\"",
    "mode: 0777",
    "systemd:",
    "units:",
    "name: a.service",
    "enabled: true",
    "passwd:",
    "users:",
    "ssh_authorized_keys:",
    "directories:",
    "links:",
    "target: /b",
    "append:",
];

const TEMPLATE_TOKENS: &[&str] = &[
    "{{",
    "}}",
    "{%",
    "%}",
    "{#",
    "#}",
    " node_name ",
    " labels ",
    " all_taints ",
    " k3s_node_args ",
    " cluster_name ",
    "|",
    " tojson ",
    " shell_quote ",
    "(indent=2)",
    " for x in labels ",
    " endfor ",
    " if ",
    " endif ",
    " else ",
    " is defined ",
    " ~ ",
    "\"",
    "'",
    "\n",
    " * ",
    " 99999 ",
    " range(3) ",
    " join ",
    " items ",
    "x",
    " include ",
    "#cloud-config\n",
    "#!/bin/sh\n",
    "variant: fcos\nversion: 1.4.0\n",
    ": ",
    "- ",
];

fn soup(tokens: &'static [&'static str]) -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(tokens), 0..60).prop_map(|t| t.concat())
}

/// Arbitrary text, a token soup, or a corpus file with a soup spliced in.
fn input(target: &str, tokens: &'static [&'static str]) -> impl Strategy<Value = String> {
    let files: Vec<String> = corpus(target).into_iter().map(|(_, t)| t).collect();
    let spliced = (
        prop::sample::select(files),
        any::<prop::sample::Index>(),
        soup(tokens),
    )
        .prop_map(|(base, at, s)| {
            let mut cut = at.index(base.len() + 1);
            while !base.is_char_boundary(cut) {
                cut -= 1;
            }
            format!("{}{s}{}", &base[..cut], &base[cut..])
        });
    prop_oneof![
        1 => any::<String>(),
        1 => prop::collection::vec(any::<u8>(), 0..200)
            .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        3 => soup(tokens),
        4 => spliced,
    ]
}

fn config_target(text: &str, dir: &Path) {
    let _ = Config::parse(text, dir);
}

fn quantity_target(text: &str) {
    let _ = parse_quantity(text);
    let _ = quantity_value(text);
    let _ = Quantity::parse(text);
}

fn butane_target(text: &str) {
    let _ = butane::to_ignition_json(text);
    let _ = butane::decode_data_url(text);
}

/// Renders `text` as the template `name` (its suffix picks the format).
fn template_target(text: &str, name: &str, dir: &Path) {
    if std::fs::write(dir.join(name), text).is_err() {
        return;
    }
    let cfg = UserDataConfig {
        template: name.to_string(),
        format: None,
        variables: BTreeMap::from([("k3s_url".to_string(), serde_json::json!("https://x"))]),
        variable_files: BTreeMap::new(),
        bootstrap_token: false,
    };
    let ctx = RenderContext::new(
        "c",
        "g",
        "c-g-abcde",
        &BTreeMap::from([("tier".to_string(), "a".to_string())]),
        vec!["k=v:NoSchedule".to_string()],
    );
    let _ = userdata::render(dir, &cfg, &ctx);
}

const TEMPLATE_NAMES: &[&str] = &["t.yaml.j2", "t.sh.j2", "t.butane.yaml.j2"];

fn scratch() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    (dir, path)
}

#[test]
fn the_corpus_never_panics() {
    let (_keep, dir) = scratch();
    for (_, text) in corpus("config") {
        config_target(&text, &dir);
    }
    for (_, text) in corpus("quantity") {
        quantity_target(&text);
    }
    for (_, text) in corpus("butane") {
        butane_target(&text);
    }
    for (name, text) in corpus("template") {
        let as_name = if name.contains("butane") {
            "t.butane.yaml.j2"
        } else if name.contains(".sh") {
            "t.sh.j2"
        } else {
            "t.yaml.j2"
        };
        template_target(&text, as_name, &dir);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn config_parsing_never_panics(text in input("config", YAML_TOKENS)) {
        let (_keep, dir) = scratch();
        config_target(&text, &dir);
    }

    #[test]
    fn quantities_never_panic(text in input("quantity", YAML_TOKENS)) {
        quantity_target(&text);
    }

    #[test]
    fn the_butane_translator_never_panics(text in input("butane", YAML_TOKENS)) {
        butane_target(&text);
    }

    #[test]
    fn user_data_rendering_never_panics(
        text in input("template", TEMPLATE_TOKENS),
        name in prop::sample::select(TEMPLATE_NAMES),
    ) {
        let (_keep, dir) = scratch();
        template_target(&text, name, &dir);
    }
}
