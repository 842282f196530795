"""An independent client against the simulated Proxmox VE: proxmoxer (Debian's
python3-proxmoxer) with API-token authentication over HTTPS, verifying the simulator's
certificate, lists the hosts and VMs, clones the template, changes and reads the clone's
config, and destroys it, the way a user's script would. Driven by tests/proxmoxer.rs:

    PVE_SIM_HOST, PVE_SIM_PORT, PVE_SIM_CA, PVE_USER, PVE_TOKEN_NAME, PVE_TOKEN_VALUE

Prints `proxmoxer cycle: ok` when every step behaved; any failure is an exception.
"""

import os
import sys
import time

from proxmoxer import ProxmoxAPI


def check(ok, what):
    if not ok:
        raise AssertionError(what)


def wait(api, node, upid):
    for _ in range(200):
        status = api.nodes(node).tasks(upid).status.get()
        if status["status"] == "stopped":
            check(status.get("exitstatus") == "OK", f"task {upid}: {status}")
            return
        time.sleep(0.05)
    raise AssertionError(f"task {upid} did not finish")


def main():
    api = ProxmoxAPI(
        os.environ["PVE_SIM_HOST"],
        port=int(os.environ["PVE_SIM_PORT"]),
        user=os.environ["PVE_USER"],
        token_name=os.environ["PVE_TOKEN_NAME"],
        token_value=os.environ["PVE_TOKEN_VALUE"],
        verify_ssl=os.environ["PVE_SIM_CA"],
    )
    check(api.version.get()["release"], "version")
    nodes = sorted(n["node"] for n in api.nodes.get())
    check(nodes == ["pve1", "pve2", "pve3"], f"nodes: {nodes}")
    vms = api.nodes("pve1").qemu.get()
    check([v["vmid"] for v in vms] == [9000], f"pve1 VMs: {vms}")
    check(vms[0].get("template") == 1, f"template flag: {vms[0]}")

    newid = int(api.cluster.nextid.get())
    upid = api.nodes("pve1").qemu(9000).clone.post(newid=newid, name="proxmoxer-clone")
    wait(api, "pve1", upid)
    api.nodes("pve1").qemu(newid).config.put(cores=4, memory=2048, ciuser="core")
    config = api.nodes("pve1").qemu(newid).config.get()
    check(config["cores"] == 4, f"cores is a number: {config.get('cores')!r}")
    check(config["ciuser"] == "core", f"ciuser: {config}")
    check(config["name"] == "proxmoxer-clone", f"name: {config}")
    check(len(config["digest"]) == 40, f"digest: {config}")
    status = api.nodes("pve1").qemu(newid).status.current.get()
    check(status["status"] == "stopped", f"status: {status}")
    resources = api.cluster.resources.get(type="vm")
    check(any(r["vmid"] == newid for r in resources), f"resources: {resources}")

    wait(api, "pve1", api.nodes("pve1").qemu(newid).delete())
    check(
        all(v["vmid"] != newid for v in api.nodes("pve1").qemu.get()), "gone after destroy"
    )
    print("proxmoxer cycle: ok")


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # the Rust test shows this output
        print(f"proxmoxer cycle failed: {type(e).__name__}: {e}", file=sys.stderr)
        raise
