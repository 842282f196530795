//! Hypervisor hosts as a provider reports them and the planner counts them: capacity,
//! what the configured VMs already take, and where the next VM of a group goes.
//!
//! One pure placement function ([`GroupHosts::choose`]) serves both the planner (how many
//! VMs fit, and on which hosts) and the provider (where to clone), so the two agree.
//! Providers without hosts (OpenStack, Kamatera) report none and nothing here applies.

use serde::{Deserialize, Serialize};

/// Whether a host takes new VMs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HostState {
    Online,
    Offline,
    /// Online, but its operator put it in maintenance (Proxmox: HA node maintenance).
    Maintenance,
}

/// One host a group may place VMs on.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Host {
    pub name: String,
    pub state: HostState,
    /// Physical (logical) CPUs × 1000.
    pub cpu_milli: u64,
    /// Physical memory in bytes.
    pub memory: u64,
    /// Configured vCPUs × 1000 of every guest on the host (running or stopped, not
    /// templates): what the guests may claim, not what they use now.
    pub cpu_taken_milli: u64,
    /// Configured memory of every guest on the host, in bytes.
    pub memory_taken: u64,
    /// Kept free for the host itself (the group's `reserve`), before any overcommit.
    pub reserved_cpu_milli: u64,
    pub reserved_memory: u64,
    /// VMs of the group already on the host.
    pub group_vms: u32,
    /// The group's template can be cloned onto this host (a copy here, or a copy on
    /// shared storage).
    pub template: bool,
}

/// How far guests may claim more than a host has: `cpu: 4.0` lets configured vCPUs
/// reach four times the host's CPUs (after its reserve).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Overcommit {
    #[serde(default = "default_cpu_ratio")]
    pub cpu: f64,
    #[serde(default = "default_memory_ratio")]
    pub memory: f64,
}

fn default_cpu_ratio() -> f64 {
    4.0
}
fn default_memory_ratio() -> f64 {
    1.0
}

impl Default for Overcommit {
    fn default() -> Self {
        Overcommit {
            cpu: default_cpu_ratio(),
            memory: default_memory_ratio(),
        }
    }
}

/// Size of one new VM as it is configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct VmSize {
    pub cpu_milli: u64,
    pub memory: u64,
}

/// The hosts one group may use, with the group's placement rules.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupHosts {
    /// Hosts the group is allowed on (its `nodes`, or all), in any state.
    pub hosts: Vec<Host>,
    pub overcommit: Overcommit,
    /// At most this many VMs of the group per host; `None`: balanced, not limited.
    pub max_per_host: Option<u32>,
    /// The hypervisor cluster's name (`topology.kubernetes.io/region` of new nodes).
    pub region: Option<String>,
}

fn scaled(total: u64, reserved: u64, ratio: f64) -> u64 {
    let v = total.saturating_sub(reserved) as f64 * ratio;
    if v.is_finite() && v > 0.0 {
        v.min(u64::MAX as f64) as u64
    } else {
        0
    }
}

impl Host {
    /// vCPUs × 1000 the host may give guests under `o`.
    pub fn cpu_capacity(&self, o: &Overcommit) -> u64 {
        scaled(self.cpu_milli, self.reserved_cpu_milli, o.cpu)
    }
    pub fn memory_capacity(&self, o: &Overcommit) -> u64 {
        scaled(self.memory, self.reserved_memory, o.memory)
    }
}

impl GroupHosts {
    /// Why host `i` cannot take one more VM of `vm`, or `None` when it can.
    pub fn why_not(&self, i: usize, vm: VmSize) -> Option<String> {
        let h = self.hosts.get(i)?;
        let o = &self.overcommit;
        match h.state {
            HostState::Online => {}
            HostState::Offline => return Some(format!("{} is offline", h.name)),
            HostState::Maintenance => return Some(format!("{} is in maintenance", h.name)),
        }
        if !h.template {
            return Some(format!(
                "{} has no copy of the template (its copies are on other hosts' local storage)",
                h.name
            ));
        }
        if let Some(max) = self.max_per_host {
            if h.group_vms >= max {
                return Some(format!(
                    "{} has {} VM(s) of the group (maxPerHost {max})",
                    h.name, h.group_vms
                ));
            }
        }
        let cpu_cap = h.cpu_capacity(o);
        if h.cpu_taken_milli.saturating_add(vm.cpu_milli) > cpu_cap {
            return Some(format!(
                "{} CPU full ({} of {} vCPUs configured, {} CPUs × {} overcommit after reserve)",
                h.name,
                fmt_cpu(h.cpu_taken_milli),
                fmt_cpu(cpu_cap),
                fmt_cpu(h.cpu_milli),
                o.cpu
            ));
        }
        let mem_cap = h.memory_capacity(o);
        if h.memory_taken.saturating_add(vm.memory) > mem_cap {
            return Some(format!(
                "{} memory full ({} of {} configured, {} × {} overcommit after reserve)",
                h.name,
                fmt_gib(h.memory_taken),
                fmt_gib(mem_cap),
                fmt_gib(h.memory),
                o.memory
            ));
        }
        None
    }

    /// The host the next VM of `vm` goes to: among the hosts that take it, the one with
    /// the fewest VMs of the group (spread), then the tightest fit (best fit by CPU and
    /// memory: the least capacity left over), then by name.
    pub fn choose(&self, vm: VmSize) -> Option<usize> {
        let o = &self.overcommit;
        let left = |h: &Host| {
            let frac = |taken: u64, cap: u64| {
                if cap == 0 {
                    0.0
                } else {
                    1.0 - (taken as f64 / cap as f64).min(1.0)
                }
            };
            frac(
                h.cpu_taken_milli.saturating_add(vm.cpu_milli),
                h.cpu_capacity(o),
            ) + frac(
                h.memory_taken.saturating_add(vm.memory),
                h.memory_capacity(o),
            )
        };
        (0..self.hosts.len())
            .filter(|&i| self.why_not(i, vm).is_none())
            .min_by(|&a, &b| {
                let (ha, hb) = (&self.hosts[a], &self.hosts[b]);
                ha.group_vms
                    .cmp(&hb.group_vms)
                    .then(left(ha).total_cmp(&left(hb)))
                    .then(ha.name.cmp(&hb.name))
            })
    }

    /// Records one more VM of `vm` of the group on host `i`.
    pub fn place(&mut self, i: usize, vm: VmSize) {
        if let Some(h) = self.hosts.get_mut(i) {
            h.cpu_taken_milli = h.cpu_taken_milli.saturating_add(vm.cpu_milli);
            h.memory_taken = h.memory_taken.saturating_add(vm.memory);
            h.group_vms += 1;
        }
    }

    /// The hosts the next (up to) `n` VMs of `vm` go to, in order; shorter when the
    /// hosts are full.
    pub fn plan(&self, vm: VmSize, n: u32) -> Vec<String> {
        let mut h = self.clone();
        let mut out = Vec::new();
        while (out.len() as u32) < n {
            let Some(i) = h.choose(vm) else { break };
            h.place(i, vm);
            out.push(h.hosts[i].name.clone());
        }
        out
    }

    /// Host `name` by name, if it is one of the group's.
    pub fn index(&self, name: &str) -> Option<usize> {
        self.hosts.iter().position(|h| h.name == name)
    }

    /// Why no host takes one more VM of `vm`: each host's reason.
    pub fn full_reason(&self, vm: VmSize) -> String {
        if self.hosts.is_empty() {
            return "no host is allowed".into();
        }
        let why: Vec<String> = (0..self.hosts.len())
            .filter_map(|i| self.why_not(i, vm))
            .collect();
        why.join("; ")
    }
}

fn fmt_cpu(milli: u64) -> String {
    if milli.is_multiple_of(1000) {
        (milli / 1000).to_string()
    } else {
        format!("{:.1}", milli as f64 / 1000.0)
    }
}

fn fmt_gib(bytes: u64) -> String {
    let gib = bytes as f64 / f64::from(1u32 << 30);
    if (gib - gib.round()).abs() < 0.05 {
        format!("{} GiB", gib.round())
    } else {
        format!("{gib:.1} GiB")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn host(name: &str, cpus: u64, mem_gib: u64) -> Host {
        Host {
            name: name.into(),
            state: HostState::Online,
            cpu_milli: cpus * 1000,
            memory: mem_gib * GIB,
            cpu_taken_milli: 0,
            memory_taken: 0,
            reserved_cpu_milli: 0,
            reserved_memory: 0,
            group_vms: 0,
            template: true,
        }
    }

    fn hosts(hosts: Vec<Host>, cpu: f64, memory: f64, max: Option<u32>) -> GroupHosts {
        GroupHosts {
            hosts,
            overcommit: Overcommit { cpu, memory },
            max_per_host: max,
            region: None,
        }
    }

    const VM: VmSize = VmSize {
        cpu_milli: 4000,
        memory: 8 * GIB,
    };

    #[test]
    fn capacity_is_ratio_times_what_is_left_after_the_reserve() {
        // 16 CPUs, 2 reserved, ×4: 56 vCPUs; 64 GiB, 8 reserved, ×1: 56 GiB.
        let mut h = host("a", 16, 64);
        h.reserved_cpu_milli = 2000;
        h.reserved_memory = 8 * GIB;
        let g = hosts(vec![h], 4.0, 1.0, None);
        // Memory binds: 7 VMs of 8 GiB (56 GiB), CPU would take 14.
        assert_eq!(g.plan(VM, 100).len(), 7);
        let g = hosts(g.hosts.clone(), 1.0, 2.0, None);
        // CPU binds: 14 vCPUs / 4 = 3 VMs.
        assert_eq!(g.plan(VM, 100).len(), 3);
        assert!(g.full_reason(VM).is_empty());
        let mut full = g.clone();
        for _ in 0..3 {
            let i = full.choose(VM).expect("room");
            full.place(i, VM);
        }
        assert_eq!(full.choose(VM), None);
        assert!(
            full.full_reason(VM).contains("CPU full"),
            "{}",
            full.full_reason(VM)
        );
    }

    #[test]
    fn spread_first_then_best_fit_and_max_per_host_is_hard() {
        let mut big = host("big", 64, 256);
        big.memory_taken = 8 * GIB;
        let mut small = host("small", 16, 64);
        small.memory_taken = 40 * GIB;
        let g = hosts(vec![big.clone(), small.clone()], 4.0, 1.0, None);
        // Equal VM counts: the tighter fit (small: 24 GiB left) first, then the other.
        assert_eq!(g.plan(VM, 2), vec!["small", "big"]);
        // Balanced until small is full (3 VMs of 8 GiB from 24 GiB free), then big.
        let all = g.plan(VM, 100);
        assert_eq!(all.iter().filter(|h| *h == "small").count(), 3);
        assert_eq!(all.iter().filter(|h| *h == "big").count(), 31);
        let g = hosts(vec![big, small], 4.0, 1.0, Some(2));
        let all = g.plan(VM, 100);
        assert_eq!(all.len(), 4, "{all:?}");
        assert!(g.clone().full_reason(VM).is_empty());
    }

    #[test]
    fn offline_maintenance_and_hosts_without_the_template_are_skipped() {
        let mut a = host("a", 8, 32);
        a.state = HostState::Offline;
        let mut b = host("b", 8, 32);
        b.state = HostState::Maintenance;
        let mut c = host("c", 8, 32);
        c.template = false;
        let d = host("d", 8, 32);
        let g = hosts(vec![a, b, c, d], 4.0, 1.0, None);
        assert!(g.plan(VM, 10).iter().all(|h| h == "d"));
        let mut gone = g.clone();
        gone.hosts.pop();
        let why = gone.full_reason(VM);
        for f in ["a is offline", "b is in maintenance", "c has no copy"] {
            assert!(why.contains(f), "{why}");
        }
    }

    /// The worked example of docs/proxmox.md, number for number.
    #[test]
    fn the_documented_worked_example_holds() {
        let mut pve1 = host("pve1", 32, 256);
        pve1.cpu_taken_milli = 20_000;
        pve1.memory_taken = 64 * GIB;
        let mut pve2 = host("pve2", 16, 64);
        pve2.cpu_taken_milli = 8000;
        pve2.memory_taken = 32 * GIB;
        let mut pve3 = host("pve3", 16, 64);
        pve3.state = HostState::Maintenance;
        let mut hs = vec![pve1, pve2, pve3];
        for h in &mut hs {
            h.reserved_cpu_milli = 2000;
            h.reserved_memory = 8 * GIB;
        }
        let g = hosts(hs, 3.0, 1.0, Some(4));
        assert_eq!(
            g.plan(VM, 10),
            vec!["pve2", "pve1", "pve2", "pve1", "pve2", "pve1", "pve1"]
        );
    }
}
