"""Roles volcano and device_plugin against the lab: the real apiserver, Volcano's chart and processes, the emulator."""

import time

from kubernetes import client

from helpers import ROOT, failed_messages, run_playbook
from labkit import GPU_NODES, vgpu_pod_spec, wait_for

PLAYBOOK = ROOT / "playbooks" / "cluster.yml"
INVENTORY = str(ROOT / "inventories" / "lab")


def converge(lab, *args):
    rc, out, err = run_playbook(PLAYBOOK, *args, env=lab["env"], inventory=INVENTORY)
    return rc, out, err


def changed(out):
    return out["stats"]["localhost"]["changed"]


def allocatable(lab, node, resource="volcano.sh/vgpu-number"):
    return client.CoreV1Api(lab["api"]).read_node(node).status.allocatable.get(resource)


def test_converge_then_nothing_to_change(lab):
    rc, out, err = converge(lab)
    assert rc == 0, (failed_messages(out), err[-2000:])
    assert changed(out) > 0
    # Per node from group vars: 5 GPUs x split 2; gpuMemoryFactor auto = 3 (5 x 24564 MiB > kubelet's 60000 limit).
    for node, memory in (("rig01", 24564), ("rig02", 16376)):
        assert allocatable(lab, node) == "10"
        assert allocatable(lab, node, "volcano.sh/vgpu-memory") == str(5 * (memory // 3))
    rc, out, err = converge(lab)
    assert rc == 0 and changed(out) == 0, failed_messages(out)
    rc, out, err = converge(lab, "--check", "--diff")
    assert rc == 0 and changed(out) == 0, failed_messages(out)


def test_split_change_is_registered(lab):
    override = '{"device_plugin_node_overrides": {"rig02": {"split": 3}}}'
    try:
        rc, out, err = converge(lab, "-e", override)
        assert rc == 0, (failed_messages(out), err[-2000:])
        assert (allocatable(lab, "rig01"), allocatable(lab, "rig02")) == ("10", "15")
    finally:
        rc, out, err = converge(lab)
        assert rc == 0, failed_messages(out)
    assert [allocatable(lab, n) for n in GPU_NODES] == ["10", "10"]


def test_admission_namespace_gets_volcano(lab):
    rc, out, err = converge(lab)
    assert rc == 0, failed_messages(out)
    core = client.CoreV1Api(lab["api"])
    pod = core.create_namespaced_pod("mljobs", {"metadata": {"name": "plain"}, "spec": {
        "containers": [{"name": "c", "image": "registry.invalid/none:1"}]}})
    try:
        assert pod.spec.scheduler_name == "volcano"
    finally:
        core.delete_namespaced_pod("plain", "mljobs")


def placements(lab, namespace, count):
    """Create `count` one-vGPU pods (4 CPUs each) one after another; return the node each was bound to."""
    core = client.CoreV1Api(lab["api"])
    nodes = []
    for index in range(count):
        name = "p%d" % index
        spec = vgpu_pod_spec(1000)
        spec["containers"][0]["resources"]["requests"] = {"cpu": "4"}
        core.create_namespaced_pod(namespace, {"metadata": {"name": name}, "spec": spec})
        wait_for(lambda n=name: bool(core.read_namespaced_pod(n, namespace).spec.node_name), 60, "%s bound" % name)
        nodes.append(core.read_namespaced_pod(name, namespace).spec.node_name)
    return nodes


def test_scheduler_configuration_in_effect(lab):
    """The deployed scheduler configuration is the one that schedules: binpack weighted on vGPUs piles pods onto
    one node, binpack off lets nodeorder's least-requested spread them. (Volcano 1.10's deviceshare ignores its own
    SchedulePolicy in node ordering - it computes the score and returns 0 - so the lab shows it through binpack.)"""
    core = client.CoreV1Api(lab["api"])
    configs = {"spread": '{"volcano_binpack": {"weight": 0}}',
               "pack": '{"volcano_binpack": {"weight": 20, "resources": {"volcano.sh/vgpu-number": 10}}}'}
    results = {}
    try:
        for name, extra in configs.items():
            rc, out, err = converge(lab, "-e", extra)
            assert rc == 0, (failed_messages(out), err[-2000:])
            time.sleep(3)  # the lab restarts its scheduler on the new conf
            namespace = "placement-%s" % name
            core.create_namespace({"metadata": {"name": namespace}})
            try:
                results[name] = placements(lab, namespace, 4)
            finally:
                core.delete_namespace(namespace)
                wait_for(lambda ns=namespace: not core.list_namespaced_pod(ns).items, 60, "pods of %s gone" % namespace)
    finally:
        converge(lab)
    assert len(set(results["pack"])) == 1, results
    assert sorted(results["spread"]) == sorted(GPU_NODES * 2), results


def test_plugins_before_1_12_get_one_daemonset_per_split(lab):
    """Plugin v1.11 ignores the node ConfigMap: the role deploys the article's workaround instead, one DaemonSet per
    split count on labelled nodes, and the (emulated) v1.11 plugin registers what its flags say."""
    apps = client.AppsV1Api(lab["api"])
    extra = '{"device_plugin_version": "v1.11.0", "device_plugin_node_overrides": {"rig02": {"split": 3}}}'
    try:
        rc, out, err = converge(lab, "-e", extra)
        assert rc == 0, (failed_messages(out), err[-2000:])
        ours = sorted(d.metadata.name for d in apps.list_namespaced_daemon_set(
            "kube-system", label_selector="gpufleet.io/component=device-plugin").items)
        assert ours == ["volcano-device-plugin-split-2", "volcano-device-plugin-split-3"]
        assert (allocatable(lab, "rig01"), allocatable(lab, "rig02")) == ("10", "15")
    finally:
        rc, out, err = converge(lab)
        assert rc == 0, failed_messages(out)
    assert [d.metadata.name for d in apps.list_namespaced_daemon_set(
        "kube-system", label_selector="gpufleet.io/component=device-plugin").items] == ["volcano-device-plugin"]
    assert [allocatable(lab, n) for n in GPU_NODES] == ["10", "10"]
