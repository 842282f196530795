use super::*;
use serde_json::json;

fn ign(yaml: &str) -> serde_json::Value {
    match to_ignition_json(yaml) {
        Ok(s) => serde_json::from_str(&s).unwrap_or_else(|e| panic!("bad JSON {e}: {s}")),
        Err(e) => panic!("translation failed: {e}"),
    }
}

fn err(yaml: &str) -> ButaneError {
    match translate(yaml) {
        Ok(c) => panic!("expected an error, got {c:?}"),
        Err(e) => e,
    }
}

#[test]
fn minimal_config() {
    assert_eq!(
        ign("variant: fcos\nversion: 1.4.0\n"),
        json!({"ignition": {"version": "3.3.0"}})
    );
}

#[test]
fn all_supported_versions_are_accepted() {
    for v in SUPPORTED_VERSIONS {
        let out = ign(&format!("variant: fcos\nversion: {v}\n"));
        assert_eq!(out["ignition"]["version"], "3.3.0");
    }
}

#[test]
fn files_with_octal_mode_owner_and_inline_contents() {
    let out = ign(r#"
variant: fcos
version: 1.4.0
storage:
  files:
    - path: /etc/hostname
      mode: 0644
      overwrite: true
      user: {name: core}
      group: {id: 0}
      contents:
        inline: "node-1\n"
    - path: /opt/run.sh
      mode: 0o755
      contents:
        source: https://example.com/run.sh.gz
        compression: gzip
        verification:
          hash: sha256-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
        http_headers:
          - name: Authorization
            value: Bearer x
      append:
        - inline: "echo done\n"
    - path: /etc/decimal
      mode: 420
"#);
    let files = &out["storage"]["files"];
    assert_eq!(files[0]["path"], "/etc/hostname");
    assert_eq!(files[0]["mode"], 420);
    assert_eq!(files[0]["overwrite"], true);
    assert_eq!(files[0]["user"], json!({"name": "core"}));
    assert_eq!(files[0]["group"], json!({"id": 0}));
    let src = files[0]["contents"]["source"].as_str().unwrap_or_default();
    assert_eq!(decode_data_url(src).as_deref(), Some(&b"node-1\n"[..]));
    assert_eq!(files[1]["mode"], 493);
    assert_eq!(files[1]["contents"]["compression"], "gzip");
    assert_eq!(
        files[1]["contents"]["httpHeaders"],
        json!([{"name": "Authorization", "value": "Bearer x"}])
    );
    assert!(files[1]["contents"]["verification"]["hash"]
        .as_str()
        .is_some_and(|h| h.starts_with("sha256-")));
    let append = files[1]["append"][0]["source"].as_str().unwrap_or_default();
    assert_eq!(
        decode_data_url(append).as_deref(),
        Some(&b"echo done\n"[..])
    );
    assert_eq!(files[2]["mode"], 420);
    assert!(files[2].get("contents").is_none());
}

#[test]
fn directories_links_units_users_groups_kargs() {
    let out = ign(r#"
variant: fcos
version: 1.4.0
storage:
  directories:
    - path: /var/lib/app
      mode: 0750
      user: {id: 1000}
  links:
    - path: /etc/localtime
      target: ../usr/share/zoneinfo/UTC
    - path: /usr/local/bin/k
      target: /usr/local/bin/k3s
      hard: true
systemd:
  units:
    - name: app.service
      enabled: true
      contents: |
        [Unit]
        Description=App
        [Service]
        ExecStart=/bin/true \
          --flag
        [Install]
        WantedBy=multi-user.target
    - name: zincati.service
      mask: true
    - name: docker.service
      dropins:
        - name: 10-env.conf
          contents: "[Service]\nEnvironment=A=B\n"
passwd:
  users:
    - name: core
      ssh_authorized_keys: [ "ssh-ed25519 AAAA test" ]
      groups: [wheel, sudo]
      password_hash: "$y$abc"
      uid: 1001
      home_dir: /home/core
      shell: /bin/bash
      should_exist: true
  groups:
    - name: app
      gid: 2000
      system: true
kernel_arguments:
  should_exist: [mitigations=auto]
  should_not_exist: [quiet]
"#);
    assert_eq!(
        out["storage"]["directories"],
        json!([{"path": "/var/lib/app", "mode": 488, "user": {"id": 1000}}])
    );
    assert_eq!(
        out["storage"]["links"],
        json!([
            {"path": "/etc/localtime", "target": "../usr/share/zoneinfo/UTC"},
            {"path": "/usr/local/bin/k", "target": "/usr/local/bin/k3s", "hard": true}
        ])
    );
    let units = &out["systemd"]["units"];
    assert_eq!(units[0]["name"], "app.service");
    assert_eq!(units[0]["enabled"], true);
    assert!(units[0]["contents"]
        .as_str()
        .is_some_and(|c| c.contains("WantedBy=multi-user.target")));
    assert_eq!(units[1], json!({"name": "zincati.service", "mask": true}));
    assert_eq!(
        units[2]["dropins"],
        json!([{"name": "10-env.conf", "contents": "[Service]\nEnvironment=A=B\n"}])
    );
    assert_eq!(
        out["passwd"]["users"][0],
        json!({
            "name": "core",
            "sshAuthorizedKeys": ["ssh-ed25519 AAAA test"],
            "groups": ["wheel", "sudo"],
            "passwordHash": "$y$abc",
            "uid": 1001,
            "homeDir": "/home/core",
            "shell": "/bin/bash",
            "shouldExist": true
        })
    );
    assert_eq!(
        out["passwd"]["groups"],
        json!([{"name": "app", "gid": 2000, "system": true}])
    );
    assert_eq!(
        out["kernelArguments"],
        json!({"shouldExist": ["mitigations=auto"], "shouldNotExist": ["quiet"]})
    );
}

#[test]
fn ignition_section() {
    let out = ign(r#"
variant: fcos
version: 1.1.0
ignition:
  config:
    merge:
      - source: https://example.com/extra.ign
  timeouts:
    http_total: 30
  security:
    tls:
      certificate_authorities:
        - inline: "-----BEGIN CERTIFICATE-----\n"
  proxy:
    https_proxy: http://proxy:3128
    no_proxy: [localhost]
"#);
    let meta = &out["ignition"];
    assert_eq!(meta["version"], "3.3.0");
    assert_eq!(
        meta["config"],
        json!({"merge": [{"source": "https://example.com/extra.ign"}]})
    );
    assert_eq!(meta["timeouts"], json!({"httpTotal": 30}));
    assert_eq!(
        meta["proxy"],
        json!({"httpsProxy": "http://proxy:3128", "noProxy": ["localhost"]})
    );
    assert!(
        meta["security"]["tls"]["certificateAuthorities"][0]["source"]
            .as_str()
            .is_some_and(|s| s.starts_with("data:"))
    );
}

#[test]
fn unsupported_variant_and_version() {
    let e = err("variant: flatcar\nversion: 1.0.0\n");
    assert_eq!(e, ButaneError::UnsupportedVariant("flatcar".into()));
    assert!(e.to_string().contains("variant: fcos"), "{e}");

    let e = err("variant: fcos\nversion: 1.6.0\n");
    assert_eq!(e, ButaneError::UnsupportedVersion("1.6.0".into()));
    assert!(e.to_string().contains("1.0.0, 1.1.0"), "{e}");

    assert_eq!(err("version: 1.4.0\n"), ButaneError::MissingVariant);
    assert_eq!(err("variant: fcos\n"), ButaneError::MissingVersion);
    // A float-looking version is reported as written.
    assert_eq!(
        err("variant: fcos\nversion: 1.4\n"),
        ButaneError::UnsupportedVersion("1.4".into())
    );
}

#[test]
fn unknown_field_is_an_error_with_line() {
    let e =
        err("variant: fcos\nversion: 1.4.0\nstorage:\n  files:\n    - path: /a\n      mod: 0644\n");
    let msg = e.to_string();
    assert!(msg.contains("unknown field `mod`"), "{msg}");
    assert!(msg.contains("mode"), "should list expected fields: {msg}");
    assert_eq!(e.line(), Some(6), "{msg}");

    let e = err("variant: fcos\nversion: 1.4.0\npasswd:\n  users:\n    - name: core\n      ssh_authorised_keys: []\n");
    assert!(e.to_string().contains("ssh_authorised_keys"), "{e}");
}

#[test]
fn features_gated_by_version() {
    let e = err("variant: fcos\nversion: 1.3.0\nkernel_arguments:\n  should_exist: [a]\n");
    assert!(
        matches!(&e, ButaneError::NeedsNewerVersion { min: "1.4.0", .. }),
        "{e}"
    );
    let e = err("variant: fcos\nversion: 1.1.0\npasswd:\n  users:\n    - name: a\n      should_exist: false\n");
    assert!(
        matches!(&e, ButaneError::NeedsNewerVersion { min: "1.2.0", .. }),
        "{e}"
    );
}

#[test]
fn invalid_values_are_explained() {
    let base = "variant: fcos\nversion: 1.4.0\n";
    let cases = [
            ("storage:\n  files:\n    - path: etc/x\n", "absolute"),
            ("storage:\n  files:\n    - path: /x\n    - path: /x\n", "more than once"),
            ("storage:\n  files:\n    - path: /x\n      mode: 04755\n", "setuid"),
            ("storage:\n  files:\n    - path: /x\n      mode: \"rw\"\n", "not a number"),
            (
                "storage:\n  files:\n    - path: /x\n      contents:\n        inline: a\n        source: https://x\n",
                "not both",
            ),
            (
                "storage:\n  files:\n    - path: /x\n      contents:\n        local: x\n",
                "not supported",
            ),
            (
                "storage:\n  files:\n    - path: /x\n      contents:\n        source: ftp://x\n",
                "scheme",
            ),
            ("storage:\n  disks: []\n", "storage.disks"),
            ("storage:\n  links:\n    - path: /x\n", "target"),
            ("systemd:\n  units:\n    - name: app\n", "unit name"),
            (
                "systemd:\n  units:\n    - name: a.service\n      dropins:\n        - name: x\n",
                ".conf",
            ),
            (
                "systemd:\n  units:\n    - name: a.service\n      contents: \"ExecStart=/bin/true\"\n",
                "before any",
            ),
            ("passwd:\n  users:\n    - name: a\n    - name: a\n", "more than once"),
        ];
    for (body, needle) in cases {
        let e = err(&format!("{base}{body}"));
        assert!(e.to_string().contains(needle), "{body}: {e}");
    }
}

#[test]
fn data_url_round_trip() {
    for data in [
        &b""[..],
        b"plain-text/path.ext",
        b"line 1\nline 2 with spaces & symbols %#?\n",
        &[0u8, 255, 10, 13, 37][..],
    ] {
        let url = data_url(data);
        assert!(url.starts_with("data:"), "{url}");
        assert_eq!(decode_data_url(&url).as_deref(), Some(data), "{url}");
    }
    assert_eq!(data_url(b"abc"), "data:,abc");
    assert!(data_url(b"a b c d e f g h\n").contains(";base64,"));
}
