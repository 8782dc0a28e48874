"""Helpers of the lab's end-to-end tests."""

import json
import os
import pathlib
import time

import pytest
import yaml
from kubernetes import client

ROOT = pathlib.Path(__file__).resolve().parents[2]
LAB_BIN = pathlib.Path(os.environ.get("GPUFLEET_CACHE", "/var/cache/gpufleet")) / "lab-bin"
GPU_NODES = ("rig01", "rig02")


def vgpu_pod_spec(memory_units=2000, scheduler_name="volcano"):
    """One vGPU; memory in request units (gpuMemoryFactor 3 in the fixture: 2000 units = 6000 MiB)."""
    spec = {"containers": [{"name": "cuda", "image": "registry.invalid/cuda:1",
                            "resources": {"limits": {"volcano.sh/vgpu-number": "1",
                                                     "volcano.sh/vgpu-memory": str(memory_units)}}}]}
    if scheduler_name:
        spec["schedulerName"] = scheduler_name
    return spec


def wait_for(predicate, timeout, what):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        last = predicate()
        if last is True:
            return
        time.sleep(1)
    pytest.fail("%s not reached within %d s (last: %r)" % (what, timeout, last))


def children(lab):
    """The lab controller's state: Volcano's processes, the GPU nodes' device managers and plugin containers."""
    return json.loads((lab["dir"] / "children.json").read_text())


def cmdline(pid):
    """A process's arguments as it was started with them."""
    with open("/proc/%d/cmdline" % pid, "rb") as handle:
        return handle.read().decode().split("\0")


def pod_logs(lab, container=None):
    """{log path: text} of the containers the lab runs (the plugin and its monitor)."""
    return {str(path): path.read_text(errors="replace") for path in (lab["dir"] / "logs" / "pods").glob("*.log")
            if container is None or path.name.endswith("_%s.log" % container)}


def allocatable(lab, node, resource="volcano.sh/vgpu-number"):
    return client.CoreV1Api(lab["api"]).read_node(node).status.allocatable.get(resource)


def restart_daemonset(lab, name="volcano-device-plugin", namespace="kube-system", stamp=None):
    """A rollout of the DaemonSet (new pods read the configuration again, as after `kubectl rollout restart`)."""
    client.AppsV1Api(lab["api"]).patch_namespaced_daemon_set(name, namespace, {"spec": {"template": {"metadata": {
        "annotations": {"gpufleet.io/restarted": stamp or str(time.time())}}}}})


def nodes_file():
    return yaml.safe_load((ROOT / "tools" / "lab" / "nodes.yml").read_text())["nodes"]
