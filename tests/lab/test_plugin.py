"""The real volcano-vgpu-device-plugin v1.12.0 in the lab: its binary on the fake NVML, behind kubelet's own device
manager. What the device_plugin role predicts about it, and what the lab's stand-in for large fleets emulates, is
checked here against the binary."""

import datetime
import json
import pathlib
import re
import subprocess
import time

import yaml
from kubernetes import client

from ansible_collections.gpufleet.vgpu.plugins.module_utils import _vgpu_registration
from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _vgpu_plugin as role_reading
from harness import fake_nvml
from labkit import GPU_NODES, LAB_BIN, ROOT, allocatable, children, pod_logs, restart_daemonset, wait_for

RESOURCES = ("volcano.sh/vgpu-number", "volcano.sh/vgpu-memory", "volcano.sh/vgpu-cores")
REGISTER = "volcano.sh/node-vgpu-register"
HANDSHAKE = "volcano.sh/node-vgpu-handshake"


def fixture_gpus(node):
    """The GPUs the fake NVML of `node` reports: [{uuid, index, model, memory_mib}]."""
    flat = fake_nvml.flatten(json.loads((ROOT / "tests" / "fixtures" / "nvml" / ("%s.json" % node)).read_text()))
    values = dict(line.split(" ", 1) for line in flat.splitlines() if line and not line.startswith("#"))
    return [{"uuid": values["gpu.%d.uuid" % i], "index": i, "model": values["gpu.%d.name" % i],
             "memory_mib": int(values["gpu.%d.memory_total_bytes" % i]) // (1024 * 1024)}
            for i in range(int(values["count"]))]


def registered(lab, node):
    found = client.CoreV1Api(lab["api"]).read_node(node)
    annotations = found.metadata.annotations or {}
    entries = sorted(e for e in annotations.get(REGISTER, "").split(":") if e)
    # The handshake's time differs; its layout must not (the volcano role's wait reads it).
    handshake = re.sub(r"\d+", "9", annotations.get(HANDSHAKE, "missing"))
    return entries, handshake, {r: (found.status.allocatable or {}).get(r) for r in RESOURCES}


def set_device_config(lab, **changes):
    core = client.CoreV1Api(lab["api"])
    text = core.read_namespaced_config_map("volcano-vgpu-device-config", "kube-system").data["device-config.yaml"]
    config = yaml.safe_load(text)
    config["nvidia"].update(changes)
    core.patch_namespaced_config_map("volcano-vgpu-device-config", "kube-system",
                                     {"data": {"device-config.yaml": yaml.safe_dump(config)}})


def test_fake_nvml_answers_every_call_the_binaries_make(plugin):
    """Every NVML symbol the built plugin and monitor reference is exported by the fake library, and none of the
    calls they made in this lab hit a stub (a missing symbol crashes a Go binary at call time)."""
    wanted = set()
    for binary in ("vgpu", "vgpu-monitor"):
        out = subprocess.run(["nm", "-D", "--undefined-only", str(LAB_BIN / "hami" / binary)],
                             capture_output=True, text=True, check=True).stdout
        wanted |= {line.split()[-1] for line in out.splitlines() if line.split()[-1].startswith("nvml")}
    assert wanted == set((ROOT / "tests" / "harness" / "fake-nvml" / "nvml-symbols.txt").read_text().split())
    exported = subprocess.run(["nm", "-D", "--defined-only", str(fake_nvml.build())], capture_output=True, text=True,
                              check=True).stdout
    assert wanted <= {line.split()[-1] for line in exported.splitlines()}
    logs = pod_logs(plugin)
    assert logs, "no plugin container logs"
    assert not {path: text for path, text in logs.items() if "unimplemented" in text}


def test_role_and_kubelet_agree_on_gpu_memory_factor_and_the_device_list_limit(plugin):
    """gpuMemoryFactor 1 makes rig01's and rig02's memory lists larger than the 4 MiB kubelet reads: the real device
    manager reports vgpu-memory 0, as the role predicts (and refuses). Factor 2 fits both, 3 is the fixture's."""
    try:
        for factor in (1, 2):
            set_device_config(plugin, gpuMemoryFactor=factor)
            restart_daemonset(plugin, stamp="factor-%d" % factor)
            for node in GPU_NODES:
                settings = {"split": 2, "memory_factor": factor, "core_scaling": 1.0, "mode": "hami-core",
                            "filter_uuid": [], "filter_index": []}
                dummy, predicted = role_reading.registration(fixture_gpus(node), settings)
                want = {r: str(v) for r, v in predicted.items()}
                wait_for(lambda n=node, w=want: registered(plugin, n)[2] == w or registered(plugin, n)[2], 120,
                         "%s registered with gpuMemoryFactor %d as the role predicts %s" % (node, factor, want))
            if factor == 1:
                assert all(allocatable(plugin, n, "volcano.sh/vgpu-memory") == "0" for n in GPU_NODES)
                logs = (plugin["dir"] / "logs" / "lab-devicemanager-rig01.log").read_text()
                assert "received message larger than max" in logs
    finally:
        set_device_config(plugin, gpuMemoryFactor=3)
        restart_daemonset(plugin, stamp="factor-3")
        wait_for(lambda: [allocatable(plugin, n, "volcano.sh/vgpu-memory") for n in GPU_NODES] == ["40940", "27290"],
                 120, "fixture factor 3 back")


def test_monitor_serves_host_gpu_series_on_9394(plugin):
    """The monitor container of each GPU node's plugin pod listens on :9394 in its pod and reports every GPU."""
    import urllib.request  # pylint: disable=import-outside-toplevel

    monitors = children(plugin)["plugin_monitors"]
    assert sorted(monitors) == sorted(GPU_NODES)
    for node, url in monitors.items():
        with urllib.request.urlopen(url + "/metrics", timeout=10) as response:  # noqa: S310 (lab loopback)
            text = response.read().decode()
        for gpu in fixture_gpus(node):
            assert 'HostGPUMemoryUsage{deviceidx="%d",deviceuuid="%s"' % (gpu["index"], gpu["uuid"]) in text


def test_a_critical_xid_takes_the_gpu_out_of_allocatable(plugin):
    """A GPU that falls off the bus (XID 79): the plugin's health check marks its devices unhealthy and kubelet's
    device manager drops them from allocatable; capacity keeps them. A plugin restart registers them again."""
    host = json.loads((plugin["dir"] / "lab.json").read_text())["hosts"]["rig01"]
    events = "/etc/gpufleet-fake-nvml/xid-events"
    subprocess.run(["podman", "exec", host, "sh", "-c", "echo '2 79' >> %s" % events], check=True)
    try:
        wait_for(lambda: allocatable(plugin, "rig01") == "8" or allocatable(plugin, "rig01"), 60,
                 "rig01's GPU 2 (2 vGPUs) out of allocatable")
        node = client.CoreV1Api(plugin["api"]).read_node("rig01")
        assert node.status.capacity["volcano.sh/vgpu-number"] == "10"
        assert node.status.allocatable["volcano.sh/vgpu-memory"] == str(4 * 8188)
        assert node.status.allocatable["volcano.sh/vgpu-cores"] == "400"
    finally:
        subprocess.run(["podman", "exec", host, "rm", "-f", events], check=True)
        restart_daemonset(plugin, stamp="xid-cleared")
        wait_for(lambda: allocatable(plugin, "rig01") == "10", 120, "rig01 healthy again after a plugin restart")


def test_emulated_plugin_matches_the_real_one(plugin):
    """The stand-in for nodes without a host (the 1000-node benchmark fleet) registers a twin of rig01 - same GPUs,
    same deployed configuration - exactly as the real binary registers rig01: node annotation and allocatable,
    with the fixture's configuration and with a node entry that changes split, core scaling and devices."""
    core = client.CoreV1Api(plugin["api"])
    twin = "rig01-twin"
    gpus = [{k: g[k] for k in ("uuid", "model", "memory_mib")} for g in fixture_gpus("rig01")]
    core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": twin, "labels": {"gpufleet.io/gpu": "true", "kubernetes.io/hostname": twin, "type": "kwok"},
        "annotations": {"kwok.x-k8s.io/node": "fake", "lab.gpufleet.io/gpus": json.dumps({"gpus": gpus})}}})
    capacity = {"cpu": "32", "memory": "256Gi", "pods": "110"}
    core.patch_node_status(twin, {"status": {"capacity": capacity, "allocatable": capacity}})
    try:
        for name, node_config in (("fixture", {"nodeconfig": []}), ("node entry", {"nodeconfig": [
                dict(name=n, devicesplitcount=3, devicecorescaling=2, operatingmode="hami-core",
                     filterdevices={"uuid": [], "index": [1]}) for n in ("rig01", twin)]})):
            core.patch_namespaced_config_map("volcano-vgpu-node-config", "kube-system",
                                             {"data": {"config.json": json.dumps(node_config)}})
            restart_daemonset(plugin, stamp="twin-%s" % name)
            want_number = "10" if name == "fixture" else "12"
            wait_for(lambda w=want_number: allocatable(plugin, "rig01") == w and allocatable(plugin, twin) == w
                     or (allocatable(plugin, "rig01"), allocatable(plugin, twin)), 120, "both registered (%s)" % name)
            time.sleep(11)  # one more node status period: everything the real plugin registers is written
            assert registered(plugin, twin) == registered(plugin, "rig01"), name
    finally:
        core.delete_node(twin)
        core.patch_namespaced_config_map("volcano-vgpu-node-config", "kube-system",
                                         {"data": {"config.json": json.dumps({"nodeconfig": []})}})
        restart_daemonset(plugin, stamp="twin-done")
        wait_for(lambda: all(allocatable(plugin, n) == "10" for n in GPU_NODES), 120, "both nodes back at split 2")


def test_role_reads_the_real_plugins_handshake(plugin):
    """The volcano role's wait compares the handshake time with the scheduler's start: it must parse what the binary
    writes, as a time within the plugin's 30 s period of now."""
    for node in GPU_NODES:
        value = client.CoreV1Api(plugin["api"]).read_node(node).metadata.annotations[HANDSHAKE]
        reported = _vgpu_registration.handshake_time(value)
        assert reported is not None, value
        age = (datetime.datetime.now(datetime.timezone.utc) - reported).total_seconds()
        assert -5 < age < 45, (value, age)


def test_lab_runs_the_plugin_version_the_role_deploys(plugin):
    lab_json = json.loads((plugin["dir"] / "lab.json").read_text())
    role = yaml.safe_load((ROOT / "roles" / "device_plugin" / "defaults" / "main.yml").read_text())
    assert lab_json["plugin_version"] == role["device_plugin_version"]
    assert pathlib.Path(lab_json["kubectl"]).exists()
