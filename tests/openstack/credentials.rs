//! OpenStack credentials files (clouds.yaml-style env files) parsed and redacted.

use super::*;

// ---------------------------------------------------------------------------
// Credentials

#[test]
fn example_credentials_file_loads_unchanged() {
    let c = OpenStackCredentials::from_yaml_str(EXAMPLE).unwrap();
    assert_eq!(c.auth_url, "https://pouta.csc.fi:5001/v3");
    assert_eq!(c.tokens_url(), "https://pouta.csc.fi:5001/v3/auth/tokens");
    assert_eq!(c.region.as_deref(), Some("nova"));
    assert_eq!(c.interface, Interface::Public);
    assert!(!c.insecure);
    assert_eq!(
        c.auth,
        AuthMethod::Password {
            username: "user".into(),
            password: "fairlys3cretpassw0rd?not".into(),
            user_domain: DomainRef::Name("default".into()),
            project: ProjectScope::Id("12345".into()),
        }
    );
}

#[test]
fn credentials_debug_redacts_secrets() {
    let c = OpenStackCredentials::from_yaml_str(EXAMPLE).unwrap();
    let dbg = format!("{c:?}");
    assert!(!dbg.contains("fairlys3cretpassw0rd"), "{dbg}");
    assert!(dbg.contains("user"));
    let app = OpenStackCredentials::from_yaml_str(
        "OS_AUTH_URL: https://k:5000/v3\nOS_APPLICATION_CREDENTIAL_ID: abc\nOS_APPLICATION_CREDENTIAL_SECRET: topsecretvalue\n",
    )
    .unwrap();
    let dbg = format!("{app:?} {:#?}", app.auth);
    assert!(!dbg.contains("topsecretvalue"), "{dbg}");
}

#[test]
fn credential_files_table() {
    // (case, yaml, Ok(check) or Err(substrings the error must contain))
    type Check = fn(&OpenStackCredentials) -> bool;
    type Case = (&'static str, String, Result<Check, Vec<&'static str>>);
    let cases: Vec<Case> = vec![
        (
            "numbers as values",
            "OS_AUTH_URL: http://k:5000\nOS_IDENTITY_API_VERSION: '3'\nOS_USERNAME: 42\nOS_PASSWORD: 1234\nOS_USER_DOMAIN_ID: default\nOS_PROJECT_ID: 987\n".into(),
            Ok(|c| {
                c.tokens_url() == "http://k:5000/v3/auth/tokens"
                    && matches!(&c.auth, AuthMethod::Password { username, password, project: ProjectScope::Id(p), user_domain: DomainRef::Id(d) }
                        if username == "42" && password == "1234" && p == "987" && d == "default")
            }),
        ),
        (
            "project by name falls back to user domain",
            "OS_AUTH_URL: https://k/v3\nOS_USERNAME: u\nOS_PASSWORD: p\nOS_USER_DOMAIN_NAME: Default\nOS_PROJECT_NAME: demo\nOS_REGION_NAME: RegionOne\nOS_INTERFACE: internal\n".into(),
            Ok(|c| {
                c.interface == Interface::Internal
                    && c.region.as_deref() == Some("RegionOne")
                    && matches!(&c.auth, AuthMethod::Password { project: ProjectScope::Name { name, domain: DomainRef::Name(d) }, .. } if name == "demo" && d == "Default")
            }),
        ),
        (
            "project domain id",
            "OS_AUTH_URL: https://k/v3\nOS_USERNAME: u\nOS_PASSWORD: p\nOS_USER_DOMAIN_NAME: Default\nOS_TENANT_NAME: demo\nOS_PROJECT_DOMAIN_ID: d1\n".into(),
            Ok(|c| matches!(&c.auth, AuthMethod::Password { project: ProjectScope::Name { domain: DomainRef::Id(d), .. }, .. } if d == "d1")),
        ),
        (
            "application credential by id",
            "OS_AUTH_TYPE: v3applicationcredential\nOS_AUTH_URL: https://k/v3\nOS_APPLICATION_CREDENTIAL_ID: abc\nOS_APPLICATION_CREDENTIAL_SECRET: s\n".into(),
            Ok(|c| matches!(&c.auth, AuthMethod::ApplicationCredentialId { id, secret } if id == "abc" && secret == "s")),
        ),
        (
            "application credential by name",
            "OS_AUTH_URL: https://k/v3\nOS_APPLICATION_CREDENTIAL_NAME: app\nOS_APPLICATION_CREDENTIAL_SECRET: s\nOS_USERNAME: u\nOS_USER_DOMAIN_NAME: Default\n".into(),
            Ok(|c| matches!(&c.auth, AuthMethod::ApplicationCredentialName { name, .. } if name == "app")),
        ),
        (
            "unknown OS_ key is accepted",
            format!("{EXAMPLE}OS_COMPUTE_API_VERSION: 2.79\nOS_PROJECT_DOMAIN_NAME: Default\n"),
            Ok(|c| c.region.as_deref() == Some("nova")),
        ),
        (
            "explicit OS_INSECURE",
            format!("{EXAMPLE}OS_INSECURE: true\nOS_CACERT: /etc/ssl/ca.pem\n"),
            Ok(|c| c.insecure && c.cacert.as_deref() == Some(std::path::Path::new("/etc/ssl/ca.pem"))),
        ),
        (
            "missing OS_AUTH_URL",
            EXAMPLE.lines().filter(|l| !l.starts_with("OS_AUTH_URL")).collect::<Vec<_>>().join("\n"),
            Err(vec!["OS_AUTH_URL", "Keystone URL"]),
        ),
        (
            "missing OS_PASSWORD",
            EXAMPLE.lines().filter(|l| !l.starts_with("OS_PASSWORD")).collect::<Vec<_>>().join("\n"),
            Err(vec!["OS_PASSWORD"]),
        ),
        (
            "missing user domain",
            EXAMPLE.lines().filter(|l| !l.starts_with("OS_USER_DOMAIN")).collect::<Vec<_>>().join("\n"),
            Err(vec!["OS_USER_DOMAIN_NAME", "OS_USER_DOMAIN_ID"]),
        ),
        (
            "missing project",
            EXAMPLE.lines().filter(|l| !l.starts_with("OS_TENANT")).collect::<Vec<_>>().join("\n"),
            Err(vec!["OS_PROJECT_ID", "OS_TENANT_NAME"]),
        ),
        (
            "app credential without secret",
            "OS_AUTH_URL: https://k/v3\nOS_APPLICATION_CREDENTIAL_ID: abc\n".into(),
            Err(vec!["OS_APPLICATION_CREDENTIAL_SECRET"]),
        ),
        (
            "non-OS key",
            format!("{EXAMPLE}username: bob\n"),
            Err(vec!["'username'", "OS_*"]),
        ),
        (
            "OS_ key a typo away from a known one",
            format!("{EXAMPLE}OS_PROJECT_DOMAN_NAME: Default\n"),
            Err(vec!["unknown key 'OS_PROJECT_DOMAN_NAME'", "did you mean 'OS_PROJECT_DOMAIN_NAME'?"]),
        ),
        (
            "identity v2",
            EXAMPLE.replace("OS_IDENTITY_API_VERSION: 3", "OS_IDENTITY_API_VERSION: 2"),
            Err(vec!["OS_IDENTITY_API_VERSION", "v3"]),
        ),
        (
            "nested value",
            format!("{EXAMPLE}OS_CACERT: [a, b]\n"),
            Err(vec!["OS_CACERT", "string or a number"]),
        ),
        (
            "bad insecure value",
            format!("{EXAMPLE}OS_INSECURE: maybe\n"),
            Err(vec!["OS_INSECURE"]),
        ),
        ("not a mapping", "- a\n- b\n".into(), Err(vec!["OS_*"])),
        ("empty file", "".into(), Err(vec!["OS_AUTH_URL"])),
    ];
    for (case, yaml, want) in cases {
        let got = OpenStackCredentials::from_yaml_str(&yaml);
        match (got, want) {
            (Ok(c), Ok(check)) => assert!(check(&c), "{case}: unexpected {c:?}"),
            (Err(e), Err(parts)) => {
                let msg = e.to_string();
                for p in parts {
                    assert!(msg.contains(p), "{case}: error '{msg}' lacks '{p}'");
                }
                assert!(
                    !msg.contains("fairlys3cretpassw0rd"),
                    "{case}: leaks password"
                );
            }
            (Ok(c), Err(_)) => panic!("{case}: expected an error, got {c:?}"),
            (Err(e), Ok(_)) => panic!("{case}: unexpected error {e}"),
        }
    }
}

#[test]
fn credentials_from_missing_file_names_it() {
    let err = OpenStackCredentials::from_file(std::path::Path::new("/nonexistent/os.yaml"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("/nonexistent/os.yaml"), "{err}");
}
