//! Checks requests against the official Proxmox VE API schema (`pve-api-schema.json`, the
//! data the API viewer is built from): path, method, and every parameter's presence, type,
//! format, pattern, range and enum.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use regex::Regex;
use serde_json::{Map, Value};

/// Where the schema is read from: `$PVE_API_SCHEMA`; else `shared/proxmox/pve-api-schema.json`
/// beside the project (`../shared/...` from the crate root, found from the run-time
/// `CARGO_MANIFEST_DIR`, the current directory and its ancestors, or the build-time crate root).
pub fn schema_path() -> PathBuf {
    if let Some(p) = std::env::var_os("PVE_API_SCHEMA") {
        return PathBuf::from(p);
    }
    let rel = Path::new("shared")
        .join("proxmox")
        .join("pve-api-schema.json");
    let mut roots: Vec<PathBuf> = Vec::new();
    if let Some(d) = std::env::var_os("CARGO_MANIFEST_DIR") {
        roots.push(PathBuf::from(d));
    }
    if let Ok(cwd) = std::env::current_dir() {
        roots.extend(cwd.ancestors().map(Path::to_path_buf));
    }
    roots.push(PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    let candidates: Vec<PathBuf> = roots
        .iter()
        .flat_map(|r| [r.join("..").join(&rel), r.join(&rel)])
        .collect();
    candidates
        .iter()
        .find(|c| c.is_file())
        .cloned()
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("..")
                .join(rel)
        })
}

#[derive(Debug, Clone)]
enum Seg {
    Lit(String),
    Var(String),
}

struct Endpoint {
    template: String,
    segs: Vec<Seg>,
    /// Method name → `info.<METHOD>`.
    methods: Map<String, Value>,
}

/// The loaded schema, or (without the file) the simulator's own routes.
pub struct Schema {
    endpoints: Vec<Endpoint>,
    regexes: Mutex<BTreeMap<String, Option<Arc<Regex>>>>,
    /// Whether parameters and answers are checked (false for [`Schema::routes_only`]).
    checked: bool,
}

/// The endpoints the simulator answers, by method and schema path. Without the schema file
/// these alone route requests (no parameter checks); a test keeps this list equal to the
/// dispatch in `http.rs` and checks every entry against the real schema.
pub const ROUTES: &[(&str, &str)] = &[
    ("POST", "/access/ticket"),
    ("GET", "/version"),
    ("GET", "/pools"),
    ("GET", "/cluster/resources"),
    ("GET", "/cluster/ha/status/current"),
    ("GET", "/cluster/status"),
    ("GET", "/cluster/nextid"),
    ("GET", "/nodes/{node}/storage"),
    ("GET", "/nodes/{node}/storage/{storage}/content"),
    ("DELETE", "/nodes/{node}/storage/{storage}/content/{volume}"),
    ("POST", "/nodes/{node}/storage/{storage}/upload"),
    ("GET", "/nodes/{node}/network"),
    ("GET", "/nodes/{node}/tasks"),
    ("GET", "/nodes/{node}/tasks/{upid}/status"),
    ("GET", "/nodes/{node}/tasks/{upid}/log"),
    ("DELETE", "/nodes/{node}/tasks/{upid}"),
    ("GET", "/nodes/{node}/qemu/{vmid}/config"),
    ("POST", "/nodes/{node}/qemu/{vmid}/clone"),
    ("POST", "/nodes/{node}/qemu/{vmid}/config"),
    ("PUT", "/nodes/{node}/qemu/{vmid}/config"),
    ("POST", "/nodes/{node}/qemu/{vmid}/status/start"),
    ("POST", "/nodes/{node}/qemu/{vmid}/status/shutdown"),
    ("POST", "/nodes/{node}/qemu/{vmid}/status/stop"),
    ("POST", "/nodes/{node}/qemu/{vmid}/status/reboot"),
    ("DELETE", "/nodes/{node}/qemu/{vmid}"),
    ("POST", "/nodes/{node}/qemu/{vmid}/agent/ping"),
    ("POST", "/nodes/{node}/qemu/{vmid}/agent/file-write"),
    ("POST", "/nodes/{node}/qemu/{vmid}/agent/exec"),
    ("GET", "/nodes/{node}/qemu/{vmid}/agent/exec-status"),
    ("GET", "/nodes"),
    ("GET", "/nodes/{node}/qemu"),
    ("GET", "/nodes/{node}/qemu/{vmid}"),
    ("GET", "/nodes/{node}/qemu/{vmid}/status/current"),
];

/// A request matched to its endpoint.
#[derive(Debug, Clone)]
pub struct Matched {
    /// The schema path, e.g. `/nodes/{node}/qemu/{vmid}/clone`.
    pub template: String,
    /// Values of the templated segments.
    pub vars: BTreeMap<String, String>,
}

static SCHEMA: OnceLock<Result<Arc<Schema>, String>> = OnceLock::new();

impl Schema {
    /// The schema of this process, loaded once.
    pub fn load() -> Result<Arc<Schema>, String> {
        SCHEMA
            .get_or_init(|| {
                let path = schema_path();
                let text = std::fs::read_to_string(&path).map_err(|e| {
                    format!(
                        "cannot read the Proxmox API schema {}: {e} (set PVE_API_SCHEMA to the \
                         path of pve-api-schema.json)",
                        path.display()
                    )
                })?;
                let v: Value = serde_json::from_str(&text).map_err(|e| {
                    format!(
                        "the Proxmox API schema {} is not JSON: {e} (PVE_API_SCHEMA sets \
                             the file)",
                        path.display()
                    )
                })?;
                Ok(Arc::new(Schema::from_value(&v)))
            })
            .clone()
    }

    /// The simulator's own [`ROUTES`], for running without the schema file: requests are
    /// routed to the same handlers, but neither parameters nor answers are checked.
    pub fn routes_only() -> Schema {
        let mut endpoints: Vec<Endpoint> = Vec::new();
        for (method, template) in ROUTES {
            let at = match endpoints.iter().position(|e| e.template == *template) {
                Some(i) => i,
                None => {
                    endpoints.push(Endpoint {
                        template: template.to_string(),
                        segs: segments(template),
                        methods: Map::new(),
                    });
                    endpoints.len() - 1
                }
            };
            endpoints[at]
                .methods
                .insert(method.to_string(), Value::Object(Map::new()));
        }
        Schema {
            endpoints,
            regexes: Mutex::new(BTreeMap::new()),
            checked: false,
        }
    }

    /// Whether requests and answers are checked against the official schema.
    pub fn is_checked(&self) -> bool {
        self.checked
    }

    pub fn from_value(v: &Value) -> Schema {
        let mut endpoints = Vec::new();
        fn walk(n: &Value, out: &mut Vec<Endpoint>) {
            if let Some(path) = n.get("path").and_then(Value::as_str) {
                out.push(Endpoint {
                    template: path.to_string(),
                    segs: segments(path),
                    methods: n
                        .get("info")
                        .and_then(Value::as_object)
                        .cloned()
                        .unwrap_or_default(),
                });
            }
            if let Some(children) = n.get("children").and_then(Value::as_array) {
                for c in children {
                    walk(c, out);
                }
            }
        }
        if let Some(list) = v.as_array() {
            for n in list {
                walk(n, &mut endpoints);
            }
        }
        Schema {
            endpoints,
            regexes: Mutex::new(BTreeMap::new()),
            checked: true,
        }
    }

    /// Matches a path (without `/api2/json`), literals preferred over variables.
    pub fn match_path(&self, path: &str) -> Option<Matched> {
        let parts: Vec<String> = path
            .split('/')
            .filter(|s| !s.is_empty())
            .map(percent_decode)
            .collect();
        let mut best: Option<(usize, Matched)> = None;
        for ep in &self.endpoints {
            if ep.segs.len() != parts.len() {
                continue;
            }
            let mut vars = BTreeMap::new();
            let mut literals = 0;
            let ok = ep.segs.iter().zip(&parts).all(|(s, p)| match s {
                Seg::Lit(l) => {
                    literals += 1;
                    l == p
                }
                Seg::Var(v) => {
                    vars.insert(v.clone(), p.clone());
                    true
                }
            });
            if ok && best.as_ref().is_none_or(|(n, _)| literals > *n) {
                best = Some((
                    literals,
                    Matched {
                        template: ep.template.clone(),
                        vars,
                    },
                ));
            }
        }
        best.map(|(_, m)| m)
    }

    /// The `returns` schema of `method` on endpoint `template`, if the schema gives one
    /// (never for [`Schema::routes_only`]).
    pub fn returns(&self, template: &str, method: &str) -> Option<&Value> {
        self.endpoints
            .iter()
            .find(|e| e.template == template)?
            .methods
            .get(method)?
            .get("returns")
    }

    /// Validates one request; returns the matched endpoint and every violation found.
    pub fn validate(
        &self,
        method: &str,
        path: &str,
        params: &[(String, String)],
    ) -> (Option<Matched>, Vec<String>) {
        let Some(m) = self.match_path(path) else {
            return (None, vec![format!("unknown path {path}")]);
        };
        let Some(ep) = self.endpoints.iter().find(|e| e.template == m.template) else {
            return (None, vec![format!("unknown path {path}")]);
        };
        let Some(info) = ep.methods.get(method) else {
            return (
                Some(m.clone()),
                vec![format!("{method} is not a method of {}", m.template)],
            );
        };
        if !self.checked {
            return (Some(m), Vec::new());
        }
        let props = info
            .pointer("/parameters/properties")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let mut errors = Vec::new();
        // Path variables are parameters too.
        let mut given: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (k, v) in &m.vars {
            given.entry(k.clone()).or_default().push(v.clone());
        }
        for (k, v) in params {
            if m.vars.contains_key(k) {
                errors.push(format!(
                    "parameter '{k}' given both in the path and the body"
                ));
            }
            given.entry(k.clone()).or_default().push(v.clone());
        }
        for (name, values) in &given {
            let Some(schema) = lookup_prop(&props, name) else {
                errors.push(format!("unknown parameter '{name}'"));
                continue;
            };
            let is_array = schema.get("type").and_then(Value::as_str) == Some("array");
            if values.len() > 1 && !is_array {
                errors.push(format!("parameter '{name}' given {} times", values.len()));
            }
            if is_array {
                let item = schema.get("items").cloned().unwrap_or(Value::Null);
                for v in values {
                    if let Err(e) = self.check_value(&item, v) {
                        errors.push(format!("parameter '{name}': {e}"));
                    }
                }
            } else if let Some(v) = values.first() {
                if let Err(e) = self.check_value(schema, v) {
                    errors.push(format!("parameter '{name}': {e}"));
                }
            }
        }
        for (name, schema) in &props {
            if name.ends_with("[n]") || is_optional(schema) {
                continue;
            }
            if !given.contains_key(name) {
                errors.push(format!("missing required parameter '{name}'"));
            }
        }
        if let Some(req) = props.iter().find_map(|(n, s)| {
            let r = s.get("requires")?.as_str()?;
            (given.contains_key(n) && !given.contains_key(r)).then(|| (n.clone(), r.to_string()))
        }) {
            errors.push(format!("parameter '{}' requires '{}'", req.0, req.1));
        }
        (Some(m), errors)
    }

    fn regex(&self, pattern: &str) -> Option<Arc<Regex>> {
        let mut cache = self.regexes.lock().unwrap_or_else(|e| e.into_inner());
        cache
            .entry(pattern.to_string())
            .or_insert_with(|| {
                // Perl's `(?^i:...)` / `(?^:...)` are `(?i:...)` / `(?:...)` here.
                let p = pattern.replace("(?^i:", "(?i:").replace("(?^:", "(?:");
                Regex::new(&format!("^(?:{p})$")).ok().map(Arc::new)
            })
            .clone()
    }

    /// Checks one (string-encoded) value against a property schema.
    pub fn check_value(&self, schema: &Value, v: &str) -> Result<(), String> {
        let ty = schema
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("string");
        match ty {
            "integer" => {
                let n: i64 = v.parse().map_err(|_| format!("'{v}' is not an integer"))?;
                check_range(schema, n as f64, v)?;
            }
            "number" => {
                let n: f64 = v.parse().map_err(|_| format!("'{v}' is not a number"))?;
                check_range(schema, n, v)?;
            }
            "boolean" => {
                if !matches!(
                    v.to_ascii_lowercase().as_str(),
                    "0" | "1" | "true" | "false" | "yes" | "no" | "on" | "off"
                ) {
                    return Err(format!("'{v}' is not a boolean"));
                }
            }
            "string" | "array" | "object" => {}
            other => return Err(format!("type '{other}' cannot be checked")),
        }
        if let Some(allowed) = schema.get("enum").and_then(Value::as_array) {
            if !allowed.iter().any(|a| a.as_str() == Some(v)) {
                return Err(format!("'{v}' is not one of {allowed:?}"));
            }
        }
        let len = v.chars().count() as u64;
        if let Some(max) = num(schema.get("maxLength")) {
            if len as f64 > max {
                return Err(format!("longer than {max} characters"));
            }
        }
        if let Some(min) = num(schema.get("minLength")) {
            if (len as f64) < min {
                return Err(format!("shorter than {min} characters"));
            }
        }
        if let Some(p) = schema.get("pattern").and_then(Value::as_str) {
            match self.regex(p) {
                Some(re) if re.is_match(v) => {}
                Some(_) => return Err(format!("'{v}' does not match pattern {p}")),
                None => return Err(format!("pattern {p} cannot be compiled")),
            }
        }
        match schema.get("format") {
            Some(Value::String(f)) => {
                check_format(self, f, v).map_err(|e| format!("'{v}' is not a valid {f}: {e}"))?
            }
            Some(Value::Object(fields)) => self.check_property_string(fields, v)?,
            _ => {}
        }
        Ok(())
    }

    /// `[key=]value[,key=value...]` against an object format.
    fn check_property_string(&self, fields: &Map<String, Value>, v: &str) -> Result<(), String> {
        let default_key = fields
            .iter()
            .find(|(_, s)| s.get("default_key").is_some())
            .map(|(k, _)| k.clone());
        let mut seen: BTreeMap<String, String> = BTreeMap::new();
        for part in v.split(',').filter(|p| !p.is_empty()) {
            let (key, value) = match part.split_once('=') {
                Some((k, val)) => (k.to_string(), val.to_string()),
                None => match &default_key {
                    Some(d) => (d.clone(), part.to_string()),
                    None => return Err(format!("'{part}' has no key")),
                },
            };
            let Some(spec) = fields.get(&key) else {
                return Err(format!("unknown key '{key}' in '{v}'"));
            };
            let (key, spec) = if let Some(target) = spec.get("keyAlias").and_then(Value::as_str) {
                // `virtio=MAC`: model=virtio, macaddr=MAC.
                let alias = spec.get("alias").and_then(Value::as_str).unwrap_or("");
                seen.insert(target.to_string(), key.clone());
                match fields.get(alias) {
                    Some(s) => (alias.to_string(), s),
                    None => return Err(format!("broken alias for '{key}'")),
                }
            } else if let Some(alias) = spec.get("alias").and_then(Value::as_str) {
                match fields.get(alias) {
                    Some(s) => (alias.to_string(), s),
                    None => return Err(format!("broken alias for '{key}'")),
                }
            } else {
                (key, spec)
            };
            if seen.insert(key.clone(), value.clone()).is_some() {
                return Err(format!("key '{key}' given twice in '{v}'"));
            }
            self.check_value(spec, &value)
                .map_err(|e| format!("key '{key}': {e}"))?;
        }
        for (k, s) in fields {
            if s.get("alias").is_none()
                && !is_optional(s)
                && s.get("default").is_none()
                && !seen.contains_key(k)
            {
                return Err(format!("missing key '{k}' in '{v}'"));
            }
        }
        Ok(())
    }
}

/// `/nodes/{node}/qemu` → literal and variable segments.
fn segments(path: &str) -> Vec<Seg> {
    path.split('/')
        .filter(|s| !s.is_empty())
        .map(
            |s| match s.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                Some(v) => Seg::Var(v.to_string()),
                None => Seg::Lit(s.to_string()),
            },
        )
        .collect()
}

fn is_optional(s: &Value) -> bool {
    matches!(s.get("optional"), Some(Value::Number(n)) if n.as_i64() == Some(1))
        || s.get("optional") == Some(&Value::Bool(true))
}

fn num(v: Option<&Value>) -> Option<f64> {
    match v? {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

fn check_range(schema: &Value, n: f64, v: &str) -> Result<(), String> {
    if let Some(min) = num(schema.get("minimum")) {
        if n < min {
            return Err(format!("{v} is below the minimum {min}"));
        }
    }
    if let Some(max) = num(schema.get("maximum")) {
        if n > max {
            return Err(format!("{v} is above the maximum {max}"));
        }
    }
    Ok(())
}

/// `ipconfig0` → `ipconfig[n]`.
fn lookup_prop<'a>(props: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    if let Some(s) = props.get(name) {
        return Some(s);
    }
    let base = name.trim_end_matches(|c: char| c.is_ascii_digit());
    if base.len() < name.len() {
        return props.get(&format!("{base}[n]"));
    }
    None
}

pub fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            if let Some(b) = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn re(p: &str) -> Option<Regex> {
    Regex::new(p).ok()
}

fn matches(p: &str, v: &str) -> Result<(), String> {
    match re(p) {
        Some(r) if r.is_match(v) => Ok(()),
        Some(_) => Err(format!("does not match {p}")),
        None => Err("internal pattern error".into()),
    }
}

const DNS_LABEL: &str = "[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?";
const TAG: &str = "(?i:[a-z0-9_][a-z0-9_+.-]*)";

fn is_ip(v: &str) -> bool {
    v.parse::<IpAddr>().is_ok()
}

fn is_cidr(v: &str, v4_only: bool) -> bool {
    let Some((a, len)) = v.split_once('/') else {
        return false;
    };
    match a.parse::<IpAddr>() {
        Ok(IpAddr::V4(_)) => len.parse::<u8>().is_ok_and(|l| l <= 32),
        Ok(IpAddr::V6(_)) if !v4_only => len.parse::<u8>().is_ok_and(|l| l <= 128),
        _ => false,
    }
}

/// The named formats this client may send, implemented after their Proxmox definitions.
/// An unknown format is a violation, so nothing goes unchecked silently.
fn check_format(schema: &Schema, f: &str, v: &str) -> Result<(), String> {
    let list = |v: &str| -> Vec<String> {
        v.split([',', ';', ' ', '\0'])
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect()
    };
    match f {
        "pve-node" => matches(&format!("^{DNS_LABEL}$"), v),
        "pve-vmid" => v
            .parse::<u32>()
            .ok()
            .filter(|n| (100..=999_999_999).contains(n))
            .map(|_| ())
            .ok_or_else(|| "not a VM id (100..999999999)".into()),
        "pve-tag-list" => {
            let tags = list(v);
            if tags.is_empty() {
                return Err("empty tag list".into());
            }
            for t in tags {
                matches(&format!("^{TAG}$"), &t).map_err(|_| format!("tag '{t}' is invalid"))?;
            }
            Ok(())
        }
        "dns-name" => matches(&format!("^({DNS_LABEL}\\.)*{DNS_LABEL}$"), v),
        "urlencoded" => matches(r"^[-%a-zA-Z0-9_.!~*'()]*$", v).and_then(|_| {
            // Every % must start a valid escape.
            let b = v.as_bytes();
            for (i, c) in b.iter().enumerate() {
                if *c == b'%'
                    && !(b.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                        && b.get(i + 2).is_some_and(u8::is_ascii_hexdigit))
                {
                    return Err("invalid % escape".into());
                }
            }
            Ok(())
        }),
        "pve-qm-ipconfig" => {
            let mut seen = BTreeMap::new();
            for part in v.split(',').filter(|p| !p.is_empty()) {
                let (k, val) = part
                    .split_once('=')
                    .ok_or_else(|| format!("'{part}' has no key"))?;
                if seen.insert(k.to_string(), val.to_string()).is_some() {
                    return Err(format!("key '{k}' twice"));
                }
                let ok = match k {
                    "ip" => val == "dhcp" || is_cidr(val, true),
                    "gw" => val.parse::<Ipv4Addr>().is_ok(),
                    "ip6" => {
                        val == "dhcp" || val == "auto" || (is_cidr(val, false) && val.contains(':'))
                    }
                    "gw6" => val.parse::<std::net::Ipv6Addr>().is_ok(),
                    _ => return Err(format!("unknown key '{k}'")),
                };
                if !ok {
                    return Err(format!("invalid {k} '{val}'"));
                }
            }
            if seen.contains_key("gw") && seen.get("ip").is_none_or(|ip| ip == "dhcp") {
                return Err("gw needs a static ip".into());
            }
            Ok(())
        }
        "address-list" | "ip-list" => {
            for a in list(v) {
                if !is_ip(&a) {
                    return Err(format!("'{a}' is not an IP address"));
                }
            }
            Ok(())
        }
        "ip" | "address" => is_ip(v)
            .then_some(())
            .ok_or_else(|| "not an IP address".into()),
        "ipv4" => v
            .parse::<Ipv4Addr>()
            .map(|_| ())
            .map_err(|_| "not an IPv4 address".into()),
        "CIDR" => is_cidr(v, false)
            .then_some(())
            .ok_or_else(|| "not a CIDR".into()),
        "CIDRv4" => is_cidr(v, true)
            .then_some(())
            .ok_or_else(|| "not an IPv4 CIDR".into()),
        // `user=local:snippets/u.yaml,vendor=...`: each of meta, network, user, vendor once,
        // naming a volume.
        "pve-qm-cicustom" => {
            let mut seen = Vec::new();
            for part in v.split(',') {
                let (k, vol) = part
                    .split_once('=')
                    .ok_or_else(|| format!("'{part}' is not key=volume"))?;
                if !matches!(k, "meta" | "network" | "user" | "vendor") || seen.contains(&k) {
                    return Err(format!("unknown or repeated key '{k}'"));
                }
                seen.push(k);
                matches(r"^(?i:[a-z][a-z0-9\-_.]*[a-z0-9]):.+$", vol)?;
            }
            Ok(())
        }
        // A volume (`local:iso/x.iso`), a path, or the CD-ROM specials `none` and `cdrom`.
        "pve-volume-id-or-qm-path" if matches!(v, "none" | "cdrom") || v.starts_with('/') => Ok(()),
        "pve-volume-id-or-qm-path" => matches(r"^(?i:[a-z][a-z0-9\-_.]*[a-z0-9]):.+$", v),
        "pve-storage-id" => matches(r"^(?i:[a-z][a-z0-9\-_.]*[a-z0-9])$", v),
        "pve-bridge-id" => matches(r"^[-_.\w\d]+$", v),
        "pve-poolid" => matches(r"^[A-Za-z0-9_\-]+$", v),
        "pve-configid" => matches(r"^(?i:[a-z][a-z0-9_]+)$", v),
        "pve-configid-list" => {
            for id in list(v) {
                matches(r"^(?i:[a-z][a-z0-9_]+)$", &id)?;
            }
            Ok(())
        }
        "pve-realm" => matches(r"^[A-Za-z][A-Za-z0-9\.\-_]+$", v),
        "pve-priv-list" => {
            for p in list(v) {
                matches(r"^[A-Za-z][A-Za-z0-9\.]+$", &p)?;
            }
            Ok(())
        }
        "mac-addr" => matches(r"^(?i:[a-f0-9][02468ace](?::[a-f0-9]{2}){5})$", v),
        "pve-storage-content" | "pve-storage-content-list" => {
            let items = list(v);
            if f == "pve-storage-content" && items.len() != 1 {
                return Err(format!("'{v}' is not one content type"));
            }
            for c in items {
                if !matches!(
                    c.as_str(),
                    "images"
                        | "rootdir"
                        | "vztmpl"
                        | "iso"
                        | "backup"
                        | "snippets"
                        | "import"
                        | "none"
                ) {
                    return Err(format!("unknown content type '{c}'"));
                }
            }
            Ok(())
        }
        // `[cputype=]<model>[,flags=+a;-b][,hidden=0|1][,hv-vendor-id=..][,phys-bits=..]
        // [,guest-phys-bits=..][,reported-model=..]`.
        "pve-vm-cpu-conf" => {
            let mut seen = Vec::new();
            for (i, part) in v.split(',').enumerate() {
                let (k, val) = match part.split_once('=') {
                    Some(kv) => kv,
                    None if i == 0 => ("cputype", part),
                    None => return Err(format!("'{part}' has no key")),
                };
                if seen.contains(&k) {
                    return Err(format!("key '{k}' given twice"));
                }
                seen.push(k);
                let ok = match k {
                    "cputype" | "reported-model" => {
                        matches(r"^(?:custom-)?[A-Za-z0-9][A-Za-z0-9_.+-]*$", val).is_ok()
                    }
                    "flags" => val.split(';').filter(|f| !f.is_empty()).all(|f| {
                        matches(
                            r"^[+-](?:pcid|spec-ctrl|ibpb|ssbd|virt-ssbd|amd-ssbd|amd-no-ssb|pdpe1gb|md-clear|hv-tlbflush|hv-evmcs|aes)$",
                            f,
                        )
                        .is_ok()
                    }),
                    "hidden" => matches!(val, "0" | "1"),
                    "hv-vendor-id" => matches(r"^[a-zA-Z0-9]{1,12}$", val).is_ok(),
                    "phys-bits" => {
                        val == "host" || val.parse::<u8>().is_ok_and(|n| (8..=64).contains(&n))
                    }
                    "guest-phys-bits" => val.parse::<u8>().is_ok_and(|n| (32..=64).contains(&n)),
                    _ => return Err(format!("unknown key '{k}'")),
                };
                if !ok {
                    return Err(format!("invalid {k} '{val}'"));
                }
            }
            Ok(())
        }
        // `order=scsi0;net0` (or the deprecated `[legacy=]cdn`).
        "pve-qm-boot" => {
            for (i, part) in v.split(',').enumerate() {
                let (k, val) = match part.split_once('=') {
                    Some(kv) => kv,
                    None if i == 0 => ("legacy", part),
                    None => return Err(format!("'{part}' has no key")),
                };
                match k {
                    "legacy" => matches(r"^[acdn]{1,4}$", val)?,
                    "order" => {
                        for d in val.split(';').filter(|d| !d.is_empty()) {
                            matches(
                                r"^(?:ide|sata|scsi|virtio|efidisk|tpmstate|net|hostpci|usb)\d+$",
                                d,
                            )
                            .map_err(|_| format!("invalid boot device '{d}'"))?;
                        }
                    }
                    _ => return Err(format!("unknown key '{k}'")),
                }
            }
            Ok(())
        }
        other => {
            let _ = schema;
            Err(format!(
                "format '{other}' is not implemented by the simulator's validator"
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates_against_the_real_schema() {
        let s = Schema::load().expect(
            "the Proxmox API schema (../shared/proxmox/pve-api-schema.json or PVE_API_SCHEMA)",
        );
        let p = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect()
        };
        let (_, e) = s.validate(
            "POST",
            "/nodes/pve1/qemu/9000/clone",
            &p(&[("newid", "105"), ("name", "a-b"), ("full", "1")]),
        );
        assert!(e.is_empty(), "{e:?}");
        let (_, e) = s.validate(
            "POST",
            "/nodes/pve1/qemu/9000/clone",
            &p(&[("newid", "5"), ("name", "a_b")]),
        );
        assert_eq!(e.len(), 2, "{e:?}");
        let (_, e) = s.validate(
            "POST",
            "/nodes/pve1/qemu/105/config",
            &p(&[
                ("tags", "nw-c-x;nw-g-y"),
                ("memory", "4096"),
                ("ipconfig0", "ip=10.0.0.5/24,gw=10.0.0.1"),
                ("net0", "virtio=BC:24:11:00:00:01,bridge=vmbr0"),
                ("agent", "1"),
                ("sshkeys", "ssh-ed25519%20AAAA"),
            ]),
        );
        assert!(e.is_empty(), "{e:?}");
        let (_, e) = s.validate(
            "POST",
            "/nodes/pve1/qemu/105/config",
            &p(&[
                ("tags", "nodewright-cluster=x"),
                ("sshkeys", "ssh-ed25519 AAAA"),
                ("bogus", "1"),
            ]),
        );
        assert_eq!(e.len(), 3, "{e:?}");
        let (_, e) = s.validate("GET", "/nodes/pve1/qemu/105/nope", &[]);
        assert_eq!(e.len(), 1);
        let (_, e) = s.validate(
            "POST",
            "/nodes/pve1/qemu/105/agent/exec",
            &p(&[("command", "/bin/sh"), ("command", "/x")]),
        );
        assert!(e.is_empty(), "{e:?}");
    }

    /// The routes used without the schema file are exactly the ones `http.rs` answers, and
    /// each is a method of that path in the real schema.
    #[test]
    fn routes_without_the_schema_are_the_dispatched_endpoints_of_the_real_schema() {
        let source = include_str!("http.rs");
        let arm = Regex::new(r#"\("(GET|POST|PUT|DELETE)",\s*"(/[^"]*)"\)"#).expect("regex");
        let mut dispatched: Vec<(String, String)> = arm
            .captures_iter(source)
            .map(|c| (c[1].to_string(), c[2].to_string()))
            .collect();
        dispatched.push(("POST".into(), "/access/ticket".into()));
        dispatched.sort();
        dispatched.dedup();
        let mut routes: Vec<(String, String)> = ROUTES
            .iter()
            .map(|(m, t)| (m.to_string(), t.to_string()))
            .collect();
        routes.sort();
        assert_eq!(
            routes, dispatched,
            "schema::ROUTES must list what http.rs answers"
        );

        let s = Schema::load().expect(
            "the Proxmox API schema (../shared/proxmox/pve-api-schema.json or PVE_API_SCHEMA)",
        );
        for (method, template) in ROUTES {
            let m = s.match_path(template).map(|m| m.template);
            assert_eq!(m.as_deref(), Some(*template), "{template}");
            let (_, e) = s.validate(method, template, &[]);
            assert!(
                !e.iter().any(|e| e.contains("is not a method")),
                "{method} {template}: {e:?}"
            );
        }

        let r = Schema::routes_only();
        assert!(!r.is_checked());
        let (m, e) = r.validate(
            "POST",
            "/nodes/pve1/qemu/9000/clone",
            &[("x".into(), "y".into())],
        );
        assert_eq!(
            m.map(|m| m.template).as_deref(),
            Some("/nodes/{node}/qemu/{vmid}/clone")
        );
        assert!(e.is_empty(), "{e:?}");
        let (_, e) = r.validate("GET", "/nodes/pve1/qemu/9000/clone", &[]);
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(r.returns("/cluster/resources", "GET").is_none());
    }
}
