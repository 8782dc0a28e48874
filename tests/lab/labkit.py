"""Helpers of the lab's end-to-end tests."""

import pathlib
import time

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
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


def nodes_file():
    return yaml.safe_load((ROOT / "tools" / "lab" / "nodes.yml").read_text())["nodes"]
