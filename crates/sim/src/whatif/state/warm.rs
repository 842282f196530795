//! Warm pools in the what-if world: a warm VM exists stopped and costs no node-hours; a
//! start boots it in a third of its group's boot delay (a boot without the create or
//! clone), and the difference is counted as waiting the pool saved.

use super::{at, Event, State, Vm, VmStat};
use crate::model::{Server, ServerStatus};

/// Index of no [`VmStat`]: a warm VM runs no node.
const NO_STAT: usize = usize::MAX;

impl State {
    /// A stopped VM of `group` for its warm pool, made from `settings_hash`.
    pub fn create_warm_vm(
        &mut self,
        group: &str,
        provider: &str,
        settings_hash: &str,
    ) -> Option<Server> {
        let server = self.new_server(group, provider, true, Some(settings_hash))?;
        self.vms.insert(
            server.id.clone(),
            Vm {
                server: server.clone(),
                stat: NO_STAT,
            },
        );
        Some(server)
    }

    /// Starts warm VM `id`: it boots into a node like a new VM, sooner.
    pub fn start_warm_vm(&mut self, id: &str) -> Result<(), String> {
        let now = self.now;
        let Some(vm) = self.vms.get(id) else {
            return Err(format!("no VM {id}"));
        };
        if !vm.server.warm {
            return Err(format!("VM {id} is not in a warm pool"));
        }
        let group = vm.server.group.clone().unwrap_or_default();
        let boot = self.groups.get(&group).map_or(0, |g| g.boot_delay);
        let warm_boot = boot / 3;
        self.vm_stats.push(VmStat {
            group,
            created: now,
            ready: None,
            deleted: None,
        });
        let stat = self.vm_stats.len() - 1;
        if let Some(vm) = self.vms.get_mut(id) {
            vm.server.warm = false;
            vm.server.status = ServerStatus::Building;
            vm.server.created = at(now);
            vm.stat = stat;
        }
        self.counters.warm_starts += 1;
        self.counters.warm_wait_saved_ms += boot - warm_boot;
        self.push(now + warm_boot, Event::Boot(id.to_string()));
        Ok(())
    }

    /// Restarts running VM `id` (its Node was lost), recording the restart at `mark`: it
    /// is up again, its kubelet registering the node, in a third of its group's boot
    /// delay, as a warm start.
    pub fn restart_vm(&mut self, id: &str, mark: std::time::SystemTime) -> Result<(), String> {
        let now = self.now;
        let Some(vm) = self.vms.get_mut(id) else {
            return Err(format!("no VM {id}"));
        };
        if vm.server.status != ServerStatus::Active {
            return Err(format!("VM {id} is not running"));
        }
        vm.server.status = ServerStatus::Building;
        vm.server.restarted = Some(mark);
        let group = vm.server.group.clone().unwrap_or_default();
        let boot = self.groups.get(&group).map_or(0, |g| g.boot_delay);
        self.push(now + boot / 3, Event::Boot(id.to_string()));
        Ok(())
    }

    /// Stops running VM `id`, its fence mark at `mark`: its node, NotReady already,
    /// stays as it is; the VM stays in the cloud (stopped, as a person will find it).
    pub fn fence_vm(&mut self, id: &str, mark: std::time::SystemTime) -> Result<(), String> {
        let Some(vm) = self.vms.get_mut(id) else {
            return Err(format!("no VM {id}"));
        };
        if vm.server.status != ServerStatus::Active {
            return Err(format!("VM {id} is not running"));
        }
        vm.server.status = ServerStatus::Stopped;
        vm.server.fenced = Some(mark);
        Ok(())
    }

    /// Stops VM `id` into its group's pool (its node was deleted just before).
    pub fn park_vm(&mut self, id: &str) {
        let now = self.now;
        let Some(vm) = self.vms.get_mut(id) else {
            return;
        };
        if let Some(s) = self.vm_stats.get_mut(vm.stat) {
            s.deleted = Some(now);
        }
        vm.stat = NO_STAT;
        vm.server.status = ServerStatus::Stopped;
        vm.server.warm = true;
        let name = vm.server.name.clone();
        self.node_lost(&name, now);
    }
}
