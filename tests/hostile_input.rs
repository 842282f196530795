//! Hostile input through the shipped templates: template variables and names holding
//! shell metacharacters, quotes, heredoc terminators or YAML breakers never change what
//! a join script or install script does. Each value is checked where it lands: the
//! shell line that carries it is run by `sh` (in a scratch directory, with a canary
//! file a command substitution would create) and must give back exactly the value;
//! the k3s config must still parse as YAML with the value intact; a newline, which no
//! shell word here can carry safely, is refused at render time.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use nodewright::userdata::{self, butane, RenderContext, RenderedUserData, UserDataConfig};
use serde_json::json;

const HOSTILE: &[&str] = &[
    "$(touch CANARY)",
    "`touch CANARY`",
    "'; touch CANARY; '",
    "\"; touch CANARY; #",
    "${HOME:-x}$PATH",
    "a b  c",
    "x' \"y\" \\z",
    "* ?[a]",
    "~root",
    "key: value",
    "{a: [b]}, &anchor *alias",
    "#comment",
    "--- !!binary AAAA",
    "NODEWRIGHT_K3S_CONFIG",
    "|",
    "",
];

const K3S: &[&str] = &[
    "k3s-agent.join.sh.j2",
    "k3s-agent.cloud-init.yaml.j2",
    "k3s-agent.butane.yaml.j2",
];

fn shipped_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("templates")
}

fn ctx(node_name: &str) -> RenderContext {
    RenderContext::new(
        "prod",
        "workers",
        node_name,
        &BTreeMap::from([("tier".to_string(), "batch".to_string())]),
        vec!["dedicated=batch:NoSchedule".to_string()],
    )
}

fn vars(extra: serde_json::Value) -> BTreeMap<String, serde_json::Value> {
    let mut v = json!({
        "k3s_url": "https://10.0.0.10:6443",
        "k3s_token": "K10abc::server:secret",
        "join_command": "kubeadm join 10.0.0.10:6443 --token abcdef.0123456789abcdef",
    });
    if let (Some(v), Some(extra)) = (v.as_object_mut(), extra.as_object()) {
        v.extend(extra.clone());
    }
    serde_json::from_value(v).unwrap_or_else(|e| panic!("vars: {e}"))
}

fn render(
    template: &str,
    node_name: &str,
    extra: serde_json::Value,
) -> Result<RenderedUserData, String> {
    let config = UserDataConfig {
        template: template.into(),
        format: None,
        variables: vars(extra),
        variable_files: BTreeMap::new(),
        bootstrap_token: false,
    };
    userdata::render(&shipped_dir(), &config, &ctx(node_name)).map_err(|e| e.to_string())
}

/// The files the node gets, by path: cloud-init `write_files`, Ignition files decoded;
/// a script is the one file "script".
fn files(out: &RenderedUserData) -> BTreeMap<String, String> {
    let mut files = BTreeMap::new();
    if out.content.starts_with("#!") {
        files.insert("script".into(), out.content.clone());
    } else if out.content.starts_with("#cloud-config") {
        let doc: serde_yaml::Value =
            serde_yaml::from_str(&out.content).unwrap_or_else(|e| panic!("YAML: {e}"));
        for f in doc["write_files"].as_sequence().into_iter().flatten() {
            let path = f["path"].as_str().unwrap_or_default().to_string();
            files.insert(path, f["content"].as_str().unwrap_or_default().to_string());
        }
        files.insert(
            "hostname".into(),
            doc["hostname"].as_str().unwrap_or_default().to_string(),
        );
    } else {
        let ign: serde_json::Value =
            serde_json::from_str(&out.content).unwrap_or_else(|e| panic!("Ignition: {e}"));
        for f in ign["storage"]["files"].as_array().into_iter().flatten() {
            let path = f["path"].as_str().unwrap_or_default().to_string();
            let source = f["contents"]["source"].as_str().unwrap_or_default();
            let data = butane::decode_data_url(source).unwrap_or_default();
            files.insert(path, String::from_utf8_lossy(&data).into_owned());
        }
    }
    files
}

/// The shell code that installs k3s, wherever the template put it.
fn install_script(out: &RenderedUserData) -> String {
    let f = files(out);
    [
        "script",
        "/usr/local/sbin/nodewright-install-k3s",
        "/usr/local/bin/nodewright-install-k3s",
    ]
    .iter()
    .find_map(|k| f.get(*k).cloned())
    .unwrap_or_else(|| panic!("no install script in {f:?}"))
}

/// The k3s agent config, wherever the template put it.
fn k3s_config(out: &RenderedUserData) -> serde_yaml::Value {
    let f = files(out);
    let text = match f.get("/etc/rancher/k3s/config.yaml") {
        Some(t) => t.clone(),
        None => {
            let script = f.get("script").cloned().unwrap_or_default();
            let start = script
                .find("<<'NODEWRIGHT_K3S_CONFIG'\n")
                .map(|i| i + "<<'NODEWRIGHT_K3S_CONFIG'\n".len())
                .expect("the config heredoc");
            let end = script[start..]
                .find("\nNODEWRIGHT_K3S_CONFIG\n")
                .expect("the heredoc's end");
            script[start..start + end].to_string()
        }
    };
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("k3s config YAML: {e}\n{text}"))
}

/// Runs `code` then prints `print` (a shell expression) with `sh`, in a scratch
/// directory; returns what it printed, after checking no canary file was made there.
fn run_sh(code: &str, print: &str) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("{code}\nprintf '%s' {print}"))
        .current_dir(dir.path())
        .output()
        .expect("sh runs");
    assert!(
        !dir.path().join("CANARY").exists(),
        "the value ran a command: {code}"
    );
    assert!(
        out.status.success(),
        "{code}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn line_starting<'a>(text: &'a str, prefix: &str) -> &'a str {
    text.lines()
        .map(str::trim_start)
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line starting {prefix} in\n{text}"))
}

fn sh_syntax_ok(script: &str) {
    let out = Command::new("sh")
        .args(["-n", "-c", script])
        .output()
        .expect("sh runs");
    assert!(
        out.status.success(),
        "sh -n: {}\n{script}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn hostile_k3s_version_stays_one_shell_word_in_every_k3s_template() {
    for t in K3S {
        for h in HOSTILE {
            let out = render(t, "prod-workers-abcde", json!({ "k3s_version": h }))
                .unwrap_or_else(|e| panic!("{t} with {h:?}: {e}"));
            let script = install_script(&out);
            sh_syntax_ok(&script);
            // The release the install runs: one shell word, whatever the group set.
            let line = line_starting(&script, "INSTALL_K3S_VERSION=");
            assert_eq!(run_sh(line, "\"$INSTALL_K3S_VERSION\""), *h, "{t}: {line}");
        }
    }
}

#[test]
fn hostile_token_and_url_stay_intact_in_the_k3s_config() {
    for t in K3S {
        for h in HOSTILE
            .iter()
            .copied()
            .chain(["line one\nNODEWRIGHT_K3S_CONFIG\nrm -rf /"])
        {
            let out = render(
                t,
                "prod-workers-abcde",
                json!({ "k3s_token": h, "k3s_url": h }),
            )
            .unwrap_or_else(|e| panic!("{t} with {h:?}: {e}"));
            let config = k3s_config(&out);
            assert_eq!(config["token"].as_str(), Some(h), "{t}");
            assert_eq!(config["server"].as_str(), Some(h), "{t}");
            assert_eq!(
                config["node-name"].as_str(),
                Some("prod-workers-abcde"),
                "{t}"
            );
            if t.ends_with(".sh.j2") {
                sh_syntax_ok(&out.content);
            }
        }
    }
}

#[test]
fn hostile_join_command_stays_one_shell_word() {
    for h in HOSTILE {
        let value = format!("kubeadm join 10.0.0.10:6443 {h}");
        let out = render(
            "kubeadm-join.sh.j2",
            "prod-workers-abcde",
            json!({ "join_command": value }),
        )
        .unwrap_or_else(|e| panic!("{h:?}: {e}"));
        sh_syntax_ok(&out.content);
        let line = line_starting(&out.content, "join_command=");
        assert_eq!(run_sh(line, "\"$join_command\""), value);
    }
}

#[test]
fn hostile_node_names_stay_one_word_and_intact() {
    // Config validation only lets DNS labels through; the templates hold even without it.
    for h in HOSTILE.iter().filter(|h| !h.is_empty()) {
        for t in ["k3s-agent.join.sh.j2", "kubeadm-join.sh.j2"] {
            let out = render(t, h, json!({})).unwrap_or_else(|e| panic!("{t} {h:?}: {e}"));
            sh_syntax_ok(&out.content);
            let line = line_starting(&out.content, "hostnamectl set-hostname ");
            let word = line
                .trim_start_matches("hostnamectl set-hostname ")
                .split(" 2>/dev/null")
                .next()
                .unwrap_or_default();
            assert_eq!(
                run_sh(&format!("set -- {word}"), "\"$#|$1\""),
                format!("1|{h}"),
                "{t}"
            );
        }
        let out = render("k3s-agent.cloud-init.yaml.j2", h, json!({})).expect("cloud-init");
        assert_eq!(files(&out).get("hostname").map(String::as_str), Some(*h));
        let out = render("k3s-agent.butane.yaml.j2", h, json!({})).expect("butane");
        assert_eq!(files(&out).get("/etc/hostname"), Some(&format!("{h}\n")));
    }
}

#[test]
fn a_newline_in_a_shell_value_is_refused_not_rendered() {
    for t in K3S {
        let err = render(
            t,
            "prod-workers-abcde",
            json!({ "k3s_version": "v1\nruncmd: [reboot]" }),
        )
        .expect_err("a newline in k3s_version");
        assert!(err.contains("control character"), "{t}: {err}");
    }
    let err = render(
        "kubeadm-join.sh.j2",
        "prod-workers-abcde",
        json!({ "join_command": "kubeadm join x\nreboot" }),
    )
    .expect_err("a newline in join_command");
    assert!(err.contains("control character"), "{err}");
}
