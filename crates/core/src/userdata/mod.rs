//! User data rendering: minijinja templates from `templates/`, with Butane translated
//! to Ignition by nodewright itself ([`butane`]).
//!
//! # Template context
//!
//! A template sees every entry of the group's `userData.variables` at the top level,
//! plus these built-ins (a variable of the same name is an error):
//!
//! | name            | type                | content                                                   |
//! |-----------------|---------------------|-----------------------------------------------------------|
//! | `cluster_name`  | string              | the cluster's name                                        |
//! | `group`         | string              | the node group's name                                     |
//! | `node_name`     | string              | the new node's (and VM's) name; use it as hostname        |
//! | `labels`        | map string → string | group labels plus `nodewright.io/cluster`, `nodewright.io/group`, and `node.kubernetes.io/instance-type`, `topology.kubernetes.io/zone` / `region` where the provider knows them |
//! | `taints`        | list of strings     | group taints as `key=value:Effect`                        |
//! | `startup_taint` | string              | `nodewright.io/startup=true:NoSchedule`                   |
//! | `all_taints`    | list of strings     | `taints` followed by `startup_taint`                      |
//! | `k3s_node_args` | list of strings     | `--node-name=…`, one `--node-label=k=v` per label, one `--node-taint=…` per entry of `all_taints` |
//! | `server_version`| string              | the API server's `/version` `gitVersion`, e.g. `v1.31.4+k3s1`; undefined when it could not be read |
//! | `kube_version`  | string              | the Kubernetes release of it, e.g. `v1.31.4`; undefined with `server_version` |
//!
//! Filters beyond minijinja's: `tojson` (fails on undefined values) and `shell_quote`
//! (one POSIX shell word; see [`shell`]): use it for every value that lands in shell code.
//!
//! Undefined variables are errors (strict mode); guard optional ones with
//! `{% if name is defined %}`. Blocks are trimmed (`trim_blocks`, `lstrip_blocks`) and a
//! trailing newline is kept. Templates may `{% include %}` other files of the templates
//! directory.
//!
//! # Output format
//!
//! When `userData.format` is absent it is inferred from the template's file name (see
//! [`infer_format`]): a name containing `.butane` or `.bu` as one of its dot-separated
//! parts (`k3s.butane.yaml.j2`, `node.bu`, `node.bu.j2`) is Butane; one containing `.sh`
//! (`join.sh`, `join.sh.j2`) is a script; anything else is cloud-init.
//!
//! Rendered cloud-init that starts with `#cloud-config` is checked to be YAML, Butane is
//! translated to Ignition 3.3.0 JSON, and a script must start with `#!`.
//!
//! # Files
//!
//! - `settings`: the `userData` key of a node group ([`UserDataConfig`], [`infer_format`]).
//! - `context`: what a template sees of the new node ([`RenderContext`]).
//! - `error`: [`UserDataError`] and the reading of minijinja's errors.
//! - [`shell`]: the `shell_quote` filter; [`butane`]: Butane to Ignition.
//! - `variables`: the variables a template reads ([`template_variables`]).
//!
//! This file renders: the template environment, `render`, `check_all`, and the checks
//! of the rendered output.

pub mod butane;
mod context;
mod error;
mod settings;
pub mod shell;
mod variables;

use std::collections::BTreeMap;
use std::path::Path;

use error::{map_error, missing_variables, UNKNOWN_VARIABLE};

pub use context::{startup_taint, RenderContext, BUILTIN_VARIABLES};
pub use error::UserDataError;
pub use settings::{infer_format, UserDataConfig, UserDataFormat};
pub use variables::{reads_server_version, template_variables};

/// The templates shipped in the repository's `templates/` (and the chart's ConfigMap),
/// named when a group's template is missing.
pub const SHIPPED_TEMPLATES: &[&str] = &[
    "k3s-agent.butane.yaml.j2",
    "k3s-agent.cloud-init.yaml.j2",
    "k3s-agent.join.sh.j2",
    "kubeadm-join.cloud-init.yaml.j2",
    "kubeadm-join.sh.j2",
];

/// Rendered user data, ready to hand to the cloud.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderedUserData {
    pub format: UserDataFormat,
    /// cloud-init text, a script, or Ignition JSON (for Butane templates).
    pub content: String,
}

/// A YAML parse failure, independent of the YAML library.
struct YamlError {
    message: String,
    /// 1-based.
    line: Option<usize>,
}

/// The one place this module parses YAML; goes through [`crate::yaml`].
fn parse_yaml<T: serde::de::DeserializeOwned>(s: &str) -> Result<T, YamlError> {
    crate::yaml::from_str_with_path(s).map_err(|e| YamlError {
        // The message usually names the path already (`storage.files[0]: unknown …`).
        message: if e.path.is_empty()
            || e.message
                .contains(e.path.split(['.', '[']).next().unwrap_or_default())
        {
            e.message
        } else {
            format!("{}: {}", e.path, e.message)
        },
        line: e.line,
    })
}

fn line_text(text: &str, line: Option<usize>) -> Option<String> {
    let line = line?;
    text.lines()
        .nth(line.checked_sub(1)?)
        .map(|l| l.chars().take(200).collect())
}

fn environment(templates_dir: &Path) -> minijinja::Environment<'static> {
    let mut env = minijinja::Environment::new();
    env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
    // Debug info (the template source an error points into) is on by default only in
    // debug builds; without it a release build cannot name an undefined variable.
    env.set_debug(true);
    env.set_auto_escape_callback(|_| minijinja::AutoEscape::None);
    if let Ok(syntax) = minijinja::syntax::SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        .keep_trailing_newline(true)
        .build()
    {
        env.set_syntax(syntax);
    }
    env.set_loader(minijinja::path_loader(templates_dir));
    env.add_filter("tojson", strict_tojson);
    env.add_filter("shell_quote", shell::shell_quote_filter);
    env
}

/// `tojson` that fails on undefined values: the built-in one renders them as `null`
/// even in strict mode, which would silently turn a missing `k3s_token` into
/// `token: null`.
fn strict_tojson(
    value: &minijinja::Value,
    indent: Option<minijinja::Value>,
    kwargs: minijinja::value::Kwargs,
) -> Result<minijinja::Value, minijinja::Error> {
    if value.is_undefined() {
        return Err(minijinja::Error::new(
            minijinja::ErrorKind::UndefinedError,
            "undefined value passed to tojson",
        ));
    }
    minijinja::filters::tojson(value, indent, kwargs)
}

/// Lists the template files in `dir` (regular files, not starting with `.`), sorted.
pub fn template_names(dir: &Path) -> Result<Vec<String>, UserDataError> {
    let io = |source| UserDataError::Io {
        dir: dir.to_path_buf(),
        source,
    };
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        if !entry.file_type().map_err(io)?.is_file() {
            continue;
        }
        if let Some(name) = entry.file_name().to_str() {
            if !name.starts_with('.') {
                names.push(name.to_string());
            }
        }
    }
    names.sort();
    Ok(names)
}

/// Parses every template in `dir` (without rendering it), for `nodewright check`.
/// Returns the names checked, or every syntax error found.
pub fn check_all(dir: &Path) -> Result<Vec<String>, Vec<UserDataError>> {
    let names = template_names(dir).map_err(|e| vec![e])?;
    let env = environment(dir);
    let errors: Vec<UserDataError> = names
        .iter()
        .filter_map(|name| env.get_template(name).err().map(|e| map_error(name, e)))
        .collect();
    if errors.is_empty() {
        Ok(names)
    } else {
        Err(errors)
    }
}

/// Renders the user data for one node.
pub fn render(
    templates_dir: &Path,
    cfg: &UserDataConfig,
    ctx: &RenderContext,
) -> Result<RenderedUserData, UserDataError> {
    let name = cfg.template.as_str();
    if let Some(clash) = cfg
        .variables
        .keys()
        .chain(cfg.variable_files.keys())
        .find(|k| BUILTIN_VARIABLES.contains(&k.as_str()))
    {
        return Err(UserDataError::ReservedVariable {
            template: name.to_string(),
            name: clash.clone(),
        });
    }
    let mut context: BTreeMap<String, serde_json::Value> = cfg.variables.clone();
    for (var, path) in &cfg.variable_files {
        let text = std::fs::read_to_string(path).map_err(|source| UserDataError::VariableFile {
            name: var.clone(),
            path: path.clone(),
            source,
        })?;
        let value = text.strip_suffix('\n').unwrap_or(&text);
        let value = value.strip_suffix('\r').unwrap_or(value);
        context.insert(var.clone(), serde_json::Value::String(value.to_string()));
    }
    context.extend(ctx.builtins().into_iter().map(|(k, v)| (k.to_string(), v)));

    let env = environment(templates_dir);
    let template = env.get_template(name).map_err(|e| {
        if e.kind() == minijinja::ErrorKind::TemplateNotFound {
            UserDataError::TemplateNotFound {
                template: name.to_string(),
                dir: templates_dir.to_path_buf(),
                available: template_names(templates_dir).unwrap_or_default(),
            }
        } else {
            map_error(name, e)
        }
    })?;
    let text = template
        .render(minijinja::Value::from(minijinja::value::Serde(&context)))
        .map_err(|e| match map_error(name, e) {
            UserDataError::UndefinedVariable {
                template: t,
                line,
                variable,
            } if variable == UNKNOWN_VARIABLE => UserDataError::UndefinedVariable {
                variable: missing_variables(&template, &context).unwrap_or(variable),
                template: t,
                line,
            },
            other => other,
        })?;

    let format = cfg.effective_format();
    let content = match format {
        UserDataFormat::Butane => {
            butane::to_ignition_json(&text).map_err(|source| UserDataError::Butane {
                template: name.to_string(),
                line: source.line(),
                excerpt: line_text(&text, source.line()),
                source: Box::new(source),
            })?
        }
        UserDataFormat::CloudInit => {
            if text.starts_with("#cloud-config") {
                if let Err(e) = parse_yaml::<serde::de::IgnoredAny>(&text) {
                    return Err(UserDataError::CloudConfigYaml {
                        template: name.to_string(),
                        excerpt: line_text(&text, e.line),
                        line: e.line,
                        message: e.message,
                    });
                }
            }
            text
        }
        UserDataFormat::Script => {
            if !text.starts_with("#!") {
                return Err(UserDataError::ScriptWithoutShebang {
                    template: name.to_string(),
                });
            }
            text
        }
    };
    Ok(RenderedUserData { format, content })
}

#[cfg(test)]
mod tests;
