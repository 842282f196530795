//! The expander: which group's option a scale-up takes (`expander:` least waste,
//! priority or price), shared by the scale-up for pending pods and the one for buffers.

use crate::config::ExpanderKind;
use crate::plan::sched::GroupOption;
use crate::plan::view::View;

/// The expander: picks one scale-up option.
pub(super) fn choose<'a>(
    v: &View<'_>,
    mut options: Vec<GroupOption<'a>>,
) -> Option<GroupOption<'a>> {
    let placed = |o: &GroupOption<'_>| o.nodes.placed.len();
    let waste_then_pods = |a: &GroupOption<'_>, b: &GroupOption<'_>| {
        a.nodes
            .waste
            .total_cmp(&b.nodes.waste)
            .then(placed(b).cmp(&placed(a)))
            .then(a.group.cmp(&b.group))
    };
    match v.config.expander.kind {
        ExpanderKind::LeastWaste => options.sort_by(waste_then_pods),
        ExpanderKind::Priority => {
            let patterns: Vec<regex::Regex> = v
                .config
                .expander
                .priorities
                .iter()
                .filter_map(|p| regex::Regex::new(&format!("^(?:{p})$")).ok())
                .collect();
            let rank = |o: &GroupOption<'_>| {
                patterns
                    .iter()
                    .position(|r| r.is_match(&o.group))
                    .unwrap_or(usize::MAX)
            };
            options.sort_by(|a, b| rank(a).cmp(&rank(b)).then(waste_then_pods(a, b)));
        }
        ExpanderKind::Price => {
            let per_pod = |o: &GroupOption<'_>| {
                o.price.unwrap_or(f64::MAX) * f64::from(o.nodes.count) / placed(o).max(1) as f64
            };
            options.sort_by(|a, b| {
                per_pod(a)
                    .total_cmp(&per_pod(b))
                    .then(waste_then_pods(a, b))
            });
        }
    }
    options.into_iter().next()
}
