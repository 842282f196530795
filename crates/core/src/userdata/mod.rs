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

pub mod butane;
pub mod shell;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::model::{LABEL_CLUSTER, LABEL_GROUP, STARTUP_TAINT_KEY};

/// How a group's user data is produced (the `userData` key of a node group).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UserDataConfig {
    /// Template file name, relative to the templates directory.
    pub template: String,
    /// Output format; inferred from the template's file name when absent.
    #[serde(default)]
    pub format: Option<UserDataFormat>,
    /// Free-form variables passed to the template.
    #[serde(default)]
    pub variables: BTreeMap<String, serde_json::Value>,
    /// Variables read from files at render time (trailing newline trimmed), so secrets such
    /// as join tokens can come from a mounted Secret instead of the config.
    #[serde(default)]
    pub variable_files: BTreeMap<String, PathBuf>,
}

impl UserDataConfig {
    /// The explicit format, or the one inferred from the template name.
    pub fn effective_format(&self) -> UserDataFormat {
        self.format.unwrap_or_else(|| infer_format(&self.template))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum UserDataFormat {
    /// `#cloud-config` YAML (or any cloud-init user data), passed through.
    CloudInit,
    /// Butane (Fedora CoreOS) YAML, translated to Ignition 3.3 JSON.
    Butane,
    /// A shell script (e.g. a join script run through a guest agent).
    Script,
}

impl fmt::Display for UserDataFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            UserDataFormat::CloudInit => "cloud-init",
            UserDataFormat::Butane => "butane",
            UserDataFormat::Script => "script",
        })
    }
}

/// Infers the output format from a template file name.
///
/// The file name (without directories) is split at dots; the first part is the stem and
/// is ignored. If any later part is `butane` or `bu`, the format is Butane; else if any
/// is `sh`, it is Script; otherwise CloudInit. So `k3s.butane.yaml.j2`, `fcos.bu` →
/// Butane; `join.sh.j2` → Script; `k3s.cloud-init.yaml.j2`, `user-data` → CloudInit.
pub fn infer_format(template: &str) -> UserDataFormat {
    let file = template.rsplit('/').next().unwrap_or(template);
    let parts: Vec<&str> = file.split('.').skip(1).collect();
    if parts
        .iter()
        .any(|p| p.eq_ignore_ascii_case("butane") || p.eq_ignore_ascii_case("bu"))
    {
        UserDataFormat::Butane
    } else if parts.iter().any(|p| p.eq_ignore_ascii_case("sh")) {
        UserDataFormat::Script
    } else {
        UserDataFormat::CloudInit
    }
}

/// What nodewright knows about the node being created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderContext {
    pub cluster_name: String,
    pub group: String,
    pub node_name: String,
    /// Group labels plus [`LABEL_CLUSTER`] and [`LABEL_GROUP`].
    pub labels: BTreeMap<String, String>,
    /// Group taints, each `key=value:Effect` (or `key:Effect`).
    pub taints: Vec<String>,
    /// `nodewright.io/startup=true:NoSchedule`.
    pub startup_taint: String,
}

/// The templates shipped in the repository's `templates/` (and the chart's ConfigMap),
/// named when a group's template is missing.
pub const SHIPPED_TEMPLATES: &[&str] = &[
    "k3s-agent.butane.yaml.j2",
    "k3s-agent.cloud-init.yaml.j2",
    "k3s-agent.join.sh.j2",
    "kubeadm-join.sh.j2",
];

/// The names a template gets from nodewright; `variables` may not reuse them.
pub const BUILTIN_VARIABLES: &[&str] = &[
    "cluster_name",
    "group",
    "node_name",
    "labels",
    "taints",
    "startup_taint",
    "all_taints",
    "k3s_node_args",
];

/// The startup taint every new node registers with, `key=true:NoSchedule`.
pub fn startup_taint() -> String {
    format!("{STARTUP_TAINT_KEY}=true:NoSchedule")
}

impl RenderContext {
    /// Builds the context for one node: adds nodewright's ownership labels (which win
    /// over group labels of the same key) and the startup taint.
    pub fn new(
        cluster_name: impl Into<String>,
        group: impl Into<String>,
        node_name: impl Into<String>,
        group_labels: &BTreeMap<String, String>,
        group_taints: Vec<String>,
    ) -> Self {
        let cluster_name = cluster_name.into();
        let group = group.into();
        let mut labels = group_labels.clone();
        labels.insert(LABEL_CLUSTER.to_string(), cluster_name.clone());
        labels.insert(LABEL_GROUP.to_string(), group.clone());
        RenderContext {
            cluster_name,
            group,
            node_name: node_name.into(),
            labels,
            taints: group_taints,
            startup_taint: startup_taint(),
        }
    }

    /// Group taints followed by the startup taint.
    pub fn all_taints(&self) -> Vec<String> {
        let mut all = self.taints.clone();
        all.push(self.startup_taint.clone());
        all
    }

    /// `k3s agent` flags for this node: node name, labels, taints (incl. startup).
    pub fn k3s_node_args(&self) -> Vec<String> {
        let mut args = vec![format!("--node-name={}", self.node_name)];
        args.extend(
            self.labels
                .iter()
                .map(|(k, v)| format!("--node-label={k}={v}")),
        );
        args.extend(
            self.all_taints()
                .into_iter()
                .map(|t| format!("--node-taint={t}")),
        );
        args
    }

    fn builtins(&self) -> BTreeMap<&'static str, serde_json::Value> {
        use serde_json::Value;
        let strings = |v: Vec<String>| Value::Array(v.into_iter().map(Value::String).collect());
        BTreeMap::from([
            ("cluster_name", Value::String(self.cluster_name.clone())),
            ("group", Value::String(self.group.clone())),
            ("node_name", Value::String(self.node_name.clone())),
            (
                "labels",
                Value::Object(
                    self.labels
                        .iter()
                        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                        .collect(),
                ),
            ),
            ("taints", strings(self.taints.clone())),
            ("startup_taint", Value::String(self.startup_taint.clone())),
            ("all_taints", strings(self.all_taints())),
            ("k3s_node_args", strings(self.k3s_node_args())),
        ])
    }
}

/// Rendered user data, ready to hand to the cloud.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderedUserData {
    pub format: UserDataFormat,
    /// cloud-init text, a script, or Ignition JSON (for Butane templates).
    pub content: String,
}

/// Shows ` line N` when a line is known.
struct AtLine(Option<usize>);

impl fmt::Display for AtLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(line) => write!(f, ", line {line}"),
            None => Ok(()),
        }
    }
}

/// Shows `\n  the line reads: …` when the offending text is known.
struct Excerpt<'a>(&'a Option<String>);

impl fmt::Display for Excerpt<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(text) => write!(f, " (the line reads: `{}`)", text.trim()),
            None => Ok(()),
        }
    }
}

/// Explains where a line number of rendered output points, when there is one.
struct RenderedLineHint(Option<usize>);

impl fmt::Display for RenderedLineHint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_some() {
            f.write_str(
                "; the line number counts lines of the rendered output, so look for the \
                 quoted text in the template (often wrong indentation, or a value that \
                 needs `| tojson` quoting)",
            )?;
        }
        Ok(())
    }
}

/// Why user data could not be rendered. Every variant names the template file; syntax,
/// render and YAML errors also name the line.
#[derive(Debug, thiserror::Error)]
pub enum UserDataError {
    #[error(
        "user data template `{template}` not found in {}{}; \
         check `userData.template` (it is relative to the templates directory)",
        dir.display(),
        available_hint(available)
    )]
    TemplateNotFound {
        template: String,
        dir: PathBuf,
        available: Vec<String>,
    },
    #[error(
        "userData.variableFiles.{name}: cannot read {}: {source}; expected a readable file (e.g. a mounted Secret)",
        path.display()
    )]
    VariableFile {
        name: String,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read templates directory {}: {source}", dir.display())]
    Io {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "template `{template}`{}: syntax error: {detail}; fix the template (minijinja \
         uses Jinja2 syntax: {{{{ expr }}}}, {{% if %}}…{{% endif %}}, {{# comment #}})",
        AtLine(*line)
    )]
    Syntax {
        template: String,
        line: Option<usize>,
        detail: String,
    },
    #[error(
        "template `{template}`{}: undefined variable `{variable}`; add it to the group's \
         `userData.variables`, or guard it with `{{% if {root} is defined %}}` if it is \
         optional",
        AtLine(*line),
        root = variable.split(['.', '[']).next().unwrap_or(variable)
    )]
    UndefinedVariable {
        template: String,
        line: Option<usize>,
        variable: String,
    },
    #[error("template `{template}`{}: render error: {detail}", AtLine(*line))]
    Render {
        template: String,
        line: Option<usize>,
        detail: String,
    },
    #[error(
        "template `{template}`: `userData.variables.{name}` clashes with the built-in \
         variable of that name; rename the variable (built-ins: {})",
        BUILTIN_VARIABLES.join(", ")
    )]
    ReservedVariable { template: String, name: String },
    #[error(
        "template `{template}`: the rendered Butane is invalid{}: {source}{}{}",
        AtLine(*line),
        Excerpt(excerpt),
        RenderedLineHint(*line)
    )]
    Butane {
        template: String,
        /// Line of the rendered Butane document.
        line: Option<usize>,
        excerpt: Option<String>,
        #[source]
        source: Box<butane::ButaneError>,
    },
    #[error(
        "template `{template}`: the rendered #cloud-config is not valid YAML{}: \
         {message}{}{}",
        AtLine(*line),
        Excerpt(excerpt),
        RenderedLineHint(*line)
    )]
    CloudConfigYaml {
        template: String,
        line: Option<usize>,
        excerpt: Option<String>,
        message: String,
    },
    #[error(
        "template `{template}`: a script must start with a `#!` line (e.g. `#!/bin/sh`); \
         add one, or set `userData.format` if this is not a script"
    )]
    ScriptWithoutShebang { template: String },
}

impl UserDataError {
    /// The template file the error is about.
    pub fn template(&self) -> Option<&str> {
        match self {
            UserDataError::Io { .. } => None,
            UserDataError::TemplateNotFound { template, .. }
            | UserDataError::Syntax { template, .. }
            | UserDataError::UndefinedVariable { template, .. }
            | UserDataError::Render { template, .. }
            | UserDataError::ReservedVariable { template, .. }
            | UserDataError::Butane { template, .. }
            | UserDataError::CloudConfigYaml { template, .. }
            | UserDataError::ScriptWithoutShebang { template } => Some(template),
            UserDataError::VariableFile { .. } => None,
        }
    }

    /// The line the error is about (in the template for syntax/render errors, in the
    /// rendered output for YAML errors).
    pub fn line(&self) -> Option<usize> {
        match self {
            UserDataError::Syntax { line, .. }
            | UserDataError::UndefinedVariable { line, .. }
            | UserDataError::Render { line, .. }
            | UserDataError::Butane { line, .. }
            | UserDataError::CloudConfigYaml { line, .. } => *line,
            _ => None,
        }
    }
}

fn available_hint(available: &[String]) -> String {
    if available.is_empty() {
        String::new()
    } else {
        format!(" (available: {})", available.join(", "))
    }
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

/// What an undefined-variable error names when the error does not locate it.
const UNKNOWN_VARIABLE: &str = "(unknown)";

/// The template's variables the context lacks (top level, and included templates'),
/// joined; for an undefined-value error that carries no location.
fn missing_variables(
    template: &minijinja::Template<'_, '_>,
    context: &BTreeMap<String, serde_json::Value>,
) -> Option<String> {
    let mut missing: Vec<String> = template
        .undeclared_variables(false)
        .into_iter()
        .filter(|v| !context.contains_key(v))
        .collect();
    missing.sort();
    (!missing.is_empty()).then(|| missing.join("`, `"))
}

/// Turns a minijinja error into ours, naming the template (the included one, if the
/// error is inside an include) and the line.
fn map_error(requested: &str, e: minijinja::Error) -> UserDataError {
    // Errors inside included templates are chained; report the innermost one.
    let mut inner: &minijinja::Error = &e;
    while let Some(next) =
        std::error::Error::source(inner).and_then(|s| s.downcast_ref::<minijinja::Error>())
    {
        inner = next;
    }
    let template = inner.name().unwrap_or(requested).to_string();
    let line = inner.line();
    let detail = inner
        .detail()
        .map(str::to_string)
        .unwrap_or_else(|| inner.kind().to_string());
    match inner.kind() {
        minijinja::ErrorKind::SyntaxError | minijinja::ErrorKind::BadEscape => {
            UserDataError::Syntax {
                template,
                line,
                detail,
            }
        }
        minijinja::ErrorKind::UndefinedError => {
            let variable = inner
                .template_source()
                .zip(inner.range())
                .and_then(|(src, range)| undefined_expression(src, range))
                .unwrap_or_else(|| UNKNOWN_VARIABLE.to_string());
            UserDataError::UndefinedVariable {
                template,
                line,
                variable,
            }
        }
        _ => UserDataError::Render {
            template,
            line,
            detail,
        },
    }
}

/// The expression an undefined-value error points at. For a filter call (`x | tojson`)
/// minijinja's span covers only the filter name, so the filtered expression is read
/// back from the pipe to the opening `{{` / `{%`.
fn undefined_expression(src: &str, range: std::ops::Range<usize>) -> Option<String> {
    let span = src.get(range.clone())?.trim();
    let before = src.get(..range.start)?.trim_end();
    let expr = match before.strip_suffix('|') {
        Some(filtered) => {
            let open = filtered
                .rfind("{{")
                .into_iter()
                .chain(filtered.rfind("{%"))
                .max()?;
            let expr = filtered.get(open + 2..)?;
            let expr = expr.trim_start_matches(['-', '+']);
            // `for a, b in x | items`, `if x | length`: keep the operand.
            let expr = expr.rsplit_once(" in ").map_or(expr, |(_, e)| e);
            let expr = expr.trim();
            let expr = expr
                .strip_prefix("if ")
                .or_else(|| expr.strip_prefix("elif "))
                .unwrap_or(expr);
            expr.split('|').next().unwrap_or(expr).to_string()
        }
        None => span.to_string(),
    };
    let expr = expr.trim();
    let simple = expr.trim_start_matches('(').trim_end_matches(')').trim();
    let expr = if simple
        .chars()
        .all(|c| c.is_alphanumeric() || matches!(c, '_' | '.'))
    {
        simple
    } else {
        expr
    };
    (!expr.is_empty()).then(|| expr.to_string())
}

#[cfg(test)]
mod tests;
