"""GPU nodes as podman test hosts: each GPU node of the lab is also a systemd container (the EL9-like test image),
prepared by tools/lab/hosts.yml like a freshly installed GPU server, so site.yml's node layers run against it under
the same name the cluster knows.

The lab's directory and its binaries are mounted read-only at their own paths: the node's kubelet parts
(kubelet.py) run the lab's binaries in the node's mount namespace and read the lab's kubeconfig there.
"""

import os
import shutil
import subprocess

from .paths import BIN, CACHE, HERE, LAB, ROOT, TAG, log, write_json

HOST_IMAGE = os.environ.get("GPUFLEET_LAB_HOST_IMAGE", "localhost/gpufleet-el9:9")
# The podman settings the test hosts need here (runc, ulimits), as `make` sets them.
os.environ.setdefault("CONTAINERS_CONF", str(ROOT / "tests" / "harness" / "containers.conf"))


def names(gpu_nodes):
    return {node: "gpufleet-lab-%s-%s" % (TAG, node) for node in gpu_nodes}


def available():
    return shutil.which("podman") is not None and subprocess.run(
        ["podman", "image", "exists", HOST_IMAGE], check=False).returncode == 0


def start(hosts, state):
    """Start and prepare the host containers ({node: container name}); False when podman or the image is missing."""
    if not available():
        log("no podman or no test-host image %s (make images): GPU nodes are not podman hosts" % HOST_IMAGE)
        return False
    state["containers"] = sorted(hosts.values())
    write_json(LAB / "state.json", state)
    for node, name in sorted(hosts.items()):
        subprocess.run(["podman", "rm", "-f", name], check=False, capture_output=True)
        subprocess.run(["podman", "run", "-d", "--name", name, "--hostname", node, "--systemd=always",
                        "-v", "%s:/srv/gpufleet-repo:ro" % (CACHE / "repos"),
                        "-v", "%s:%s:ro" % (LAB, LAB), "-v", "%s:%s:ro" % (BIN, BIN),
                        HOST_IMAGE, "/sbin/init"], check=True, capture_output=True)
    log("GPU hosts started: %s; preparing them (tools/lab/hosts.yml)" % ", ".join(sorted(hosts.values())))
    env = dict(os.environ, GPUFLEET_LAB_DIR=str(LAB), ANSIBLE_STDOUT_CALLBACK="ansible.builtin.minimal")
    result = subprocess.run(["ansible-playbook", "-i", str(ROOT / "inventories" / "lab"), str(HERE / "hosts.yml")],
                            env=env, capture_output=True, text=True, check=False)
    (LAB / "logs" / "hosts-prepare.log").write_text(result.stdout + result.stderr)
    if result.returncode != 0:
        raise SystemExit("preparing the GPU hosts failed; see %s" % (LAB / "logs" / "hosts-prepare.log"))
    state["hosts_ready"] = True
    write_json(LAB / "state.json", state)
    return True


def node_exporters(hosts):
    """{node: address:9100} of each host's node_exporter (on the podman network, reachable from this machine)."""
    found = {}
    for node, name in sorted(hosts.items()):
        address = subprocess.run(["podman", "inspect", "--format", "{{ .NetworkSettings.IPAddress }}", name],
                                 capture_output=True, text=True, check=True).stdout.strip()
        found[node] = "%s:9100" % address
    return found


def remove(state):
    for name in state.get("containers", []):
        subprocess.run(["podman", "rm", "-f", "-t", "0", name], check=False, capture_output=True)
        log("removed host %s" % name)
