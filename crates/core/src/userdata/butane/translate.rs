//! Butane to Ignition, section by section, with each field checked against the declared
//! Butane version.

use std::collections::BTreeSet;

use super::ignition::*;
use super::input::*;
use super::{data_url, ButaneError, IGNITION_VERSION, SUPPORTED_VERSIONS};

pub(super) struct Translator {
    /// Minor version of the declared Butane fcos spec (1.<minor>.0).
    pub(super) minor: usize,
    pub(super) declared: String,
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> ButaneError {
    ButaneError::Invalid {
        field: field.into(),
        message: message.into(),
    }
}

fn unsupported(field: impl Into<String>, hint: &'static str) -> ButaneError {
    ButaneError::Unsupported {
        field: field.into(),
        hint,
    }
}

const LOCAL_HINT: &str = "it reads files next to the Butane config, which nodewright does \
     not have; put the content inline (a minijinja `{% include %}` works)";
const STORAGE_HINT: &str = "nodewright only writes files, directories and links; \
     partition and format disks in the image instead";

const UNIT_SUFFIXES: &[&str] = &[
    ".service",
    ".socket",
    ".device",
    ".mount",
    ".automount",
    ".swap",
    ".target",
    ".path",
    ".timer",
    ".slice",
    ".scope",
];

impl Translator {
    fn require(&self, field: &str, min_minor: usize) -> Result<(), ButaneError> {
        if self.minor < min_minor {
            return Err(ButaneError::NeedsNewerVersion {
                field: field.to_string(),
                min: SUPPORTED_VERSIONS
                    .get(min_minor)
                    .copied()
                    .unwrap_or("a newer version"),
                declared: self.declared.clone(),
            });
        }
        Ok(())
    }

    pub(super) fn config(&self, b: Butane) -> Result<IgnitionConfig, ButaneError> {
        if b.boot_device.is_some() {
            return Err(unsupported("boot_device", STORAGE_HINT));
        }
        let kernel_arguments = match b.kernel_arguments {
            Some(k) => {
                self.require("kernel_arguments", 4)?;
                for (i, arg) in k.should_exist.iter().enumerate() {
                    if k.should_not_exist.contains(arg) {
                        return Err(invalid(
                            format!("kernel_arguments.should_exist[{i}]"),
                            format!("{arg:?} is also listed in should_not_exist"),
                        ));
                    }
                }
                (!k.should_exist.is_empty() || !k.should_not_exist.is_empty()).then_some(
                    KernelArguments {
                        should_exist: k.should_exist,
                        should_not_exist: k.should_not_exist,
                    },
                )
            }
            None => None,
        };
        Ok(IgnitionConfig {
            ignition: self.meta(b.ignition.unwrap_or_default())?,
            kernel_arguments,
            passwd: self.passwd(b.passwd.unwrap_or_default())?,
            storage: self.storage(b.storage.unwrap_or_default())?,
            systemd: self.systemd(b.systemd.unwrap_or_default())?,
        })
    }

    fn meta(&self, b: BIgnition) -> Result<IgnitionMeta, ButaneError> {
        let config = match b.config {
            Some(c) => {
                let merge = c
                    .merge
                    .into_iter()
                    .enumerate()
                    .map(|(i, r)| self.resource(&format!("ignition.config.merge[{i}]"), r))
                    .collect::<Result<Vec<_>, _>>()?;
                let replace = c
                    .replace
                    .map(|r| self.resource("ignition.config.replace", r))
                    .transpose()?;
                (!merge.is_empty() || replace.is_some())
                    .then_some(IgnitionConfigRefs { merge, replace })
            }
            None => None,
        };
        let proxy = match b.proxy {
            Some(p) => {
                self.require("ignition.proxy", 1)?;
                Some(Proxy {
                    http_proxy: p.http_proxy,
                    https_proxy: p.https_proxy,
                    no_proxy: p.no_proxy,
                })
            }
            None => None,
        };
        let security = match b.security.and_then(|s| s.tls) {
            Some(tls) if !tls.certificate_authorities.is_empty() => {
                let cas = tls
                    .certificate_authorities
                    .into_iter()
                    .enumerate()
                    .map(|(i, r)| {
                        self.resource(
                            &format!("ignition.security.tls.certificate_authorities[{i}]"),
                            r,
                        )
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Some(Security {
                    tls: Tls {
                        certificate_authorities: cas,
                    },
                })
            }
            _ => None,
        };
        let timeouts = b
            .timeouts
            .filter(|t| t.http_response_headers.is_some() || t.http_total.is_some())
            .map(|t| Timeouts {
                http_response_headers: t.http_response_headers,
                http_total: t.http_total,
            });
        Ok(IgnitionMeta {
            version: IGNITION_VERSION.to_string(),
            config,
            proxy,
            security,
            timeouts,
        })
    }

    fn resource(&self, field: &str, r: BResource) -> Result<Resource, ButaneError> {
        if r.local.is_some() {
            return Err(unsupported(format!("{field}.local"), LOCAL_HINT));
        }
        let source = match (r.source, r.inline) {
            (Some(_), Some(_)) => {
                return Err(invalid(field, "set either `source` or `inline`, not both"))
            }
            (Some(src), None) => {
                self.check_source(field, &src)?;
                Some(src)
            }
            (None, Some(inline)) => {
                if r.compression.is_some() {
                    return Err(invalid(
                        format!("{field}.compression"),
                        "`compression` describes a fetched `source`; remove it for `inline` \
                         contents",
                    ));
                }
                Some(data_url(inline.as_bytes()))
            }
            (None, None) => None,
        };
        if let Some(c) = r.compression.as_deref() {
            if !c.is_empty() && c != "gzip" {
                return Err(invalid(
                    format!("{field}.compression"),
                    format!("unknown compression {c:?}; Ignition supports only \"gzip\""),
                ));
            }
        }
        if !r.http_headers.is_empty() {
            self.require(&format!("{field}.http_headers"), 1)?;
            let is_http = source
                .as_deref()
                .is_some_and(|s| s.starts_with("http://") || s.starts_with("https://"));
            if !is_http {
                return Err(invalid(
                    format!("{field}.http_headers"),
                    "HTTP headers need an http:// or https:// `source`",
                ));
            }
        }
        let verification = match r.verification.and_then(|v| v.hash) {
            Some(hash) => {
                let ok = match hash.split_once('-') {
                    Some(("sha512", hex)) => hex.len() == 128,
                    Some(("sha256", hex)) => {
                        self.require(&format!("{field}.verification.hash"), 1)?;
                        hex.len() == 64
                    }
                    _ => false,
                };
                if !ok || !hash.split_once('-').is_some_and(|(_, h)| is_hex(h)) {
                    return Err(invalid(
                        format!("{field}.verification.hash"),
                        format!(
                            "{hash:?} is not of the form sha512-<128 hex digits> or \
                             sha256-<64 hex digits>"
                        ),
                    ));
                }
                Some(Verification { hash })
            }
            None => None,
        };
        Ok(Resource {
            compression: r.compression.filter(|c| !c.is_empty()),
            http_headers: r
                .http_headers
                .into_iter()
                .map(|h| HttpHeader {
                    name: h.name,
                    value: h.value,
                })
                .collect(),
            source,
            verification,
        })
    }

    fn check_source(&self, field: &str, src: &str) -> Result<(), ButaneError> {
        let scheme = src.split_once(':').map(|(s, _)| s).unwrap_or_default();
        match scheme {
            "http" | "https" | "tftp" | "s3" | "data" => Ok(()),
            "gs" => self.require(&format!("{field}.source (gs://)"), 2),
            _ => Err(invalid(
                format!("{field}.source"),
                format!("{src:?} has no supported URL scheme (http, https, tftp, s3, gs, data)"),
            )),
        }
    }

    fn storage(&self, b: BStorage) -> Result<Option<Storage>, ButaneError> {
        for (name, present) in [
            ("storage.disks", b.disks.is_some()),
            ("storage.raid", b.raid.is_some()),
            ("storage.filesystems", b.filesystems.is_some()),
            ("storage.luks", b.luks.is_some()),
            ("storage.trees", b.trees.is_some()),
        ] {
            if present {
                let hint = if name == "storage.trees" {
                    LOCAL_HINT
                } else {
                    STORAGE_HINT
                };
                return Err(unsupported(name, hint));
            }
        }
        let mut seen = BTreeSet::new();
        let mut check_path = |field: String, path: &str| -> Result<(), ButaneError> {
            if !path.starts_with('/') {
                return Err(invalid(
                    format!("{field}.path"),
                    format!("{path:?} must be an absolute path"),
                ));
            }
            let normalized = path.trim_end_matches('/');
            if !seen.insert(normalized.to_string()) {
                return Err(invalid(
                    format!("{field}.path"),
                    format!("{path:?} is configured more than once"),
                ));
            }
            Ok(())
        };

        let mut files = Vec::with_capacity(b.files.len());
        for (i, f) in b.files.into_iter().enumerate() {
            let field = format!("storage.files[{i}]");
            check_path(field.clone(), &f.path)?;
            check_mode(&field, f.mode)?;
            let contents = f
                .contents
                .map(|r| self.resource(&format!("{field}.contents"), r))
                .transpose()?;
            let append = f
                .append
                .into_iter()
                .enumerate()
                .map(|(j, r)| self.resource(&format!("{field}.append[{j}]"), r))
                .collect::<Result<Vec<_>, _>>()?;
            files.push(File {
                user: owner(&format!("{field}.user"), f.user)?,
                group: owner(&format!("{field}.group"), f.group)?,
                path: f.path,
                overwrite: f.overwrite,
                append,
                contents,
                mode: f.mode,
            });
        }

        let mut directories = Vec::with_capacity(b.directories.len());
        for (i, d) in b.directories.into_iter().enumerate() {
            let field = format!("storage.directories[{i}]");
            check_path(field.clone(), &d.path)?;
            check_mode(&field, d.mode)?;
            directories.push(Directory {
                user: owner(&format!("{field}.user"), d.user)?,
                group: owner(&format!("{field}.group"), d.group)?,
                path: d.path,
                overwrite: d.overwrite,
                mode: d.mode,
            });
        }

        let mut links = Vec::with_capacity(b.links.len());
        for (i, l) in b.links.into_iter().enumerate() {
            let field = format!("storage.links[{i}]");
            check_path(field.clone(), &l.path)?;
            let target = match l.target {
                Some(t) if !t.is_empty() => t,
                _ => {
                    return Err(invalid(
                        format!("{field}.target"),
                        "a link needs a `target`",
                    ))
                }
            };
            links.push(Link {
                user: owner(&format!("{field}.user"), l.user)?,
                group: owner(&format!("{field}.group"), l.group)?,
                path: l.path,
                overwrite: l.overwrite,
                target,
                hard: l.hard.filter(|h| *h),
            });
        }

        let storage = Storage {
            directories,
            files,
            links,
        };
        Ok((storage != Storage::default()).then_some(storage))
    }

    fn systemd(&self, b: BSystemd) -> Result<Option<Systemd>, ButaneError> {
        let mut names = BTreeSet::new();
        let mut units = Vec::with_capacity(b.units.len());
        for (i, u) in b.units.into_iter().enumerate() {
            let field = format!("systemd.units[{i}]");
            if u.contents_local.is_some() {
                return Err(unsupported(format!("{field}.contents_local"), LOCAL_HINT));
            }
            if !UNIT_SUFFIXES.iter().any(|s| u.name.ends_with(s)) || u.name.contains('/') {
                return Err(invalid(
                    format!("{field}.name"),
                    format!(
                        "{:?} is not a systemd unit name (it must end in one of {})",
                        u.name,
                        UNIT_SUFFIXES.join(", ")
                    ),
                ));
            }
            if !names.insert(u.name.clone()) {
                return Err(invalid(
                    format!("{field}.name"),
                    format!("unit {:?} is configured more than once", u.name),
                ));
            }
            if let Some(contents) = &u.contents {
                check_unit_contents(&format!("{field}.contents"), contents)?;
            }
            let mut dropin_names = BTreeSet::new();
            let mut dropins = Vec::with_capacity(u.dropins.len());
            for (j, d) in u.dropins.into_iter().enumerate() {
                let dfield = format!("{field}.dropins[{j}]");
                if d.contents_local.is_some() {
                    return Err(unsupported(format!("{dfield}.contents_local"), LOCAL_HINT));
                }
                if !d.name.ends_with(".conf") || d.name.contains('/') {
                    return Err(invalid(
                        format!("{dfield}.name"),
                        format!("{:?} must be a file name ending in .conf", d.name),
                    ));
                }
                if !dropin_names.insert(d.name.clone()) {
                    return Err(invalid(
                        format!("{dfield}.name"),
                        format!("drop-in {:?} is configured more than once", d.name),
                    ));
                }
                if let Some(contents) = &d.contents {
                    check_unit_contents(&format!("{dfield}.contents"), contents)?;
                }
                dropins.push(Dropin {
                    name: d.name,
                    contents: d.contents,
                });
            }
            units.push(Unit {
                name: u.name,
                enabled: u.enabled,
                mask: u.mask,
                contents: u.contents,
                dropins,
            });
        }
        Ok((!units.is_empty()).then_some(Systemd { units }))
    }

    fn passwd(&self, b: BPasswd) -> Result<Option<Passwd>, ButaneError> {
        let mut names = BTreeSet::new();
        let mut users = Vec::with_capacity(b.users.len());
        for (i, u) in b.users.into_iter().enumerate() {
            let field = format!("passwd.users[{i}]");
            if u.ssh_authorized_keys_local.is_some() {
                return Err(unsupported(
                    format!("{field}.ssh_authorized_keys_local"),
                    LOCAL_HINT,
                ));
            }
            if u.name.is_empty() {
                return Err(invalid(format!("{field}.name"), "a user needs a name"));
            }
            if !names.insert(u.name.clone()) {
                return Err(invalid(
                    format!("{field}.name"),
                    format!("user {:?} is configured more than once", u.name),
                ));
            }
            if u.should_exist.is_some() {
                self.require(&format!("{field}.should_exist"), 2)?;
            }
            users.push(User {
                name: u.name,
                gecos: u.gecos,
                groups: u.groups,
                home_dir: u.home_dir,
                no_create_home: u.no_create_home,
                no_log_init: u.no_log_init,
                no_user_group: u.no_user_group,
                password_hash: u.password_hash,
                primary_group: u.primary_group,
                shell: u.shell,
                should_exist: u.should_exist,
                ssh_authorized_keys: u.ssh_authorized_keys,
                system: u.system,
                uid: u.uid,
            });
        }
        let mut names = BTreeSet::new();
        let mut groups = Vec::with_capacity(b.groups.len());
        for (i, g) in b.groups.into_iter().enumerate() {
            let field = format!("passwd.groups[{i}]");
            if g.name.is_empty() {
                return Err(invalid(format!("{field}.name"), "a group needs a name"));
            }
            if !names.insert(g.name.clone()) {
                return Err(invalid(
                    format!("{field}.name"),
                    format!("group {:?} is configured more than once", g.name),
                ));
            }
            if g.should_exist.is_some() {
                self.require(&format!("{field}.should_exist"), 2)?;
            }
            groups.push(Group {
                name: g.name,
                gid: g.gid,
                password_hash: g.password_hash,
                should_exist: g.should_exist,
                system: g.system,
            });
        }
        let passwd = Passwd { groups, users };
        Ok((passwd != Passwd::default()).then_some(passwd))
    }
}

fn is_hex(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn check_mode(field: &str, mode: Option<u32>) -> Result<(), ButaneError> {
    match mode {
        Some(m) if m > 0o777 => Err(invalid(
            format!("{field}.mode"),
            format!(
                "{m:#o} has setuid/setgid/sticky bits, which Ignition 3.3 does not \
                 support; use permission bits only (e.g. 0755)"
            ),
        )),
        _ => Ok(()),
    }
}

fn owner(field: &str, o: Option<BNodeUser>) -> Result<Option<NodeOwner>, ButaneError> {
    match o {
        None => Ok(None),
        Some(BNodeUser {
            id: None,
            name: None,
        }) => Ok(None),
        Some(BNodeUser {
            id: Some(_),
            name: Some(_),
        }) => Err(invalid(field, "set either `id` or `name`, not both")),
        Some(BNodeUser { id, name }) => Ok(Some(NodeOwner { id, name })),
    }
}

/// A light syntax check of systemd unit text: every non-blank, non-comment line is a
/// `[Section]` header or a `Key=Value` assignment inside a section (continuation
/// lines after a trailing backslash are allowed).
fn check_unit_contents(field: &str, contents: &str) -> Result<(), ButaneError> {
    let mut in_section = false;
    let mut continued = false;
    for (n, line) in contents.lines().enumerate() {
        let t = line.trim();
        let was_continued = continued;
        continued = t.ends_with('\\');
        if was_continued || t.is_empty() || t.starts_with('#') || t.starts_with(';') {
            continue;
        }
        if t.starts_with('[') {
            if !t.ends_with(']') {
                return Err(invalid(
                    field,
                    format!("line {}: unterminated section header {t:?}", n + 1),
                ));
            }
            in_section = true;
        } else if !t.contains('=') {
            return Err(invalid(
                field,
                format!(
                    "line {}: {t:?} is neither `[Section]` nor `Key=Value`",
                    n + 1
                ),
            ));
        } else if !in_section {
            return Err(invalid(
                field,
                format!("line {}: {t:?} comes before any `[Section]` header", n + 1),
            ));
        }
    }
    Ok(())
}
