//! [`ProxmoxProvider`]: the [`CloudProvider`] over the Proxmox VE API.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;

mod finish;
mod joined;
mod joining;
mod listing;
pub mod seeding;
mod warm;
use finish::NewVm;
use listing::unpaired_nameless;
use serde_json::Value;
use tokio::sync::Mutex;

use super::adopt::{judge_clones, Adopted, Judged};
use super::agent::{run_join_script, JoinError, JoinTimings, MAX_SCRIPT_LEN};
use super::allocate::{clone_vm, list_vms, vm_config, vm_path, CloneSpec, VmResource};
use super::client::{params, Api};
use super::credentials::ProxmoxCredentials;
use super::halfmade::{half_made, is_gone, Creating};
use super::hosts::{list_all, maintenance, place, shape, template_copies, HostCache};
use super::ippool::{address_of, Pool};
use super::tags::{self, ownership};
use super::tasks::{upid_of, wait_task, Following, ListedTask, TaskDeadline};
use super::{other, validate_settings, IpConfig, JoinMode, ProxmoxSettings, PROVIDER};
use crate::cloud::{refused, CloudError, CloudProvider, CreateRequest, Observed};
use crate::model::{GroupShape, Server, ServerStatus};

/// Tunables of [`ProxmoxProvider`]; the defaults suit real clusters.
#[derive(Debug, Clone)]
pub struct ProviderOptions {
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
    /// Deadline of each task (clone, config, start, stop, destroy).
    pub task_timeout: Duration,
    /// Deadline of the clone task instead of `task_timeout`: extended while its log
    /// grows (built from `provisionTimeout` and `provisionTimeoutMax`).
    pub clone_deadline: Option<TaskDeadline>,
    /// Pause between polls of a task or the guest agent.
    pub poll_interval: Duration,
    /// How long the guest agent may take to answer after start (`join: guestAgent`).
    pub agent_timeout: Duration,
    /// How long the join script may run.
    pub exec_timeout: Duration,
    /// VM ids tried when ids are taken meanwhile.
    pub vmid_attempts: u32,
    /// Renew the login ticket after this long (Proxmox tickets live 2 h).
    pub ticket_renewal: Duration,
    /// Reading never changes anything: a clone an earlier process left is neither stopped
    /// at its deadline nor finished (`plan`, `run --dry-run`).
    pub read_only: bool,
    /// How often the storages are searched for cloud-init seeds left behind.
    pub seed_sweep_every: Duration,
    /// A seed younger than this is never taken as left behind (its VM may be starting).
    pub seed_grace: Duration,
    /// The cluster's identity, which names its seeds (see [`crate::cloud::ClusterIdentity`]):
    /// until it is known, no seed is made or swept.
    pub identity: crate::cloud::ClusterIdentity,
}

impl Default for ProviderOptions {
    fn default() -> Self {
        ProviderOptions {
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(60),
            task_timeout: Duration::from_secs(900),
            clone_deadline: None,
            poll_interval: Duration::from_secs(2),
            agent_timeout: Duration::from_secs(600),
            exec_timeout: Duration::from_secs(900),
            vmid_attempts: 10,
            ticket_renewal: super::client::TICKET_RENEW_AFTER,
            read_only: false,
            seed_sweep_every: Duration::from_secs(600),
            seed_grace: Duration::from_secs(600),
            identity: Default::default(),
        }
    }
}

/// Progress of a guest-agent join started by this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JoinState {
    Running,
    Done,
    /// Known to have failed: the VM is reported in error and replaced.
    Failed(String),
    /// How the script ended is not known (see [`JoinError::Unknown`]): the VM is left to
    /// join, or to be judged by `provisionTimeout`, never destroyed for it.
    Unknown(String),
}

struct Inner {
    api: Api,
    groups: BTreeMap<String, ProxmoxSettings>,
    pools: BTreeMap<String, Pool>,
    options: ProviderOptions,
    /// Serialises creates so two never pick the same address or id in this process.
    create_lock: Mutex<()>,
    /// Guest-agent joins by VM id; a failed one shows the VM as `Error`.
    joins: StdMutex<HashMap<u32, JoinState>>,
    /// VMs this process is between cloning and configuring: half-made, but not left so.
    creating: StdMutex<HashSet<u32>>,
    /// VMs whose clone this process saw fail: never finished (see `finish`).
    failed_clones: StdMutex<HashSet<u32>>,
    tasks: StdMutex<Vec<tokio::task::JoinHandle<()>>>,
    hosts: HostCache,
    /// Clone tasks this process follows now, and those it judges for a process gone.
    following: Following,
    adopted: Adopted,
    /// What judging those found (stopped or failed clones), until the next `observe`
    /// hands it to the plan: a listing in between must not swallow it.
    found: StdMutex<Vec<String>>,
    /// When seeds left behind were last searched for (see `seeding`).
    last_sweep: StdMutex<Option<std::time::Instant>>,
}

/// Proxmox VE as a [`CloudProvider`]: one cluster (API endpoint), one or more node groups.
#[derive(Clone)]
pub struct ProxmoxProvider {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ProxmoxProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxmoxProvider")
            .field("api", &self.inner.api)
            .field("groups", &self.inner.groups.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

fn vmid_of(id: &str) -> Result<u32, CloudError> {
    id.parse::<u32>()
        .map_err(|_| other(format!("'{id}' is not a Proxmox VM id")))
}

/// Creation time from the config's `meta` (`creation-qemu=...,ctime=1700000000`).
fn meta_ctime(config: &BTreeMap<String, String>) -> Option<SystemTime> {
    let meta = config.get("meta")?;
    meta.split(',').find_map(|kv| {
        let secs = kv.trim().strip_prefix("ctime=")?.parse::<u64>().ok()?;
        Some(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
    })
}

/// `net0` with its `bridge=` replaced (or added).
fn with_bridge(net0: &str, bridge: &str) -> String {
    let mut parts: Vec<String> = net0
        .split(',')
        .filter(|p| !p.trim().is_empty() && !p.starts_with("bridge="))
        .map(str::to_string)
        .collect();
    parts.push(format!("bridge={bridge}"));
    parts.join(",")
}

impl ProxmoxProvider {
    /// Builds the provider; no request is made until first use.
    pub fn new(
        credentials: ProxmoxCredentials,
        groups: BTreeMap<String, ProxmoxSettings>,
    ) -> Result<Self, CloudError> {
        Self::with_options(credentials, groups, ProviderOptions::default())
    }

    pub fn with_options(
        credentials: ProxmoxCredentials,
        groups: BTreeMap<String, ProxmoxSettings>,
        options: ProviderOptions,
    ) -> Result<Self, CloudError> {
        let mut api = Api::new(
            &credentials,
            options.connect_timeout,
            options.request_timeout,
        )?;
        api.set_ticket_renewal(options.ticket_renewal);
        let mut pools = BTreeMap::new();
        for (name, s) in &groups {
            if let IpConfig::Static(p) = &s.ip_config {
                let pool = p
                    .validate()
                    .map_err(|m| other(format!("node group {name}: {m}")))?;
                pools.insert(name.clone(), pool);
            }
            if let Some((field, problem)) = validate_settings(s).into_iter().next() {
                return Err(other(format!(
                    "node group {name}: proxmox.{field}: {problem}"
                )));
            }
        }
        Ok(ProxmoxProvider {
            inner: Arc::new(Inner {
                api,
                groups,
                pools,
                options,
                create_lock: Mutex::new(()),
                joins: StdMutex::new(HashMap::new()),
                creating: StdMutex::new(HashSet::new()),
                failed_clones: StdMutex::new(HashSet::new()),
                tasks: StdMutex::new(Vec::new()),
                hosts: HostCache::default(),
                following: Following::default(),
                adopted: Adopted::default(),
                found: StdMutex::new(Vec::new()),
                last_sweep: StdMutex::new(None),
            }),
        })
    }

    fn settings(&self, group: &str) -> Result<&ProxmoxSettings, CloudError> {
        self.inner
            .groups
            .get(group)
            .ok_or_else(|| other(format!("no Proxmox settings for node group '{group}'")))
    }

    /// State of the guest-agent join of VM `id` started by this process, if any.
    pub fn join_state(&self, id: &str) -> Option<JoinState> {
        let vmid = id.parse::<u32>().ok()?;
        self.inner
            .joins
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&vmid)
            .cloned()
    }

    /// Waits for every guest-agent join started so far (tests, shutdown).
    pub async fn wait_for_joins(&self) {
        let handles: Vec<_> =
            std::mem::take(&mut *self.inner.tasks.lock().unwrap_or_else(|e| e.into_inner()));
        for h in handles {
            let _ = h.await;
        }
    }

    /// Verifies the credentials and that each group's template, hosts, storage and bridge
    /// exist (see [`super::check`]).
    pub async fn check(&self) -> Result<Vec<String>, CloudError> {
        super::check::check(&self.inner.api, &self.inner.groups).await
    }

    /// Addresses of the pool in use by any nodewright VM (of any cluster), read live.
    async fn addresses_in_use(&self, vms: &[VmResource]) -> Result<BTreeSet<Ipv4Addr>, CloudError> {
        let mut used = BTreeSet::new();
        for v in vms.iter().filter(|v| !v.template && v.is_nodewright()) {
            match vm_config(&self.inner.api, &v.node, v.vmid).await {
                Ok(cfg) => {
                    if let Some(a) = cfg.get("ipconfig0").and_then(|c| address_of(c)) {
                        used.insert(a);
                    }
                }
                // Gone between the listing and now: its address is free.
                Err(e) if is_gone(&e) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(used)
    }

    fn clone_deadline(&self) -> TaskDeadline {
        let o = &self.inner.options;
        o.clone_deadline
            .unwrap_or(TaskDeadline::fixed(o.task_timeout))
    }

    /// Stops the clones a process gone left running past their deadline (see
    /// [`super::adopt`]); what it finds waits for the next `observe`. Returns those of
    /// them still running.
    async fn judge_clones(
        &self,
        vms: &[VmResource],
        cluster: &str,
    ) -> Result<Vec<ListedTask>, CloudError> {
        let inner = &self.inner;
        // The templates this process's groups clone: another template's clones are not ours.
        let templates: HashSet<u32> = inner
            .groups
            .values()
            .filter_map(|s| template_copies(vms, &s.template).ok())
            .flatten()
            .map(|v| v.vmid)
            .collect();
        let Judged { found, running } = judge_clones(
            &inner.api,
            &inner.following,
            &inner.adopted,
            self.clone_deadline(),
            vms,
            &templates,
            cluster,
            inner.options.read_only,
        )
        .await?;
        if !found.is_empty() {
            inner
                .found
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend(found);
        }
        Ok(running)
    }

    async fn await_upid(&self, call: &str, data: &Value) -> Result<(), CloudError> {
        if data.is_null() {
            return Ok(());
        }
        let upid = upid_of(call, data)?;
        wait_task(
            &self.inner.api,
            &upid,
            self.inner.options.task_timeout,
            self.inner.options.poll_interval,
        )
        .await
    }

    /// Stops (when running) and destroys a VM, awaiting both tasks.
    async fn destroy(&self, node: &str, vmid: u32, running: bool) -> Result<(), CloudError> {
        let api = &self.inner.api;
        let base = vm_path(node, vmid);
        if running {
            let call = format!("{base}/status/stop");
            let data = api.post(&call, &[]).await?;
            self.await_upid(&format!("POST {call}"), &data).await?;
        }
        let data = api
            .delete(
                &base,
                &params([
                    ("purge", "1".into()),
                    ("destroy-unreferenced-disks", "1".into()),
                ]),
            )
            .await?;
        self.await_upid(&format!("DELETE {base}"), &data).await
    }

    /// Clones, configures and (unless `warm`: left stopped with the warm mark) starts a VM.
    async fn create_locked(&self, req: &CreateRequest, warm: bool) -> Result<Server, CloudError> {
        let inner = &self.inner;
        let api = &inner.api;
        let settings = self.settings(&req.group)?;
        if settings.join == JoinMode::GuestAgent && req.user_data.chars().count() > MAX_SCRIPT_LEN {
            return Err(other(format!(
                "join script for {} is {} characters; agent/file-write accepts at most {MAX_SCRIPT_LEN}",
                req.name,
                req.user_data.chars().count()
            )));
        }
        let listing = list_all(api).await?;
        let vms = &listing.vms;
        let (target, template) = place(api, &inner.hosts, &listing, settings, req).await?;
        let tconf = vm_config(api, &template.node, template.vmid).await?;
        let address = match inner.pools.get(&req.group) {
            Some(pool) => {
                let used = self.addresses_in_use(vms).await?;
                let addr = pool.allocate(&used).ok_or_else(|| {
                    other(format!(
                        "static IP pool of group {} is exhausted ({} addresses in use)",
                        req.group,
                        used.len()
                    ))
                })?;
                Some((pool, addr))
            }
            None => None,
        };
        // Recognisable as ours from the clone on, before the config call sets the tags.
        let made = SystemTime::now();
        let description = |vmid: u32| {
            let d = tags::description_for_new_vm(&tags::NewVmMarks {
                cluster: &req.cluster,
                group: &req.group,
                settings_hash: &req.settings_hash,
                warm,
                created: made,
                vmid,
            });
            match inner.options.identity.get() {
                Some(uid) => tags::with_identity(&d, uid),
                None => d,
            }
        };
        let vmid = clone_vm(
            api,
            &CloneSpec {
                template: &template,
                target: &target,
                name: &req.name,
                description: &description,
                settings,
                attempts: inner.options.vmid_attempts,
                deadline: self.clone_deadline(),
                poll: inner.options.poll_interval,
                following: &inner.following,
                failed: &inner.failed_clones,
            },
        )
        .await?;
        tracing::info!(vm = %req.name, vmid, host = %target, template = template.vmid, "Proxmox VM cloned");
        let _creating = Creating::start(&inner.creating, vmid);

        let created = SystemTime::now();
        let memory_mib = settings.memory.map(|m| m.as_u64() / (1024 * 1024));
        let new_vm = NewVm {
            cluster: &req.cluster,
            group: &req.group,
            name: &req.name,
            settings,
            settings_hash: &req.settings_hash,
            node: &target,
            vmid,
            template_net0: tconf.get("net0").map(String::as_str),
            template: template.vmid,
            address,
            created,
            warm,
            user_data: Some(&req.user_data),
        };
        self.configure_new(&new_vm).await?;
        if warm {
            tracing::info!(vm = %req.name, vmid, host = %target, "Proxmox VM made for the warm pool, left stopped");
        } else {
            tracing::info!(vm = %req.name, vmid, host = %target, "Proxmox VM started");
        }
        if settings.join == JoinMode::GuestAgent && !warm {
            self.spawn_join(target.clone(), vmid, req, settings);
        }
        Ok(Server {
            id: vmid.to_string(),
            name: req.name.clone(),
            cluster: Some(req.cluster.clone()),
            group: Some(req.group.clone()),
            status: if warm {
                ServerStatus::Stopped
            } else {
                ServerStatus::Building
            },
            created,
            memory_bytes: memory_mib.map(|m| m * 1024 * 1024).or(template.maxmem),
            provider: PROVIDER.into(),
            size: None,
            settings_hash: Some(req.settings_hash.clone()).filter(|h| !h.is_empty()),
            fault: None,
            warm,
            filling: false,
            joined: None,
            restarted: None,
            fenced: None,
            removing_since: None,
        })
    }

    pub(super) fn spawn_join(
        &self,
        node: String,
        vmid: u32,
        req: &CreateRequest,
        settings: &ProxmoxSettings,
    ) {
        let inner = self.inner.clone();
        let script = req.user_data.clone();
        let path = settings.join_script_path.clone();
        let name = req.name.clone();
        let timings = JoinTimings {
            agent_timeout: inner.options.agent_timeout,
            exec_timeout: inner.options.exec_timeout,
            poll: inner.options.poll_interval,
        };
        inner
            .joins
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(vmid, JoinState::Running);
        let task_inner = inner.clone();
        let handle = tokio::spawn(async move {
            let result =
                run_join_script(&task_inner.api, &node, vmid, &script, &path, &timings).await;
            let state = match result {
                Ok(()) => JoinState::Done,
                Err(JoinError::Failed(e)) => {
                    tracing::warn!(vm = %name, vmid, error = %e, "guest-agent join failed; the VM will be reported as failed");
                    JoinState::Failed(e.to_string())
                }
                Err(JoinError::Unknown(e)) => {
                    tracing::warn!(vm = %name, vmid, error = %e, "guest-agent join outcome unknown; the VM is left to join within provisionTimeout");
                    JoinState::Unknown(e.to_string())
                }
            };
            // The script was sent: a later process does not run it again (an unknown
            // outcome is left to `provisionTimeout`, as here).
            if matches!(state, JoinState::Done | JoinState::Unknown(_)) {
                let this = ProxmoxProvider {
                    inner: task_inner.clone(),
                };
                this.joining_done(vmid).await;
            }
            task_inner
                .joins
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(vmid, state);
        });
        let mut tasks = inner.tasks.lock().unwrap_or_else(|e| e.into_inner());
        tasks.retain(|h| !h.is_finished());
        tasks.push(handle);
    }
}

#[async_trait]
impl CloudProvider for ProxmoxProvider {
    fn name(&self) -> &str {
        PROVIDER
    }

    /// VMs tagged for `cluster`, and VMs half-made for it (see [`half_made`]).
    async fn list_servers(&self, cluster: &str) -> Result<Vec<Server>, CloudError> {
        let api = &self.inner.api;
        let mut vms = list_vms(api).await?;
        let in_flight = self.judge_clones(&vms, cluster).await?;
        if unpaired_nameless(&vms, &in_flight) {
            vms = list_vms(api).await?;
        }
        Ok(self.servers_in(&vms, cluster, &in_flight).await?.0)
    }

    /// One `/cluster/resources` listing answers the servers, the hosts and every group's
    /// template, and one HA status read the hosts in maintenance: a cycle costs two calls
    /// whatever the number of groups (plus, once, each template's disks and the cluster's
    /// name; while some VM is locked for a clone, the task lists of the hosts that
    /// hold it, see `super::adopt`, and the listing again while a nameless clone is not
    /// tied to a running task, see `unpaired_nameless`; the config of each VM that is a
    /// person's copy of ours, for a seed to eject; and at most every ten minutes the ISO
    /// storages' content, for cloud-init seeds left behind, see `seeding`).
    async fn observe(&self, cluster: &str, groups: &[String]) -> Result<Observed, CloudError> {
        let api = &self.inner.api;
        let mut listing = list_all(api).await?;
        let in_flight = self.judge_clones(&listing.vms, cluster).await?;
        if unpaired_nameless(&listing.vms, &in_flight) {
            listing = list_all(api).await?;
        }
        let maint = maintenance(api).await;
        let region = self.inner.hosts.region(api).await;
        let mut shapes = BTreeMap::new();
        for g in groups {
            let settings = self.settings(g)?;
            let shape = shape(
                api,
                &self.inner.hosts,
                &listing,
                &maint,
                region.clone(),
                settings,
                cluster,
                g,
            )
            .await?;
            shapes.insert(g.clone(), shape);
        }
        let (servers, strays) = self.servers_in(&listing.vms, cluster, &in_flight).await?;
        self.detach_copied_seeds(cluster, &listing.vms, &strays)
            .await;
        self.sweep_seeds(cluster, &listing).await;
        let failures =
            std::mem::take(&mut *self.inner.found.lock().unwrap_or_else(|e| e.into_inner()));
        Ok(Observed {
            servers,
            shapes,
            failures,
            strays,
        })
    }

    /// Ownership as the tags say it, or for an untagged VM half-made for `cluster`, as its
    /// name and description say it.
    async fn get_server(&self, cluster: &str, id: &str) -> Result<Option<Server>, CloudError> {
        let vmid = vmid_of(id)?;
        let vms = list_vms(&self.inner.api).await?;
        let Some(v) = vms.iter().find(|v| v.vmid == vmid && !v.template) else {
            return Ok(None);
        };
        Ok(Some(match half_made(&self.inner.api, v, cluster).await? {
            Some(o) => self.vm_server(v, o, true).await,
            None => {
                let mut o = ownership(v.tags());
                if let Some(of) = o.copy_of(v.vmid) {
                    // A person's copy of VM `of`: its marks are not its own.
                    tracing::warn!(
                        vmid,
                        of,
                        "VM carries the marks of another VM: a copy, not ours"
                    );
                    o.cluster = None;
                }
                self.vm_server(v, o, false).await
            }
        }))
    }

    async fn create_server(&self, req: &CreateRequest) -> Result<Server, CloudError> {
        let _guard = self.inner.create_lock.lock().await;
        self.create_locked(req, false).await
    }

    async fn create_warm(&self, req: &CreateRequest) -> Result<Server, CloudError> {
        let _guard = self.inner.create_lock.lock().await;
        self.create_locked(req, true).await
    }

    async fn start_warm(
        &self,
        cluster: &str,
        id: &str,
        render: &crate::cloud::RenderJoin<'_>,
    ) -> Result<(), CloudError> {
        self.start_parked(cluster, id, render).await
    }

    async fn park(&self, cluster: &str, id: &str) -> Result<(), CloudError> {
        self.park_vm(cluster, id).await
    }

    async fn mark_joined(
        &self,
        cluster: &str,
        id: &str,
        at: Option<SystemTime>,
    ) -> Result<(), CloudError> {
        self.mark_vm_joined(cluster, id, at).await
    }

    async fn mark_removing(&self, cluster: &str, id: &str) -> Result<(), CloudError> {
        self.mark_vm_removing(cluster, id).await
    }

    async fn restart(&self, cluster: &str, id: &str, at: SystemTime) -> Result<(), CloudError> {
        self.restart_vm(cluster, id, at).await
    }

    async fn fence(&self, cluster: &str, id: &str, at: SystemTime) -> Result<(), CloudError> {
        self.fence_vm(cluster, id, at).await
    }

    async fn finish_join(
        &self,
        cluster: &str,
        id: &str,
        render: Option<&crate::cloud::RenderJoin<'_>>,
    ) -> Result<(), CloudError> {
        self.finish_vm_join(cluster, id, render).await
    }

    /// Destroys VM `id` only when its tags, read back just before, name `cluster` (and
    /// no other cluster) and were made for this VM id (a person's copy of a VM of ours
    /// carries its tags), or, with no nodewright tag at all, when it is half-made for
    /// `cluster` (name and description). Its cloud-init seed, if still attached, is deleted
    /// with it.
    async fn delete_server(&self, cluster: &str, id: &str) -> Result<(), CloudError> {
        let vmid = vmid_of(id)?;
        let vms = list_vms(&self.inner.api).await?;
        let Some(vm) = vms.iter().find(|v| v.vmid == vmid) else {
            tracing::debug!(vmid, "VM already gone");
            return Ok(());
        };
        let name = vm.name.clone().unwrap_or_else(|| format!("VM {vmid}"));
        if vm.template {
            return Err(refused(PROVIDER, &name, id, "it is a template".into()));
        }
        if vm.lock.as_deref() == Some("clone") {
            let reason = "a clone is still copying it (lock: clone); a clone past its deadline is stopped, which removes it".into();
            return Err(refused(PROVIDER, &name, id, reason));
        }
        let marks = ownership(vm.tags());
        if let Some(of) = marks.copy_of(vmid).filter(|_| marks.cluster.is_some()) {
            let reason = format!(
                "its nodewright tags were made for VM {of}: it is a copy of that VM, not one nodewright made"
            );
            return Err(refused(PROVIDER, &name, id, reason));
        }
        let owner = marks.cluster;
        let half = if owner.is_none() {
            half_made(&self.inner.api, vm, cluster).await?.is_some()
        } else {
            false
        };
        if owner.as_deref() != Some(cluster) && !half {
            let named = tags::cluster_tags(vm.tags());
            let reason = match named.as_slice() {
                [] => format!(
                    "it is not tagged as a nodewright VM (no {}<cluster> tag)",
                    tags::CLUSTER_PREFIX
                ),
                [one] => format!("it is tagged for cluster '{one}', not '{cluster}'"),
                many => format!(
                    "it is tagged for several clusters ({}), so for none",
                    many.join(", ")
                ),
            };
            return Err(refused(PROVIDER, &name, id, reason));
        }
        let seed = self.seed_volume(&vm.node, vmid, cluster).await;
        self.destroy(&vm.node, vmid, vm.status == "running").await?;
        self.forget_seed(&vm.node, seed).await;
        self.inner
            .joins
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&vmid);
        self.inner
            .failed_clones
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&vmid);
        tracing::info!(vmid, node = %vm.node, "Proxmox VM destroyed");
        Ok(())
    }

    async fn group_shape(&self, group: &str) -> Result<GroupShape, CloudError> {
        let api = &self.inner.api;
        let listing = list_all(api).await?;
        let maint = maintenance(api).await;
        let region = self.inner.hosts.region(api).await;
        // Without a cluster, the group's VMs per host count as none.
        let settings = self.settings(group)?;
        shape(
            api,
            &self.inner.hosts,
            &listing,
            &maint,
            region,
            settings,
            "",
            group,
        )
        .await
    }

    async fn verify(&self) -> Result<Vec<String>, CloudError> {
        self.check().await
    }

    /// Removes the cloud-init seeds (join token inside) of the VMs whose nodes joined.
    async fn nodes_joined(&self, cluster: &str, names: &[String]) -> Result<(), CloudError> {
        self.seeds_joined(cluster, names).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers() {
        assert_eq!(
            with_bridge("virtio=AA:BB:CC:DD:EE:FF,bridge=vmbr0,firewall=1", "vmbr1"),
            "virtio=AA:BB:CC:DD:EE:FF,firewall=1,bridge=vmbr1"
        );
        let cfg: BTreeMap<String, String> = [(
            "meta".to_string(),
            "creation-qemu=9.0.2,ctime=1700000000".to_string(),
        )]
        .into();
        assert_eq!(
            meta_ctime(&cfg),
            Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000))
        );
    }
}
