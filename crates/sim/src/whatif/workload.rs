//! The workload file: CSV with a header. Required columns, exactly these names:
//! `arrival_s,name,cpu_m,mem_mib,duration_s`; optional: `kind` (`Deployment` default,
//! `Job`, `Pod`), `node_selector` (`k=v;k2=v2`), `gpu`, `priority`. Unknown columns are
//! an error naming them; a bad row is an error naming its line.
//!
//! Columns may come in any order; fields may be quoted (`"a,b"`, `""` for a quote);
//! blank lines and lines starting with `#` are skipped; an empty optional field takes
//! its default. See `docs/simulate.md`.

use std::collections::{BTreeMap, HashMap};

/// What owns the pod, which decides what happens when it is evicted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub enum PodKind {
    /// Recreated by its controller when evicted; runs for `duration_s` in all.
    #[default]
    Deployment,
    /// Recreated when evicted and starts its run again from the beginning.
    Job,
    /// A bare pod: evicting it loses it.
    Pod,
}

/// One pod of the workload.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct WorkloadRow {
    /// 1-based line in the file, for errors and reports.
    pub line: usize,
    pub arrival_s: u64,
    pub name: String,
    pub cpu_m: u64,
    pub mem_mib: u64,
    pub duration_s: u64,
    pub kind: PodKind,
    pub node_selector: BTreeMap<String, String>,
    pub gpu: u32,
    pub priority: i32,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum WorkloadError {
    #[error("workload header: {0}")]
    Header(String),
    #[error("workload line {line}: {message}")]
    Row { line: usize, message: String },
}

/// The columns every workload file has, in the order the docs give them.
pub const REQUIRED_COLUMNS: [&str; 5] = ["arrival_s", "name", "cpu_m", "mem_mib", "duration_s"];
/// The columns a workload file may have besides the required ones.
pub const OPTIONAL_COLUMNS: [&str; 4] = ["kind", "node_selector", "gpu", "priority"];

/// Ten years: no arrival or duration may be longer, so sums of them never overflow.
pub const MAX_SECONDS: u64 = 10 * 365 * 24 * 3600;
/// A million cores.
pub const MAX_CPU_M: u64 = 1_000_000_000;
/// A pebibyte, in MiB (so bytes still fit in a `u64` many times over).
pub const MAX_MEM_MIB: u64 = 1 << 30;
/// Longest pod name Kubernetes accepts (a DNS subdomain).
const MAX_NAME_LEN: usize = 253;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Column {
    ArrivalS,
    Name,
    CpuM,
    MemMib,
    DurationS,
    Kind,
    NodeSelector,
    Gpu,
    Priority,
}

impl Column {
    fn from_name(name: &str) -> Option<Column> {
        Some(match name {
            "arrival_s" => Column::ArrivalS,
            "name" => Column::Name,
            "cpu_m" => Column::CpuM,
            "mem_mib" => Column::MemMib,
            "duration_s" => Column::DurationS,
            "kind" => Column::Kind,
            "node_selector" => Column::NodeSelector,
            "gpu" => Column::Gpu,
            "priority" => Column::Priority,
            _ => return None,
        })
    }
}

/// Parses a workload file; rows come back sorted by arrival (stable for ties).
pub fn parse_workload(text: &str) -> Result<Vec<WorkloadRow>, WorkloadError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut header: Option<Header> = None;
    let mut rows: Vec<WorkloadRow> = Vec::new();
    let mut names: HashMap<String, usize> = HashMap::new();
    for record in Records::new(text) {
        let record = record?;
        if record.fields.iter().all(|f| f.trim().is_empty()) {
            continue;
        }
        match &header {
            None => header = Some(Header::parse(&record.fields)?),
            Some(h) => {
                let line = record.line;
                let row = h.row(&record.fields, line)?;
                if let Some(first) = names.insert(row.name.clone(), line) {
                    return Err(WorkloadError::Row {
                        line,
                        message: format!(
                            "column name: `{}` is already the name of the pod on line {first}; \
                             every pod needs its own name",
                            row.name
                        ),
                    });
                }
                rows.push(row);
            }
        }
    }
    if header.is_none() {
        return Err(WorkloadError::Header(format!(
            "the file is empty: expected a header line such as `{}`",
            REQUIRED_COLUMNS.join(",")
        )));
    }
    rows.sort_by_key(|r| r.arrival_s);
    Ok(rows)
}

/// One CSV record and the line it starts on (1-based).
struct Record {
    line: usize,
    fields: Vec<String>,
}

/// The records of a CSV text (RFC 4180: `,` between fields, `\n` or `\r\n` between
/// records, `"` around a field that holds `,`, `"` (doubled) or a line break), skipping
/// lines that are blank or whose first non-blank character is `#`. Blanks around a
/// quoted field are allowed; a stray `"` is an error, never guessed at.
struct Records<'a> {
    text: &'a str,
    pos: usize,
    line: usize,
    failed: bool,
}

impl<'a> Records<'a> {
    fn new(text: &'a str) -> Self {
        Records {
            text,
            pos: 0,
            line: 1,
            failed: false,
        }
    }

    /// Skips blank and comment lines; false at the end of the text.
    fn skip_to_record(&mut self) -> bool {
        while self.pos < self.text.len() {
            let rest = &self.text[self.pos..];
            let (physical, next) = match rest.find('\n') {
                Some(i) => (&rest[..i], self.pos + i + 1),
                None => (rest, self.text.len()),
            };
            let content = physical.trim();
            if !content.is_empty() && !content.starts_with('#') {
                return true;
            }
            self.pos = next;
            self.line += 1;
        }
        false
    }

    fn record(&mut self) -> Result<Record, WorkloadError> {
        let bytes = self.text.as_bytes();
        let start_line = self.line;
        let mut fields = Vec::new();
        loop {
            // One field, starting at self.pos.
            let mut i = self.pos;
            while i < bytes.len() && matches!(bytes[i], b' ' | b'\t') {
                i += 1;
            }
            let field = if bytes.get(i) == Some(&b'"') {
                let quote_line = self.line;
                let mut value = String::new();
                let mut from = i + 1;
                let mut j = from;
                loop {
                    match bytes.get(j) {
                        None => {
                            return Err(WorkloadError::Row {
                                line: quote_line,
                                message: "a quoted field is never closed: a `\"` is \
                                          missing (a `\"` inside quotes is written `\"\"`)"
                                    .into(),
                            })
                        }
                        Some(b'"') if bytes.get(j + 1) == Some(&b'"') => {
                            value.push_str(&self.text[from..=j]);
                            j += 2;
                            from = j;
                        }
                        Some(b'"') => {
                            value.push_str(&self.text[from..j]);
                            j += 1;
                            break;
                        }
                        Some(b'\n') => {
                            self.line += 1;
                            j += 1;
                        }
                        Some(_) => j += 1,
                    }
                }
                while j < bytes.len() && matches!(bytes[j], b' ' | b'\t' | b'\r') {
                    j += 1;
                }
                if j < bytes.len() && !matches!(bytes[j], b',' | b'\n') {
                    return Err(WorkloadError::Row {
                        line: self.line,
                        message: format!(
                            "field {}: text after the closing `\"` of a quoted field; quote \
                             the whole field and write a `\"` inside it as `\"\"`",
                            fields.len() + 1
                        ),
                    });
                }
                self.pos = j;
                value
            } else {
                let mut j = i;
                while j < bytes.len() && !matches!(bytes[j], b',' | b'\n') {
                    if bytes[j] == b'"' {
                        return Err(WorkloadError::Row {
                            line: self.line,
                            message: format!(
                                "field {}: a `\"` inside a field that does not start with \
                                 one; quote the whole field and write the `\"` as `\"\"`",
                                fields.len() + 1
                            ),
                        });
                    }
                    j += 1;
                }
                self.pos = j;
                self.text[i..j].trim_end_matches('\r').to_string()
            };
            fields.push(field);
            match bytes.get(self.pos) {
                Some(b',') => self.pos += 1,
                Some(_) => {
                    // b'\n': the end of the record.
                    self.pos += 1;
                    self.line += 1;
                    break;
                }
                None => break,
            }
        }
        Ok(Record {
            line: start_line,
            fields,
        })
    }
}

impl Iterator for Records<'_> {
    type Item = Result<Record, WorkloadError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || !self.skip_to_record() {
            return None;
        }
        let record = self.record();
        self.failed = record.is_err();
        Some(record)
    }
}

struct Header {
    /// Column of each field, in file order.
    columns: Vec<Column>,
}

impl Header {
    fn parse(record: &[String]) -> Result<Header, WorkloadError> {
        let names: Vec<&str> = record.iter().map(|f| f.trim()).collect();
        let mut columns = Vec::with_capacity(names.len());
        let mut unknown = Vec::new();
        let mut seen: HashMap<Column, usize> = HashMap::new();
        for (i, name) in names.iter().enumerate() {
            match Column::from_name(name) {
                Some(c) => {
                    if seen.insert(c, i).is_some() {
                        return Err(WorkloadError::Header(format!(
                            "column `{name}` appears twice; each column may appear once"
                        )));
                    }
                    columns.push(c);
                }
                None => unknown.push(*name),
            }
        }
        if !unknown.is_empty() {
            let described: Vec<String> = unknown
                .iter()
                .map(|u| match closest_column(u) {
                    Some(c) => format!("`{u}` (did you mean `{c}`?)"),
                    None => format!("`{u}`"),
                })
                .collect();
            return Err(WorkloadError::Header(format!(
                "unknown column{} {}; the columns are {} (required) and {} (optional)",
                if unknown.len() == 1 { "" } else { "s" },
                described.join(", "),
                REQUIRED_COLUMNS.join(","),
                OPTIONAL_COLUMNS.join(","),
            )));
        }
        let missing: Vec<&str> = REQUIRED_COLUMNS
            .iter()
            .copied()
            .filter(|r| !names.contains(r))
            .collect();
        if !missing.is_empty() {
            return Err(WorkloadError::Header(format!(
                "missing required column{} {}; the header needs {}",
                if missing.len() == 1 { "" } else { "s" },
                missing
                    .iter()
                    .map(|m| format!("`{m}`"))
                    .collect::<Vec<_>>()
                    .join(", "),
                REQUIRED_COLUMNS.join(","),
            )));
        }
        Ok(Header { columns })
    }

    fn row(&self, record: &[String], line: usize) -> Result<WorkloadRow, WorkloadError> {
        let err = |message: String| WorkloadError::Row { line, message };
        if record.len() != self.columns.len() {
            return Err(err(format!(
                "has {} field{}, the header has {} columns (a field with a comma needs \
                 double quotes)",
                record.len(),
                if record.len() == 1 { "" } else { "s" },
                self.columns.len()
            )));
        }
        let mut row = WorkloadRow {
            line,
            arrival_s: 0,
            name: String::new(),
            cpu_m: 0,
            mem_mib: 0,
            duration_s: 0,
            kind: PodKind::default(),
            node_selector: BTreeMap::new(),
            gpu: 0,
            priority: 0,
        };
        for (column, raw) in self.columns.iter().zip(record.iter()) {
            let value = raw.trim();
            let bad = |expected: &str| {
                err(format!(
                    "column {}: expected {expected}, got `{}`",
                    column_name(*column),
                    shorten(value)
                ))
            };
            match column {
                Column::ArrivalS => {
                    row.arrival_s = bounded(value, MAX_SECONDS).ok_or_else(|| {
                        bad("whole seconds since the start of the replay, 0 to 315360000 (ten years)")
                    })?
                }
                Column::Name => {
                    if !is_dns_subdomain(value) {
                        return Err(bad(
                            "a pod name: lower-case letters, digits, `-` and `.`, starting and \
                             ending with a letter or digit, at most 253 characters",
                        ));
                    }
                    row.name = value.to_string();
                }
                Column::CpuM => {
                    row.cpu_m = bounded(value, MAX_CPU_M).ok_or_else(|| {
                        bad("whole millicores requested, e.g. 250 for a quarter core, at most 1000000000")
                    })?
                }
                Column::MemMib => {
                    row.mem_mib = bounded(value, MAX_MEM_MIB).ok_or_else(|| {
                        bad("whole MiB of memory requested, e.g. 512, at most 1073741824")
                    })?
                }
                Column::DurationS => {
                    row.duration_s = bounded(value, MAX_SECONDS)
                        .filter(|d| *d >= 1)
                        .ok_or_else(|| {
                            bad("how long the pod runs once started, in whole seconds, 1 to 315360000 (ten years)")
                        })?
                }
                Column::Kind => {
                    row.kind = match value.to_ascii_lowercase().as_str() {
                        "" | "deployment" => PodKind::Deployment,
                        "job" => PodKind::Job,
                        "pod" => PodKind::Pod,
                        _ => return Err(bad("`Deployment` (the default), `Job` or `Pod`")),
                    }
                }
                Column::NodeSelector => {
                    row.node_selector = parse_selector(value).map_err(|why| {
                        err(format!(
                            "column node_selector: {why}; expected `key=value` pairs separated \
                             by `;`, e.g. `pool=web;kubernetes.io/arch=amd64`, got `{}`",
                            shorten(value)
                        ))
                    })?
                }
                Column::Gpu => {
                    row.gpu = if value.is_empty() {
                        0
                    } else {
                        value
                            .parse::<u32>()
                            .ok()
                            .filter(|g| *g <= 1024)
                            .ok_or_else(|| bad("a whole number of GPUs (nvidia.com/gpu), 0 to 1024"))?
                    }
                }
                Column::Priority => {
                    row.priority = if value.is_empty() {
                        0
                    } else {
                        value.parse::<i32>().ok().ok_or_else(|| {
                            bad("a whole number, the pod's priority (higher goes first), e.g. 1000 or -10")
                        })?
                    }
                }
            }
        }
        Ok(row)
    }
}

fn column_name(c: Column) -> &'static str {
    match c {
        Column::ArrivalS => "arrival_s",
        Column::Name => "name",
        Column::CpuM => "cpu_m",
        Column::MemMib => "mem_mib",
        Column::DurationS => "duration_s",
        Column::Kind => "kind",
        Column::NodeSelector => "node_selector",
        Column::Gpu => "gpu",
        Column::Priority => "priority",
    }
}

/// A plain non-negative integer (digits only) no larger than `max`.
fn bounded(value: &str, max: u64) -> Option<u64> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    value.parse::<u64>().ok().filter(|v| *v <= max)
}

/// At most 60 characters of a bad value, so that an error stays one readable line.
fn shorten(value: &str) -> String {
    let mut chars = value.chars();
    let head: String = chars.by_ref().take(60).collect();
    if chars.next().is_some() {
        format!("{head}...")
    } else {
        head
    }
}

/// An RFC 1123 DNS subdomain, as Kubernetes requires of a pod name.
fn is_dns_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name.split('.').all(|label| {
            let b = label.as_bytes();
            !b.is_empty()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                && b.first().is_some_and(u8::is_ascii_alphanumeric)
                && b.last().is_some_and(u8::is_ascii_alphanumeric)
        })
}

/// `k=v;k2=v2` (an empty field: no selector; a trailing `;` is fine).
fn parse_selector(value: &str) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for pair in value.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((key, val)) = pair.split_once('=') else {
            return Err(format!("`{}` has no `=`", shorten(pair)));
        };
        let (key, val) = (key.trim(), val.trim());
        if !is_label_key(key) {
            return Err(format!(
                "`{}` is not a label key (an optional DNS prefix and `/`, then up to 63 \
                 letters, digits, `-`, `_` or `.`)",
                shorten(key)
            ));
        }
        if !is_label_value(val) {
            return Err(format!(
                "`{}` is not a label value (up to 63 letters, digits, `-`, `_` or `.`, \
                 starting and ending with a letter or digit)",
                shorten(val)
            ));
        }
        if out.insert(key.to_string(), val.to_string()).is_some() {
            return Err(format!("key `{key}` appears twice"));
        }
    }
    Ok(out)
}

fn is_label_key(key: &str) -> bool {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    prefix.is_none_or(is_dns_subdomain) && !name.is_empty() && is_label_value(name)
}

fn is_label_value(value: &str) -> bool {
    let b = value.as_bytes();
    b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && b.first().is_none_or(u8::is_ascii_alphanumeric)
        && b.last().is_none_or(u8::is_ascii_alphanumeric)
}

/// The known column closest to a misspelt one, if it is plausibly a typo.
fn closest_column(word: &str) -> Option<&'static str> {
    let word = word.to_lowercase();
    REQUIRED_COLUMNS
        .iter()
        .chain(OPTIONAL_COLUMNS.iter())
        .map(|c| (strsim::jaro_winkler(&word, c), *c))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

/// Writes rows back as a workload file that [`parse_workload`] reads to the same rows
/// (but for `line`): every column; no field of a valid row needs quotes.
pub fn to_csv(rows: &[WorkloadRow]) -> String {
    let mut out =
        String::from("arrival_s,name,cpu_m,mem_mib,duration_s,kind,node_selector,gpu,priority\n");
    for r in rows {
        let selector: Vec<String> = r
            .node_selector
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let kind = match r.kind {
            PodKind::Deployment => "Deployment",
            PodKind::Job => "Job",
            PodKind::Pod => "Pod",
        };
        out.push_str(&format!(
            "{},{},{},{},{},{},{},{},{}\n",
            r.arrival_s,
            r.name,
            r.cpu_m,
            r.mem_mib,
            r.duration_s,
            kind,
            selector.join(";"),
            r.gpu,
            r.priority
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "arrival_s,name,cpu_m,mem_mib,duration_s";

    fn header_err(text: &str) -> String {
        match parse_workload(text) {
            Err(WorkloadError::Header(m)) => m,
            other => panic!("expected a header error for {text:?}, got {other:?}"),
        }
    }

    fn row_err(text: &str) -> (usize, String) {
        match parse_workload(text) {
            Err(WorkloadError::Row { line, message }) => (line, message),
            other => panic!("expected a row error for {text:?}, got {other:?}"),
        }
    }

    #[test]
    fn minimal_file_with_defaults() {
        let rows = parse_workload(&format!("{HEADER}\n0,web-1,250,512,3600\n")).unwrap();
        assert_eq!(
            rows,
            vec![WorkloadRow {
                line: 2,
                arrival_s: 0,
                name: "web-1".into(),
                cpu_m: 250,
                mem_mib: 512,
                duration_s: 3600,
                kind: PodKind::Deployment,
                node_selector: BTreeMap::new(),
                gpu: 0,
                priority: 0,
            }]
        );
    }

    #[test]
    fn every_column_any_order_quotes_comments_blanks() {
        let text = "\u{feff}# a comment before the header\n\
                    \n\
                    priority, name ,kind,arrival_s,node_selector,gpu,cpu_m,mem_mib,duration_s\r\n\
                    # comment\r\n\
                    \x20 # indented comment, with, commas\n\
                    \x20 , , \n\
                    -5,train-1,job,120,\"pool=gpu;kubernetes.io/arch=amd64;\",2,4000,16384,7200\n\
                    \n\
                    \"100\",\"web-a\",Deployment,60,,,500,1024,86400\n\
                    0,solo,POD,60, , ,1,1,1\n";
        let rows = parse_workload(text).unwrap();
        let got: Vec<(&str, usize, u64)> = rows
            .iter()
            .map(|r| (r.name.as_str(), r.line, r.arrival_s))
            .collect();
        // Sorted by arrival, ties keep file order.
        assert_eq!(
            got,
            vec![("web-a", 9, 60), ("solo", 10, 60), ("train-1", 7, 120)]
        );
        let train = &rows[2];
        assert_eq!(train.kind, PodKind::Job);
        assert_eq!(train.gpu, 2);
        assert_eq!(train.priority, -5);
        assert_eq!(
            train.node_selector,
            BTreeMap::from([
                ("kubernetes.io/arch".to_string(), "amd64".to_string()),
                ("pool".to_string(), "gpu".to_string()),
            ])
        );
        assert_eq!(rows[0].priority, 100);
        assert_eq!(rows[1].kind, PodKind::Pod);
        assert!(rows[1].node_selector.is_empty());
    }

    #[test]
    fn header_only_is_an_empty_workload() {
        assert_eq!(parse_workload(&format!("{HEADER}\n")).unwrap(), vec![]);
    }

    #[test]
    fn header_errors() {
        // (file, fragments the message must contain)
        let cases: &[(&str, &[&str])] = &[
            ("", &["empty", "arrival_s,name,cpu_m,mem_mib,duration_s"]),
            ("# only a comment\n\n", &["empty"]),
            (
                "arrival_s,name,cpu_m,mem_mb,duration_s\n",
                &["unknown column `mem_mb`", "did you mean `mem_mib`?"],
            ),
            (
                "arrival,name,cpu_m,mem_mib,duration_s,nodeSelector,zone\n",
                &[
                    "unknown columns",
                    "`arrival` (did you mean `arrival_s`?)",
                    "`nodeSelector` (did you mean `node_selector`?)",
                    "`zone`",
                    "(optional)",
                ],
            ),
            (
                "name,cpu_m,duration_s\n",
                &["missing required columns `arrival_s`, `mem_mib`"],
            ),
            (
                "arrival_s,name,cpu_m,mem_mib\n",
                &["missing required column `duration_s`"],
            ),
            (
                "arrival_s,name,cpu_m,mem_mib,duration_s,name\n",
                &["column `name` appears twice"],
            ),
            (
                "Arrival_S,name,cpu_m,mem_mib,duration_s\n",
                &["did you mean `arrival_s`?"],
            ),
        ];
        for (text, fragments) in cases {
            let m = header_err(text);
            for f in *fragments {
                assert!(m.contains(f), "{text:?}: {m:?} lacks {f:?}");
            }
        }
        assert!(parse_workload("nope\n")
            .unwrap_err()
            .to_string()
            .starts_with("workload header: unknown column `nope`"));
    }

    #[test]
    fn row_errors() {
        let full = "arrival_s,name,cpu_m,mem_mib,duration_s,kind,node_selector,gpu,priority";
        // (row after the full header on line 2, fragments of the message)
        let cases: &[(&str, &[&str])] = &[
            (
                "x,a,1,1,1,,,,",
                &["column arrival_s", "whole seconds", "got `x`"],
            ),
            ("-1,a,1,1,1,,,,", &["column arrival_s", "got `-1`"]),
            ("1.5,a,1,1,1,,,,", &["column arrival_s", "got `1.5`"]),
            ("315360001,a,1,1,1,,,,", &["column arrival_s", "ten years"]),
            (",a,1,1,1,,,,", &["column arrival_s", "got ``"]),
            ("0,,1,1,1,,,,", &["column name", "a pod name"]),
            (
                "0,Web_1,1,1,1,,,,",
                &["column name", "lower-case", "got `Web_1`"],
            ),
            ("0,-a,1,1,1,,,,", &["column name"]),
            (
                "0,a,2 cores,1,1,,,,",
                &["column cpu_m", "millicores", "got `2 cores`"],
            ),
            ("0,a,1000000001,1,1,,,,", &["column cpu_m"]),
            ("0,a,1,1Gi,1,,,,", &["column mem_mib", "MiB", "got `1Gi`"]),
            ("0,a,1,1073741825,1,,,,", &["column mem_mib"]),
            ("0,a,1,1,0,,,,", &["column duration_s", "1 to"]),
            ("0,a,1,1,1h,,,,", &["column duration_s", "got `1h`"]),
            (
                "0,a,1,1,1,CronJob,,,",
                &["column kind", "`Job`", "got `CronJob`"],
            ),
            (
                "0,a,1,1,1,,pool,,",
                &["column node_selector", "`pool` has no `=`"],
            ),
            (
                "0,a,1,1,1,,=web,,",
                &["column node_selector", "not a label key"],
            ),
            (
                "0,a,1,1,1,,pool=we b,,",
                &["column node_selector", "not a label value"],
            ),
            (
                "0,a,1,1,1,,a=1;a=2,,",
                &["column node_selector", "key `a` appears twice"],
            ),
            ("0,a,1,1,1,,,one,", &["column gpu", "got `one`"]),
            ("0,a,1,1,1,,,-1,", &["column gpu"]),
            ("0,a,1,1,1,,,,high", &["column priority", "got `high`"]),
            ("0,a,1,1,1,,,,99999999999", &["column priority"]),
            ("0,a,1,1,1", &["has 5 fields, the header has 9 columns"]),
            ("0,a,1,1,1,,,,,", &["has 10 fields"]),
        ];
        for (row, fragments) in cases {
            let text = format!("{full}\n{row}\n");
            let (line, m) = row_err(&text);
            assert_eq!(line, 2, "{row:?}: {m}");
            for f in *fragments {
                assert!(m.contains(f), "{row:?}: {m:?} lacks {f:?}");
            }
        }
    }

    #[test]
    fn row_error_names_the_real_line() {
        let text = format!("# c\n{HEADER}\n\n# c\n0,a,1,1,1\n0,b,1,x,1\n");
        let err = parse_workload(&text).unwrap_err();
        assert_eq!(
            err.to_string(),
            "workload line 6: column mem_mib: expected whole MiB of memory requested, \
             e.g. 512, at most 1073741824, got `x`"
        );
        // A quoted field over two lines: the next record's line is still right.
        let text = format!("{HEADER}\n0,\"a\n\",1,1,1\n\n0,b,1,x,1\n");
        assert!(matches!(
            parse_workload(&text),
            Err(WorkloadError::Row { line: 5, .. })
        ));
        // A bad record is named by the line it starts on.
        let text = format!("{HEADER}\n0,a,1,1,1\n\n0,\"b\",1,\"x\ny\",1\n");
        assert!(matches!(
            parse_workload(&text),
            Err(WorkloadError::Row { line: 4, .. })
        ));
    }

    #[test]
    fn quoting_errors() {
        let cases: &[(&str, usize, &str)] = &[
            ("0,\"a,1,1,1\n\n", 2, "never closed"),
            ("0,a,1,1,1\n0,b,1,1,\"1\n", 3, "never closed"),
            ("0,\"a\"b,1,1,1\n", 2, "field 2: text after the closing"),
            ("0,a\"b,1,1,1\n", 2, "field 2: a `\"` inside a field"),
        ];
        for (rows, line, fragment) in cases {
            let text = format!("{HEADER}\n{rows}");
            let (got, m) = row_err(&text);
            assert_eq!(got, *line, "{rows:?}: {m}");
            assert!(m.contains(fragment), "{rows:?}: {m:?} lacks {fragment:?}");
        }
        // Quotes done right: doubled quotes inside, blanks around.
        let text =
            "name,arrival_s,cpu_m,mem_mib,duration_s,node_selector\n \"a\" ,0,1,1,1,\"k=v\"\r\n";
        let rows = parse_workload(text).unwrap();
        assert_eq!(rows[0].name, "a");
        let text = format!("{HEADER}\n0,\"a\"\"b\",1,1,1\n");
        let (_, m) = row_err(&text);
        assert!(m.contains("got `a\"b`"), "{m}");
    }

    #[test]
    fn duplicate_names() {
        let text = format!("{HEADER}\n0,a,1,1,1\n5,b,1,1,1\n9,a,1,1,1\n");
        let (line, m) = row_err(&text);
        assert_eq!(line, 4);
        assert!(
            m.contains("`a` is already the name of the pod on line 2"),
            "{m}"
        );
    }

    #[test]
    fn long_bad_values_are_shortened() {
        let long = "x".repeat(500);
        let (_, m) = row_err(&format!("{HEADER}\n{long},a,1,1,1\n"));
        assert!(m.len() < 200, "{m}");
        assert!(m.contains("..."), "{m}");
    }

    #[test]
    fn round_trip_of_a_good_file() {
        let rows = parse_workload(include_str!("../../../../examples/workload.csv")).unwrap();
        assert!(rows.len() > 50, "{}", rows.len());
        assert!(rows.iter().any(|r| r.kind == PodKind::Job));
        assert!(rows.iter().any(|r| !r.node_selector.is_empty()));
        assert!(rows.windows(2).all(|w| w[0].arrival_s <= w[1].arrival_s));
        let again = parse_workload(&to_csv(&rows)).unwrap();
        let strip = |rs: &[WorkloadRow]| -> Vec<WorkloadRow> {
            rs.iter()
                .map(|r| WorkloadRow {
                    line: 0,
                    ..r.clone()
                })
                .collect()
        };
        assert_eq!(strip(&again), strip(&rows));
    }

    /// A small xorshift generator: deterministic, no dependency.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    #[test]
    fn no_panic_on_random_input() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let good = format!("{HEADER},kind,node_selector,gpu,priority\n0,a,1,1,1,Job,k=v,1,2\n");
        let alphabet: &[u8] = b"0123456789,;=\"#\n\r -abkxJ\xc3\xa9";
        for i in 0..3000 {
            let len = (rng.next() % 120) as usize;
            let text: String = if i % 2 == 0 {
                // Random bytes from an alphabet that hits the parser's edges, read lossily.
                let bytes: Vec<u8> = (0..len)
                    .map(|_| alphabet[(rng.next() % alphabet.len() as u64) as usize])
                    .collect();
                String::from_utf8_lossy(&bytes).into_owned()
            } else {
                // A good file with random bytes changed.
                let mut bytes = good.clone().into_bytes();
                for _ in 0..1 + rng.next() % 4 {
                    let at = (rng.next() % bytes.len() as u64) as usize;
                    bytes[at] = (rng.next() % 256) as u8;
                }
                String::from_utf8_lossy(&bytes).into_owned()
            };
            let _ = parse_workload(&text);
        }
    }
}
