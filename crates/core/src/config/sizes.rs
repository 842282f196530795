//! Groups of several sizes (`openstack.flavor: [m1.small, m1.large]`): what does not go
//! with them. The size lists themselves are checked by each provider's settings.

use super::{ConfigProblem, NodeGroupConfig};

/// A planning size written for the whole group would hide what each size offers.
pub(super) fn validate_sizes(p: &mut Vec<ConfigProblem>, at: &str, g: &NodeGroupConfig) {
    let sizes = g.sizes();
    if sizes.is_empty() {
        return;
    }
    let listed = sizes.join(", ");
    if g.node_memory.is_some() {
        p.push(ConfigProblem::new(
            format!("{at}.nodeMemory"),
            format!(
                "set for a group of several sizes ({listed}); each size's memory is its own: remove nodeMemory, or list one size"
            ),
        ));
    }
    for name in ["cpu", "memory"] {
        if g.resources.contains_key(name) {
            p.push(ConfigProblem::new(
                format!("{at}.resources.{name}"),
                format!(
                    "set for a group of several sizes ({listed}); each size's {name} is its own: remove resources.{name}, or list one size"
                ),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::{Config, ConfigError};

    /// A config of one group `g` of `provider` with its block `settings` and `extra`
    /// lines, parsed.
    fn parse(provider: &str, settings: &str, extra: &str) -> Result<Config, ConfigError> {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("t.j2"), "#!/bin/sh\n").expect("template");
        let text = format!(
            "clusterName: c\nfreeMemoryTarget: 0 B\ntemplatesDir: {}\nnodeGroups:\n- name: g\n  provider: {provider}\n  maxSize: 3\n  {provider}: {settings}\n  userData: {{template: t.j2}}\n{extra}",
            dir.path().display()
        );
        Config::parse(&text, Path::new("/"))
    }

    fn problems(openstack: &str, extra: &str) -> Vec<(String, String)> {
        match parse("openstack", openstack, extra) {
            Ok(_) => Vec::new(),
            Err(e) => e
                .problems()
                .iter()
                .map(|p| (p.path.clone(), p.message.clone()))
                .collect(),
        }
    }

    #[test]
    fn a_flavor_list_is_refused_empty_with_a_name_twice_or_with_one_node_shape() {
        let p = problems("{flavor: [], image: i}", "");
        assert_eq!(p[0].0, "nodeGroups[0].openstack.flavor", "{p:?}");
        assert!(p[0].1.contains("expected a flavor name"), "{p:?}");

        let p = problems("{flavor: [m1.small, m1.large, m1.small], image: i}", "");
        assert_eq!(p[0].0, "nodeGroups[0].openstack.flavor", "{p:?}");
        assert!(p[0].1.contains("`m1.small` twice"), "{p:?}");

        let p = problems(
            "{flavor: [m1.small, m1.large], image: i}",
            "  nodeMemory: 8 GiB\n  resources: {cpu: 4}\n",
        );
        let paths: Vec<&str> = p.iter().map(|(path, _)| path.as_str()).collect();
        assert_eq!(
            paths,
            ["nodeGroups[0].nodeMemory", "nodeGroups[0].resources.cpu"],
            "{p:?}"
        );
        assert!(p[0].1.contains("remove nodeMemory"), "{p:?}");

        // One name, or a list of one, is a group of one size as before.
        assert_eq!(
            problems("{flavor: [m1.small], image: i}", "  nodeMemory: 8 GiB\n"),
            []
        );
        assert_eq!(problems("{flavor: m1.small, image: i}", ""), []);
    }

    const KAM: &str = "{datacenter: EU, image: ubuntu";

    #[test]
    fn kamatera_sizes_are_refused_beside_cpu_and_ram_or_twice() {
        let first = |settings: &str| match parse("kamatera", settings, "") {
            Ok(_) => None,
            Err(e) => e
                .problems()
                .first()
                .map(|p| (p.path.clone(), p.message.clone())),
        };
        let p = first(&format!(
            "{KAM}, cpu: 2B, ram: 4 GiB, sizes: [{{cpu: 4B, ram: 8 GiB}}]}}"
        ))
        .expect("refused");
        assert_eq!(p.0, "nodeGroups[0].kamatera", "{p:?}");
        assert!(p.1.contains("sizes: set together with cpu/ram"), "{p:?}");
        let p = first(&format!(
            "{KAM}, sizes: [{{cpu: 2B, ram: 4 GiB}}, {{cpu: 2B, ram: 4096 MiB}}]}}"
        ))
        .expect("refused");
        assert!(p.1.contains("sizes[1]: 2B-4096 is listed twice"), "{p:?}");
        let p = first(&format!("{KAM}}}")).expect("refused");
        assert!(p.1.contains("cpu: missing"), "{p:?}");
    }

    /// Each size hashes as the group written with that size alone: a node made when the
    /// group had one size is current once that size is one of several.
    #[test]
    fn each_size_hashes_as_the_group_of_that_size_alone() {
        let cases = [
            (
                "openstack",
                "{flavor: [m1.small, m1.large], image: i}".to_string(),
                [
                    "{flavor: m1.small, image: i}".to_string(),
                    "{flavor: m1.large, image: i}".to_string(),
                ],
            ),
            (
                "kamatera",
                format!("{KAM}, sizes: [{{cpu: 2B, ram: 4 GiB}}, {{cpu: 4B, ram: 8 GiB}}]}}"),
                [
                    format!("{KAM}, cpu: 2B, ram: 4 GiB}}"),
                    format!("{KAM}, cpu: 4B, ram: 8 GiB}}"),
                ],
            ),
        ];
        for (provider, several, alone) in cases {
            let c = parse(provider, &several, "").expect("valid");
            let g = &c.node_groups[0];
            let hashes: Vec<&str> = g.size_hashes.iter().map(|(_, h)| h.as_str()).collect();
            let singles: Vec<String> = alone
                .iter()
                .map(|a| {
                    parse(provider, a, "").expect("valid").node_groups[0]
                        .settings_hash
                        .clone()
                })
                .collect();
            assert_eq!(hashes, singles, "{provider}");
            assert_eq!(
                g.settings_hash, singles[0],
                "{provider}: the first is the default"
            );
            assert!(singles.iter().all(|h| g.hash_is_current(h)), "{provider}");
        }
    }
}
