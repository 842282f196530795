//! Group variables the template never reads. One close to a name the template reads and
//! the group does not set is most often a misspelt optional variable (`k3s_versoin`),
//! which strict rendering cannot catch because the template guards it with `is defined`
//! or `default`: refused with the likely meaning. Any other is only warned about (a
//! variable kept for another template, a template that reads none).

use super::{Config, ConfigProblem};
use crate::userdata::{template_variables, BUILTIN_VARIABLES};

pub(super) struct Unused {
    pub problem: ConfigProblem,
    /// A did-you-mean was found: refuse rather than warn.
    pub likely_typo: bool,
}

pub(super) fn unused_variables(c: &Config) -> Vec<Unused> {
    let mut out = Vec::new();
    for (i, g) in c.node_groups.iter().enumerate() {
        let ud = &g.user_data;
        if !c.templates_dir.join(&ud.template).is_file() {
            continue;
        }
        let Some(read) = template_variables(&c.templates_dir, &ud.template) else {
            continue;
        };
        let read: Vec<String> = read.into_iter().collect();
        let unset: Vec<String> = read
            .iter()
            .filter(|r| !ud.variables.contains_key(*r) && !ud.variable_files.contains_key(*r))
            .cloned()
            .collect();
        let listing = if read.is_empty() {
            "it reads none".to_string()
        } else {
            format!("it reads: {}", read.join(", "))
        };
        let given = ud
            .variables
            .keys()
            .map(|n| (n, "variables"))
            .chain(ud.variable_files.keys().map(|n| (n, "variableFiles")));
        for (name, key) in given {
            if read.contains(name) || BUILTIN_VARIABLES.contains(&name.as_str()) {
                continue;
            }
            let best = super::error::did_you_mean(name, &unset);
            let advice = match &best {
                Some(best) => format!("did you mean `{best}`?"),
                None => "remove it, or check `userData.template`".to_string(),
            };
            out.push(Unused {
                problem: ConfigProblem::new(
                    format!("nodeGroups[{i}].userData.{key}.{name}"),
                    format!(
                        "template `{}` never reads `{name}`; {advice} ({listing})",
                        ud.template
                    ),
                ),
                likely_typo: best.is_some(),
            });
        }
    }
    out
}
