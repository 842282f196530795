//! A Kamatera group of several sizes (issue 28, "the right node size"): the create asks
//! for the size the plan chose, and the group's shape lists every size.

use super::*;

#[tokio::test]
async fn a_group_of_two_sizes_creates_the_chosen_one_and_shapes_both() {
    let (sim, _events) = start_sim().await;
    // `sizes` in place of the base's `cpu`/`ram`.
    let s = KamateraSettings {
        cpu: String::new(),
        ram: Default::default(),
        ..settings("sizes: [{cpu: 2B, ram: 4 GiB}, {cpu: 4B, ram: 8 GiB}]\n")
    };
    let p = provider(&sim, &[("workers", s)]);

    let shape = p.group_shape("workers").await.expect("shape");
    let sizes: Vec<(&str, Option<u64>, Option<u64>)> = shape
        .sizes
        .iter()
        .map(|s| (s.name.as_str(), s.cpu_milli, s.memory))
        .collect();
    assert_eq!(
        sizes,
        [
            ("2B-4096", Some(2000), Some(4 * GI)),
            ("4B-8192", Some(4000), Some(8 * GI))
        ]
    );
    assert_eq!(shape.memory, Some(4 * GI), "the first is the default");

    let big = CreateRequest {
        size: Some("4B-8192".into()),
        ..req("c1-workers-big", "workers")
    };
    let server = p.create_server(&big).await.expect("create");
    assert_eq!(server.memory_bytes, Some(8 * GI));
    let small = p
        .create_server(&req("c1-workers-dflt", "workers"))
        .await
        .expect("create");
    assert_eq!(small.memory_bytes, Some(4 * GI));
    let made: Vec<(String, String, u64)> = sim
        .servers()
        .into_iter()
        .map(|v| (v.name, v.cpu, v.ram_mb))
        .collect();
    assert!(
        made.contains(&("c1-workers-big".into(), "4B".into(), 8192)),
        "{made:?}"
    );
    assert!(
        made.contains(&("c1-workers-dflt".into(), "2B".into(), 4096)),
        "{made:?}"
    );

    // A size the group does not list is refused before any call.
    let other = CreateRequest {
        size: Some("8B-16384".into()),
        ..req("c1-workers-odd", "workers")
    };
    assert!(p.create_server(&other).await.is_err());
    assert_eq!(sim.servers().len(), 2);
}
