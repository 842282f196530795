//! The workload file: CSV with a header. Required columns, exactly these names:
//! `arrival_s,name,cpu_m,mem_mib,duration_s`; optional: `kind` (`Deployment` default,
//! `Job`, `Pod`), `node_selector` (`k=v;k2=v2`), `gpu`, `priority`, `image`,
//! `local_volume` (`true`: its data is on a `local-path` volume on the node it first runs
//! on). Unknown columns are
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
    /// When the pod is created, in milliseconds from the start of the replay (the file
    /// gives seconds, fractions to the millisecond allowed: `12.5`).
    pub arrival_ms: u64,
    pub name: String,
    pub cpu_m: u64,
    pub mem_mib: u64,
    pub duration_s: u64,
    pub kind: PodKind,
    pub node_selector: BTreeMap<String, String>,
    pub gpu: u32,
    pub priority: i32,
    /// The container image the pod runs, if the file says: images are what the image
    /// cache warming pulls onto new nodes.
    pub image: Option<String>,
    /// Its data is on a node-local volume (k3s `local-path`): made on the node it first
    /// runs on, and only that node can run it afterwards.
    pub local_volume: bool,
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
pub const OPTIONAL_COLUMNS: [&str; 6] = [
    "kind",
    "node_selector",
    "gpu",
    "priority",
    "image",
    "local_volume",
];

/// Ten years: no arrival or duration may be longer, so sums of them never overflow.
pub const MAX_SECONDS: u64 = 10 * 365 * 24 * 3600;
/// A million cores.
pub const MAX_CPU_M: u64 = 1_000_000_000;
/// A pebibyte, in MiB (so bytes still fit in a `u64` many times over).
pub const MAX_MEM_MIB: u64 = 1 << 30;
/// Longest pod name Kubernetes accepts (a DNS subdomain).
const MAX_NAME_LEN: usize = 253;
/// Longer image references are surely a mistake in the file.
const MAX_IMAGE_LEN: usize = 1024;

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
    Image,
    LocalVolume,
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
            "image" => Column::Image,
            "local_volume" => Column::LocalVolume,
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
    rows.sort_by_key(|r| r.arrival_ms);
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
            arrival_ms: 0,
            name: String::new(),
            cpu_m: 0,
            mem_mib: 0,
            duration_s: 0,
            kind: PodKind::default(),
            node_selector: BTreeMap::new(),
            gpu: 0,
            priority: 0,
            image: None,
            local_volume: false,
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
                    row.arrival_ms = seconds_to_ms(value, MAX_SECONDS).ok_or_else(|| {
                        bad("seconds since the start, to the millisecond (`12.5`), 0 to 315360000 (ten years)")
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
                Column::LocalVolume => {
                    row.local_volume = match value {
                        "" | "false" | "no" => false,
                        "true" | "yes" => true,
                        _ => {
                            return Err(bad(
                                "`true` (its data is on a local-path volume of the node it first runs on) or `false`",
                            ))
                        }
                    }
                }
                Column::Image => {
                    row.image = if value.is_empty() {
                        None
                    } else if value.len() <= MAX_IMAGE_LEN
                        && value
                            .bytes()
                            .all(|b| b.is_ascii_graphic() && !matches!(b, b'"' | b','))
                    {
                        Some(value.to_string())
                    } else {
                        return Err(bad(
                            "a container image reference with no spaces, e.g. `nginx:1.25` or                              `registry.example.com/team/app:v2`",
                        ));
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
        Column::Image => "image",
        Column::LocalVolume => "local_volume",
    }
}

/// A plain non-negative integer (digits only) no larger than `max`.
/// Seconds, whole (`12`) or with up to three decimals (`12.5`, `0.125`), as
/// milliseconds; at most `max_s` seconds.
fn seconds_to_ms(value: &str, max_s: u64) -> Option<u64> {
    let (whole, fraction) = value.split_once('.').unwrap_or((value, ""));
    if value.contains('.') && (fraction.is_empty() || fraction.len() > 3) {
        return None;
    }
    if !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let s = bounded(whole, max_s)?;
    let ms: u64 = format!("{fraction:0<3}").parse().ok()?;
    let total = s.checked_mul(1000)?.checked_add(ms)?;
    (total <= max_s.saturating_mul(1000)).then_some(total)
}

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
    let mut out = String::from(
        "arrival_s,name,cpu_m,mem_mib,duration_s,kind,node_selector,gpu,priority,image,local_volume\n",
    );
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
        let arrival = match r.arrival_ms % 1000 {
            0 => format!("{}", r.arrival_ms / 1000),
            ms => format!("{}.{ms:03}", r.arrival_ms / 1000),
        };
        out.push_str(&format!(
            "{},{},{},{},{},{},{},{},{},{},{}\n",
            arrival,
            r.name,
            r.cpu_m,
            r.mem_mib,
            r.duration_s,
            kind,
            selector.join(";"),
            r.gpu,
            r.priority,
            r.image.as_deref().unwrap_or_default(),
            r.local_volume
        ));
    }
    out
}

#[cfg(test)]
mod tests;
