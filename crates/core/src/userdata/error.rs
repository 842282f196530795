//! Why user data could not be rendered: [`UserDataError`], whose messages name the
//! template, the line and the fix, and the reading of minijinja's errors into it (the
//! innermost include, the undefined expression). Apart from rendering, which only maps
//! its failures here.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use super::butane;
use super::context::BUILTIN_VARIABLES;

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
        "userData.variables.{variable}: `{pinned}` is newer than the API server's `{server}`, \
         and a node is never made newer than its control plane (the Kubernetes version skew \
         policy); pin `{server}` or older, or remove `{variable}` so new nodes install the \
         server's version"
    )]
    NewerThanServer {
        variable: String,
        pinned: String,
        server: String,
    },
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
            UserDataError::VariableFile { .. } | UserDataError::NewerThanServer { .. } => None,
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

/// What an undefined-variable error names when the error does not locate it.
pub(super) const UNKNOWN_VARIABLE: &str = "(unknown)";

/// The template's variables the context lacks (top level, and included templates'),
/// joined; for an undefined-value error that carries no location.
pub(super) fn missing_variables(
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
pub(super) fn map_error(requested: &str, e: minijinja::Error) -> UserDataError {
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
