"""End to end: the local lab's real control plane with kwok nodes comes up, runs workloads, and goes away cleanly."""

import json
import os
import pathlib
import subprocess
import sys
import time

import pytest
import yaml
from kubernetes import client, config

ROOT = pathlib.Path(__file__).resolve().parents[2]
LAB = [sys.executable, str(ROOT / "tools" / "lab" / "lab.py")]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    labdir = tmp_path_factory.mktemp("lab") / "state"
    env = dict(os.environ, GPUFLEET_LAB_DIR=str(labdir))
    subprocess.run(LAB + ["up"], env=env, check=True)
    state = json.loads((labdir / "state.json").read_text())
    try:
        yield {"dir": labdir, "env": env, "state": state,
               "api": config.new_client_from_config(str(labdir / "kubeconfig"))}
    finally:
        subprocess.run(LAB + ["down"], env=env, check=True)
        # Nothing the lab started may survive it, and its state is gone.
        assert not [pid for pid in state["pids"].values() if os.path.exists("/proc/%d" % pid)]
        assert not labdir.exists()


def test_nodes_from_the_inventory(lab):
    nodes = {n.metadata.name: n for n in client.CoreV1Api(lab["api"]).list_node().items}
    wanted = yaml.safe_load((ROOT / "tools" / "lab" / "nodes.yml").read_text())["nodes"]
    assert sorted(nodes) == sorted(n["name"] for n in wanted)
    for name in ("master0", "master1", "master2"):
        assert any(t.key == "node-role.kubernetes.io/control-plane" for t in nodes[name].spec.taints)
    assert nodes["rig01"].metadata.labels["gpufleet.io/gpu-model"] == "rtx4090"
    assert nodes["rig01"].status.allocatable["cpu"] == "32"
    for node in nodes.values():
        assert any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)


def test_rbac_is_on(lab):
    # A service account without bindings must be refused: the apiserver runs with RBAC, not AlwaysAllow.
    review = client.AuthorizationV1Api(lab["api"]).create_subject_access_review({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": "system:serviceaccount:default:nobody", "resourceAttributes": {"verb": "list", "resource": "nodes"}},
    })
    assert review.status.allowed is False


def test_deployment_pods_run_and_stay_running(lab):
    apps, core = client.AppsV1Api(lab["api"]), client.CoreV1Api(lab["api"])
    apps.create_namespaced_deployment("default", {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "holder"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "holder"}}, "template": {
            "metadata": {"labels": {"app": "holder"}},
            "spec": {"nodeName": "rig02", "tolerations": [{"operator": "Exists"}],
                     "containers": [{"name": "c", "image": "registry.invalid/none:1"}]}}},
    })
    deadline = time.time() + 60
    phases = []
    while time.time() < deadline:
        phases = [p.status.phase for p in core.list_namespaced_pod("default", label_selector="app=holder").items]
        if phases.count("Running") == 3:
            break
        time.sleep(1)
    assert phases.count("Running") == 3, phases
    time.sleep(3)
    assert [p.status.phase for p in core.list_namespaced_pod("default", label_selector="app=holder").items] \
        == ["Running"] * 3


def vgpu_pod_spec(memory_mib=8000, scheduler_name="volcano"):
    spec = {
        "tolerations": [{"operator": "Exists"}],
        "containers": [{"name": "cuda", "image": "registry.invalid/cuda:1",
                        "resources": {"limits": {"volcano.sh/vgpu-number": "1",
                                                 "volcano.sh/vgpu-memory": str(memory_mib)}}}],
    }
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


def test_gpu_nodes_registered_by_the_emulated_plugin(lab):
    nodes = {n.metadata.name: n for n in client.CoreV1Api(lab["api"]).list_node().items}
    for name, memory in (("rig01", 24564), ("rig02", 16376)):
        alloc = nodes[name].status.allocatable
        assert alloc["volcano.sh/vgpu-number"] == "10"
        assert alloc["volcano.sh/vgpu-memory"] == str(5 * memory)
        assert alloc["volcano.sh/vgpu-cores"] == "500"
        register = nodes[name].metadata.annotations["volcano.sh/node-vgpu-register"]
        assert register.count(",2,%d," % memory) == 5
