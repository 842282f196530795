//! Tests of rendering user data: templates, variables, secrets and the formats.

use super::*;
use crate::model::{LABEL_CLUSTER, LABEL_GROUP};

fn write(dir: &Path, name: &str, text: &str) {
    if let Err(e) = std::fs::write(dir.join(name), text) {
        panic!("write {name}: {e}");
    }
}

fn tmp() -> tempfile::TempDir {
    match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => panic!("tempdir: {e}"),
    }
}

fn ctx() -> RenderContext {
    RenderContext::new(
        "prod",
        "workers",
        "prod-workers-abc12",
        &BTreeMap::from([("tier".to_string(), "batch".to_string())]),
        vec!["dedicated=batch:NoSchedule".to_string()],
    )
}

fn cfg(template: &str, vars: serde_json::Value) -> UserDataConfig {
    UserDataConfig {
        template: template.to_string(),
        format: None,
        variables: serde_json::from_value(vars).unwrap_or_default(),
        variable_files: Default::default(),
        bootstrap_token: false,
    }
}

#[test]
fn infers_format_from_file_name() {
    use UserDataFormat::*;
    for (name, want) in [
        ("k3s-agent.butane.yaml.j2", Butane),
        ("node.bu", Butane),
        ("node.bu.j2", Butane),
        ("dir/x.BU", Butane),
        ("join.sh", Script),
        ("join.sh.j2", Script),
        ("k3s-agent.cloud-init.yaml.j2", CloudInit),
        ("user-data", CloudInit),
        ("bush.yaml", CloudInit),
        ("butane", CloudInit),
    ] {
        assert_eq!(infer_format(name), want, "{name}");
    }
}

#[test]
fn context_has_ownership_labels_and_startup_taint() {
    let c = ctx();
    assert_eq!(
        c.labels.get(LABEL_CLUSTER).map(String::as_str),
        Some("prod")
    );
    assert_eq!(
        c.labels.get(LABEL_GROUP).map(String::as_str),
        Some("workers")
    );
    assert_eq!(c.startup_taint, "nodewright.io/startup=true:NoSchedule");
    assert_eq!(
        c.k3s_node_args(),
        vec![
            "--node-name=prod-workers-abc12",
            "--node-label=nodewright.io/cluster=prod",
            "--node-label=nodewright.io/group=workers",
            "--node-label=tier=batch",
            "--node-taint=dedicated=batch:NoSchedule",
            "--node-taint=nodewright.io/startup=true:NoSchedule",
        ]
    );
}

#[test]
fn renders_variables_and_builtins() {
    let dir = tmp();
    write(
            dir.path(),
            "t.sh.j2",
            "#!/bin/sh\n{% for a in k3s_node_args %}\n{{ a }}\n{% endfor %}\n{{ greeting }} {{ labels['tier'] }}\n",
        );
    let out = render(
        dir.path(),
        &cfg("t.sh.j2", serde_json::json!({"greeting": "hi"})),
        &ctx(),
    );
    let out = out.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out.format, UserDataFormat::Script);
    assert!(out.content.ends_with("hi batch\n"), "{}", out.content);
    assert!(out
        .content
        .contains("--node-taint=nodewright.io/startup=true:NoSchedule\n"));
}

#[test]
fn undefined_variable_names_variable_template_and_line() {
    let dir = tmp();
    write(
        dir.path(),
        "u.yaml",
        "#cloud-config\n\nhostname: {{ nmae }}\n",
    );
    let e = render(dir.path(), &cfg("u.yaml", serde_json::json!({})), &ctx());
    match e {
        Err(e @ UserDataError::UndefinedVariable { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains("`u.yaml`, line 3"), "{msg}");
            assert!(msg.contains("`nmae`"), "{msg}");
        }
        other => panic!("unexpected {other:?}"),
    }
    write(dir.path(), "a.yaml", "#cloud-config\n{{ foo.bar }}\n");
    let e = render(dir.path(), &cfg("a.yaml", serde_json::json!({})), &ctx());
    let msg = e.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(msg.contains("line 2") && msg.contains("foo"), "{msg}");
    assert!(msg.contains("{% if foo is defined %}"), "{msg}");
}

#[test]
fn undefined_values_in_filters_are_errors_naming_the_expression() {
    let dir = tmp();
    for (src, want) in [
        ("#cloud-config\na: {{ tok | tojson }}\n", "`tok`"),
        ("#cloud-config\na: {{- (tok) | tojson -}}\n", "`tok`"),
        (
            "#cloud-config\n{% for k, v in extra | items %}\n{% endfor %}\n",
            "`extra`",
        ),
        ("#cloud-config\na: {{ x.y | tojson }}\n", "`x"),
    ] {
        write(dir.path(), "f.yaml", src);
        let e = render(dir.path(), &cfg("f.yaml", serde_json::json!({})), &ctx());
        let msg = e.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            msg.contains("undefined variable") && msg.contains(want),
            "{src}: {msg}"
        );
        assert!(msg.contains("line 2"), "{src}: {msg}");
    }
}

#[test]
fn optional_variables_can_be_guarded() {
    let dir = tmp();
    write(
            dir.path(),
            "o.yaml",
            "#cloud-config\n{% if v is defined %}\nv: {{ v }}\n{% endif %}\nw: {{ w | default('x') }}\n",
        );
    let out = render(dir.path(), &cfg("o.yaml", serde_json::json!({})), &ctx());
    let out = out.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out.content, "#cloud-config\nw: x\n");
}

#[test]
fn errors_inside_includes_name_the_included_file() {
    let dir = tmp();
    write(
        dir.path(),
        "main.yaml",
        "#cloud-config\n{% include 'part.j2' %}\n",
    );
    write(dir.path(), "part.j2", "a: 1\nb: {{ missing }}\n");
    let e = render(dir.path(), &cfg("main.yaml", serde_json::json!({})), &ctx());
    let msg = e.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(msg.contains("`part.j2`, line 2"), "{msg}");
}

#[test]
fn syntax_error_names_template_and_line() {
    let dir = tmp();
    write(
        dir.path(),
        "s.yaml",
        "#cloud-config\na: 1\n{% if x %}\nb: 2\n",
    );
    let e = render(
        dir.path(),
        &cfg("s.yaml", serde_json::json!({"x": 1})),
        &ctx(),
    );
    match e {
        Err(e @ UserDataError::Syntax { .. }) => {
            assert_eq!(e.template(), Some("s.yaml"));
            assert!(e.line().is_some(), "{e}");
        }
        other => panic!("unexpected {other:?}"),
    }
    let errs = check_all(dir.path()).err().unwrap_or_default();
    assert_eq!(errs.len(), 1);
}

#[test]
fn reserved_and_missing_templates() {
    let dir = tmp();
    write(dir.path(), "a.yaml", "#cloud-config\n");
    let e = render(
        dir.path(),
        &cfg("a.yaml", serde_json::json!({"labels": {}})),
        &ctx(),
    );
    assert!(matches!(e, Err(UserDataError::ReservedVariable { .. })));
    let e = render(dir.path(), &cfg("b.yaml", serde_json::json!({})), &ctx());
    let msg = e.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        msg.contains("`b.yaml` not found") && msg.contains("a.yaml"),
        "{msg}"
    );
    let e = render(
        dir.path(),
        &cfg("../etc/passwd", serde_json::json!({})),
        &ctx(),
    );
    assert!(matches!(e, Err(UserDataError::TemplateNotFound { .. })));
}

#[test]
fn cloud_config_yaml_and_script_checks() {
    let dir = tmp();
    write(dir.path(), "bad.yaml", "#cloud-config\na: [1\nb: 2\n");
    let e = render(dir.path(), &cfg("bad.yaml", serde_json::json!({})), &ctx());
    assert!(
        matches!(e, Err(UserDataError::CloudConfigYaml { .. })),
        "{e:?}"
    );
    write(dir.path(), "x.sh", "echo hi\n");
    let e = render(dir.path(), &cfg("x.sh", serde_json::json!({})), &ctx());
    assert!(matches!(e, Err(UserDataError::ScriptWithoutShebang { .. })));
}

#[test]
fn butane_errors_name_template_and_rendered_line() {
    let dir = tmp();
    write(
        dir.path(),
        "n.bu",
        "variant: fcos\nversion: 1.4.0\nstorage:\n  files:\n    - path: /x\n      mod: 0644\n",
    );
    let e = render(dir.path(), &cfg("n.bu", serde_json::json!({})), &ctx());
    let msg = e.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(msg.contains("`n.bu`") && msg.contains("line 6"), "{msg}");
    assert!(msg.contains("mod: 0644"), "{msg}");
}

#[test]
fn shipped_template_names_match_the_templates_directory() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../templates");
    let names = template_names(&dir).unwrap_or_default();
    assert_eq!(names, SHIPPED_TEMPLATES);
}

/// Release builds attach no debug info to errors unless asked; without it an
/// undefined-variable error names `(unknown)` instead of the variable.
#[test]
fn errors_carry_the_template_source_in_every_build() {
    let d = tmp();
    assert!(environment(d.path()).debug());
}

#[test]
fn a_missing_variable_is_named_without_debug_info() {
    let mut env = minijinja::Environment::new();
    env.set_debug(false);
    env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
    let t = match env.template_from_str("{{ k3s_url }} {{ k3s_token | upper }} {{ group }}") {
        Ok(t) => t,
        Err(e) => panic!("{e}"),
    };
    let context = BTreeMap::from([
        ("k3s_url".to_string(), serde_json::json!("u")),
        ("group".to_string(), serde_json::json!("g")),
    ]);
    assert_eq!(
        missing_variables(&t, &context).as_deref(),
        Some("k3s_token")
    );
}
