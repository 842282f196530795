//! Unit tests of the provider's private helpers.

use super::*;

#[test]
fn passwords_are_strong_and_distinct() {
    let a = generate_password().expect("password");
    let b = generate_password().expect("password");
    assert_ne!(a, b);
    for p in [&a, &b] {
        assert_eq!(p.len(), 16);
        assert!(p.chars().any(|c| c.is_ascii_lowercase()));
        assert!(p.chars().any(|c| c.is_ascii_uppercase()));
        assert!(p.chars().any(|c| c.is_ascii_digit()));
        assert!(p.chars().all(|c| c.is_ascii_alphanumeric()));
    }
}

#[test]
fn error_mapping() {
    assert!(matches!(
        api_error(
            "GET /service/servers",
            401,
            r#"{"message": "Authentication failed"}"#
        ),
        CloudError::Auth { .. }
    ));
    assert!(matches!(
        api_error(
            "POST /service/server",
            500,
            r#"{"message": "Insufficient balance"}"#
        ),
        CloudError::Quota { .. }
    ));
    match api_error(
        "POST /service/server",
        500,
        r#"{"message": "Datacenter XX not found"}"#,
    ) {
        CloudError::Api {
            status, message, ..
        } => {
            assert_eq!(status, 500);
            assert_eq!(message, "Datacenter XX not found");
        }
        e => panic!("unexpected {e:?}"),
    }
}

#[test]
fn groups_from_tags() {
    let s: KamateraSettings =
        crate::yaml::from_str("datacenter: EU\nimage: i\ncpu: 2B\nram: 2048 MiB\n")
            .expect("settings");
    let known: BTreeMap<String, KamateraSettings> =
        [("workers".to_string(), s)].into_iter().collect();
    let tags = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        group_of(
            "c-workers-abcde",
            &tags(&["nw-c", "nw-workers"]),
            "nw",
            "c",
            &known
        ),
        Some("workers".into())
    );
    // Unknown group: taken from the name, or when it is the only candidate.
    assert_eq!(
        group_of(
            "c-gpu-abcde",
            &tags(&["nw-c", "nw-gpu", "nw-x"]),
            "nw",
            "c",
            &known
        ),
        Some("gpu".into())
    );
    assert_eq!(
        group_of("odd", &tags(&["nw-c", "nw-gpu"]), "nw", "c", &known),
        Some("gpu".into())
    );
    assert_eq!(
        group_of("odd", &tags(&["nw-c", "nw-a", "nw-b"]), "nw", "c", &known),
        None
    );
    assert_eq!(group_of("odd", &tags(&["nw-c"]), "nw", "c", &known), None);
    // The creation-time tag is not a group.
    assert_eq!(
        group_of(
            "odd",
            &tags(&["nw-c", "nw-t1718000000", "nw-gpu"]),
            "nw",
            "c",
            &known
        ),
        Some("gpu".into())
    );
    assert_eq!(
        group_of("odd", &tags(&["nw-c", "nw-t1718000000"]), "nw", "c", &known),
        None
    );
    let t = |s: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(s);
    assert_eq!(
        created_from_tags(&tags(&["nw-c", "nw-t20", "nw-t10", "x-t5"]), "nw"),
        Some(t(10))
    );
    assert_eq!(created_from_tags(&tags(&["nw-c", "nw-tx"]), "nw"), None);
    assert_eq!(
        whole_seconds(SystemTime::UNIX_EPOCH + Duration::from_millis(10_999)),
        t(10)
    );
    assert!(valid_server_name("c-workers-abcde"));
    assert!(!valid_server_name("abc"));
    assert!(!valid_server_name("a.b.c.d"));
}
