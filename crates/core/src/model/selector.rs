//! The placement rules of a pod, as plain data: label selectors, required node
//! affinity, inter-pod (anti-)affinity, topology spread and host ports, with the
//! matching semantics of the Kubernetes API (`metav1.LabelSelector`, `NodeSelector`).

use std::collections::BTreeMap;

use serde::Serialize;

/// Operator of a label requirement (pod label selectors and node selector terms).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Operator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    /// Node selectors only: the label parses as an integer greater than the one value.
    Gt,
    /// Node selectors only: the label parses as an integer less than the one value.
    Lt,
}

impl Operator {
    pub fn parse(s: &str) -> Option<Operator> {
        Some(match s {
            "In" => Operator::In,
            "NotIn" => Operator::NotIn,
            "Exists" => Operator::Exists,
            "DoesNotExist" => Operator::DoesNotExist,
            "Gt" => Operator::Gt,
            "Lt" => Operator::Lt,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Requirement {
    pub key: String,
    pub operator: Operator,
    pub values: Vec<String>,
}

impl Requirement {
    /// Whether a value (`None`: the label is absent) satisfies this requirement.
    pub fn matches(&self, value: Option<&str>) -> bool {
        match self.operator {
            Operator::In => value.is_some_and(|v| self.values.iter().any(|x| x == v)),
            Operator::NotIn => value.is_none_or(|v| !self.values.iter().any(|x| x == v)),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
            Operator::Gt | Operator::Lt => {
                let (Some(v), [bound]) = (value, self.values.as_slice()) else {
                    return false;
                };
                match (v.parse::<i64>(), bound.parse::<i64>()) {
                    (Ok(v), Ok(b)) if self.operator == Operator::Gt => v > b,
                    (Ok(v), Ok(b)) => v < b,
                    _ => false,
                }
            }
        }
    }
}

/// A `metav1.LabelSelector`: every `matchLabels` pair and every expression must hold.
/// An empty selector matches everything; a selector that could not be read (an
/// unknown operator) is kept as `never`, matching nothing, as the API server treats it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct LabelSelector {
    pub match_labels: BTreeMap<String, String>,
    pub expressions: Vec<Requirement>,
    pub never: bool,
}

impl LabelSelector {
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        !self.never
            && self
                .match_labels
                .iter()
                .all(|(k, v)| labels.get(k) == Some(v))
            && self
                .expressions
                .iter()
                .all(|r| r.matches(labels.get(&r.key).map(String::as_str)))
    }

    pub fn is_empty(&self) -> bool {
        !self.never && self.match_labels.is_empty() && self.expressions.is_empty()
    }
}

/// One term of required node affinity: all its expressions and field requirements hold.
/// A term with neither matches no node, as in the scheduler.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct NodeSelectorTerm {
    pub expressions: Vec<Requirement>,
    /// `matchFields`; the API allows only `metadata.name`.
    pub fields: Vec<Requirement>,
}

impl NodeSelectorTerm {
    pub fn matches(&self, node_name: &str, labels: &BTreeMap<String, String>) -> bool {
        if self.expressions.is_empty() && self.fields.is_empty() {
            return false;
        }
        self.expressions
            .iter()
            .all(|r| r.matches(labels.get(&r.key).map(String::as_str)))
            && self
                .fields
                .iter()
                .all(|r| r.key == "metadata.name" && r.matches(Some(node_name)))
    }

    /// Whether this term pins a node by name (a new node can never match it).
    pub fn names_a_node(&self) -> bool {
        !self.fields.is_empty()
    }
}

/// Which namespaces a pod affinity term looks at.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Namespaces {
    /// The listed ones (the pod's own when the term names none).
    Listed(Vec<String>),
    /// All of them (`namespaceSelector: {}`, or a namespace selector by labels, which
    /// the planner cannot evaluate without namespace objects: counted as all, which for
    /// anti-affinity errs toward more nodes, never fewer).
    All,
}

impl Namespaces {
    pub fn contains(&self, ns: &str) -> bool {
        match self {
            Namespaces::All => true,
            Namespaces::Listed(l) => l.iter().any(|n| n == ns),
        }
    }
}

/// A required pod (anti-)affinity term.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct PodAffinityTerm {
    pub selector: LabelSelector,
    pub namespaces: Namespaces,
    pub topology_key: String,
}

impl PodAffinityTerm {
    pub fn selects(&self, namespace: &str, labels: &BTreeMap<String, String>) -> bool {
        self.namespaces.contains(namespace) && self.selector.matches(labels)
    }
}

/// A `topologySpreadConstraint` with `whenUnsatisfiable: DoNotSchedule` (the others only
/// score, so they never make a pod unschedulable).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct SpreadConstraint {
    pub max_skew: u32,
    pub topology_key: String,
    /// Already narrowed by `matchLabelKeys` with the pod's own values.
    pub selector: LabelSelector,
    pub min_domains: Option<u32>,
    /// `nodeAffinityPolicy: Honor` (the default): only nodes the pod's nodeSelector and
    /// node affinity accept count as domains.
    pub honor_node_affinity: bool,
    /// `nodeTaintsPolicy: Honor` (default Ignore): only nodes whose taints the pod
    /// tolerates count.
    pub honor_taints: bool,
}

/// A host port a container asks for; two pods conflict on a node when protocol and
/// port are equal and the host IPs overlap (`0.0.0.0` overlaps every address).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct HostPort {
    pub protocol: String,
    pub port: u16,
    pub ip: String,
}

impl HostPort {
    pub fn conflicts(&self, o: &HostPort) -> bool {
        let wildcard = |ip: &str| ip.is_empty() || ip == "0.0.0.0" || ip == "::";
        self.port == o.port
            && self.protocol == o.protocol
            && (wildcard(&self.ip) || wildcard(&o.ip) || self.ip == o.ip)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn req(key: &str, op: Operator, values: &[&str]) -> Requirement {
        Requirement {
            key: key.into(),
            operator: op,
            values: values.iter().map(|v| v.to_string()).collect(),
        }
    }

    #[test]
    fn requirement_operators() {
        let l = labels(&[("zone", "a"), ("cores", "8")]);
        let get = |k: &str| l.get(k).map(String::as_str);
        assert!(req("zone", Operator::In, &["a", "b"]).matches(get("zone")));
        assert!(!req("zone", Operator::In, &["b"]).matches(get("zone")));
        assert!(!req("zone", Operator::In, &["a"]).matches(get("nope")));
        assert!(req("zone", Operator::NotIn, &["b"]).matches(get("zone")));
        assert!(req("zone", Operator::NotIn, &["b"]).matches(get("nope")));
        assert!(req("zone", Operator::Exists, &[]).matches(get("zone")));
        assert!(req("nope", Operator::DoesNotExist, &[]).matches(get("nope")));
        assert!(req("cores", Operator::Gt, &["4"]).matches(get("cores")));
        assert!(!req("cores", Operator::Lt, &["4"]).matches(get("cores")));
        assert!(!req("zone", Operator::Gt, &["4"]).matches(get("zone")));
        assert!(!req("cores", Operator::Gt, &["x"]).matches(get("cores")));
    }

    #[test]
    fn empty_label_selector_matches_everything_and_never_matches_nothing() {
        let l = labels(&[("app", "web")]);
        assert!(LabelSelector::default().matches(&l));
        let never = LabelSelector {
            never: true,
            ..LabelSelector::default()
        };
        assert!(!never.matches(&l));
        let only_expressions = LabelSelector {
            expressions: vec![req("app", Operator::In, &["db"])],
            ..LabelSelector::default()
        };
        assert!(!only_expressions.matches(&l));
    }

    #[test]
    fn node_selector_term_without_requirements_matches_no_node() {
        let l = labels(&[("a", "b")]);
        assert!(!NodeSelectorTerm::default().matches("n1", &l));
        let by_name = NodeSelectorTerm {
            expressions: vec![],
            fields: vec![req("metadata.name", Operator::In, &["n1"])],
        };
        assert!(by_name.matches("n1", &l));
        assert!(!by_name.matches("n2", &l));
    }

    #[test]
    fn host_ports_conflict_on_overlapping_addresses() {
        let hp = |ip: &str, port| HostPort {
            protocol: "TCP".into(),
            port,
            ip: ip.into(),
        };
        assert!(hp("0.0.0.0", 80).conflicts(&hp("10.0.0.1", 80)));
        assert!(!hp("10.0.0.2", 80).conflicts(&hp("10.0.0.1", 80)));
        assert!(!hp("", 80).conflicts(&hp("", 81)));
        let udp = HostPort {
            protocol: "UDP".into(),
            ..hp("", 80)
        };
        assert!(!udp.conflicts(&hp("", 80)));
    }
}
