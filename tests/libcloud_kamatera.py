"""An independent client against the simulated Kamatera API: Apache Libcloud's Kamatera
driver (PyPI `apache-libcloud`) runs list -> create -> list -> power off/on -> reboot ->
terminate, the way a user of Libcloud would. Driven by tests/kamatera_libcloud.rs, which
starts the simulator on 127.0.0.1 (plain HTTP) and passes it in the environment:

    KAMATERA_SIM_HOST, KAMATERA_SIM_PORT, KAMATERA_CLIENT_ID, KAMATERA_SECRET

Exits 0 and prints `libcloud kamatera cycle: ok` when every step behaved; any failure is
an exception (exit status 1) naming the step.
"""

import os
import sys

from libcloud.compute.base import NodeAuthSSHKey
from libcloud.compute.providers import get_driver
from libcloud.compute.types import NodeState, Provider


def check(ok, what):
    if not ok:
        raise AssertionError(what)


def main():
    cls = get_driver(Provider.KAMATERA)
    # The simulator speaks plain HTTP on loopback: point the driver there instead of
    # cloudcli.cloudwm.com over HTTPS.
    driver = cls(
        os.environ["KAMATERA_CLIENT_ID"],
        os.environ["KAMATERA_SECRET"],
        secure=False,
        host=os.environ["KAMATERA_SIM_HOST"],
        port=int(os.environ["KAMATERA_SIM_PORT"]),
    )
    # Only the polling pace changes (the driver sleeps 2 s between queue polls); every
    # request stays the driver's own.
    wait = driver.ex_wait_command
    driver.ex_wait_command = lambda command_id, **kw: wait(
        command_id, poll_interval_seconds=0.1, **kw
    )

    locations = {loc.id: loc for loc in driver.list_locations()}
    check("EU" in locations, f"datacenters: {sorted(locations)}")
    eu = locations["EU"]
    check(eu.country == "The Netherlands", f"EU country: {eu.country}")

    capabilities = driver.ex_list_capabilities(eu)
    cpu_types = {t["id"]: t for t in capabilities["cpuTypes"]}
    check("B" in cpu_types and 2 in cpu_types["B"]["cpuCores"], f"cpu types: {cpu_types}")

    sizes = {s.id: s for s in driver.list_sizes(eu)}
    check("small" in sizes, f"sizes: {sorted(sizes)}")
    size = sizes["small"]

    images = [i for i in driver.list_images(eu) if "24.04" in i.name]
    check(len(images) == 1, f"images: {[i.name for i in driver.list_images(eu)]}")
    image = images[0]
    check(image.id.startswith("EU:"), f"image id: {image.id}")

    name = "libcloud-cycle-1"
    node = driver.create_node(name=name, size=size, image=image, location=eu)
    check(node.name == name, f"created name (from the create log): {node.name}")
    check(node.state == NodeState.RUNNING, f"created state: {node.state}")
    check(len(node.id) > 5, f"created id: {node.id}")
    check(node.public_ips, f"public addresses: {node.public_ips}")
    check(len(node.extra.get("generated_password") or "") >= 10, "generated password")
    check(node.created_at is not None, "creation time from the queue")

    def listed():
        return {n.id: n for n in driver.list_nodes()}

    check(listed()[node.id].state == NodeState.RUNNING, "listed running")
    detailed = driver.list_nodes(ex_id=node.id)
    check(len(detailed) == 1 and detailed[0].name == name, f"details: {detailed}")

    check(driver.stop_node(node), "power off")
    check(listed()[node.id].state == NodeState.STOPPED, "listed stopped")
    check(driver.start_node(node), "power on")
    check(listed()[node.id].state == NodeState.RUNNING, "listed running again")
    check(driver.reboot_node(node), "reboot")
    check(listed()[node.id].state == NodeState.RUNNING, "running after reboot")

    # A second server with an SSH key and no password (what NodeAuthSSHKey sends), found
    # again by a name regular expression.
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGxpYmNsb3VkLWtleS1vbmx5LXRlc3Qta2V5 libcloud@test"
    keyed = driver.create_node(
        name="libcloud-key-only", size=size, image=image, location=eu, auth=NodeAuthSSHKey(key)
    )
    check(keyed.state == NodeState.RUNNING, f"key-only state: {keyed.state}")
    check(keyed.extra.get("generated_password") is None, "no password generated")
    both = {n.name for n in driver.list_nodes(ex_name_regex="libcloud-.*")}
    check(both == {name, "libcloud-key-only"}, f"regex libcloud-.*: {both}")
    one = [n.name for n in driver.list_nodes(ex_name_regex="libcloud-key-.*")]
    check(one == ["libcloud-key-only"], f"regex libcloud-key-.*: {one}")
    check(driver.destroy_node(keyed), "terminate the key-only server")

    check(driver.destroy_node(node), "terminate")
    check(node.id not in listed(), "gone after terminate")
    print("libcloud kamatera cycle: ok")


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # the Rust test shows this output
        print(f"libcloud kamatera cycle failed: {type(e).__name__}: {e}", file=sys.stderr)
        raise
