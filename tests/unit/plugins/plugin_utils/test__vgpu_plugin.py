"""Table tests for the vGPU plugin logic shared by role device_plugin and the lab's emulated plugin."""

import json
import pathlib

import pytest
import yaml

from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _gpu_hosts
from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _vgpu_plugin as vp

FULL = vp.device_config({"deviceSplitCount": 4, "gpuMemoryFactor": 3})
# The role's own device_plugin_vgpu (defaults/main.yml): what a partial dict of the inventory leaves out.
ROLE_DEFAULT = yaml.safe_load((pathlib.Path(__file__).resolve().parents[4] / "roles" / "device_plugin" / "defaults"
                               / "main.yml").read_text())["device_plugin_vgpu"]
RIG01 = [{"uuid": "GPU-a%d" % i, "index": i, "model": "NVIDIA GeForce RTX 4090", "memory_mib": 24564} for i in range(5)]


@pytest.mark.parametrize("image, version", [
    ("docker.io/projecthami/volcano-vgpu-device-plugin:v1.12.0", (1, 12, 0)),
    ("projecthami/volcano-vgpu-device-plugin:v1.11.0", (1, 11, 0)),
    ("registry:5000/hami/plugin:1.9", (1, 9, 0)),
    ("projecthami/volcano-vgpu-device-plugin:latest", None),
    ("projecthami/volcano-vgpu-device-plugin", None),
])
def test_image_version(image, version):
    assert vp.image_version(image) == version


@pytest.mark.parametrize("node_config, args, version, want", [
    # v1.12: the device ConfigMap, then flags that are given, then the node's entry.
    (None, [], (1, 12, 0), {"split": 4, "memory_factor": 3}),
    (None, ["--device-split-count=6"], (1, 12, 0), {"split": 6, "memory_factor": 3}),
    ({"nodeconfig": [{"name": "rig01", "devicesplitcount": 8}]}, ["--device-split-count", "6"], (1, 12, 0),
     {"split": 8, "node_config_applied": True}),
    ({"nodeconfig": [{"name": "other", "devicesplitcount": 8}]}, [], (1, 12, 0), {"split": 4}),
    ({"nodeconfig": [{"name": "rig01", "filterdevices": {"index": [0, 1]}, "operatingmode": "mig"}]}, [], None,
     {"filter_index": [0, 1], "mode": "mig"}),
    # before v1.12: the node ConfigMap is ignored and the flag defaults beat the device ConfigMap (#87, #119).
    ({"nodeconfig": [{"name": "rig01", "devicesplitcount": 8}]}, [], (1, 11, 0),
     {"split": 2, "memory_factor": 1, "node_config_applied": False}),
    (None, ["--device-split-count=3", "--gpu-memory-factor=2"], (1, 11, 0), {"split": 3, "memory_factor": 2}),
])
def test_resolve_config(node_config, args, version, want):
    settings = vp.resolve_config("rig01", FULL, node_config, args, version)
    assert {k: settings[k] for k in want} == want


@pytest.mark.parametrize("device, message", [
    (None, "no defaults"),
    (dict(FULL, gpuMemoryFactor=0), "gpuMemoryFactor must be an integer >= 1"),
    (dict(FULL, deviceSplitCount=0), "deviceSplitCount must be an integer >= 1"),
])
def test_resolve_config_refuses_what_the_plugin_cannot_run(device, message):
    with pytest.raises(vp.PluginConfigError, match=message):
        vp.resolve_config("rig01", device, None, [], (1, 12, 0))


@pytest.mark.parametrize("settings, number, memory, cores, entries", [
    ({"split": 2, "memory_factor": 3}, 10, 5 * 8188, 500, 5),
    ({"split": 10, "memory_factor": 5, "core_scaling": 2.0}, 50, 5 * 4912, 1000, 5),
    ({"split": 2, "memory_factor": 3, "filter_index": [4], "filter_uuid": ["GPU-a0"]}, 6, 3 * 8188, 300, 3),
    # Past kubelet's device-list limit the whole memory list is dropped: 5 x 24564 units.
    ({"split": 2, "memory_factor": 1}, 10, 0, 500, 5),
])
def test_registration(settings, number, memory, cores, entries):
    full = {"split": 2, "memory_factor": 1, "core_scaling": 1.0, "mode": "hami-core", "filter_uuid": [],
            "filter_index": []}
    full.update(settings)
    annotation, resources = vp.registration(RIG01, full)
    assert resources == {"volcano.sh/vgpu-number": number, "volcano.sh/vgpu-memory": memory,
                         "volcano.sh/vgpu-cores": cores}
    assert annotation.count("NVIDIA-NVIDIA GeForce RTX 4090,true,hami-core") == entries
    assert annotation.endswith(":")


def gpus(count, mib, uuid_length=40):
    return [{"uuid": ("GPU-%d-" % index).ljust(uuid_length, "0"), "index": index, "model": "m", "memory_mib": mib}
            for index in range(count)]


@pytest.mark.parametrize("nodes, factor", [
    ([gpus(1, 0)], 1), ([gpus(5, 8188)], 1), ([gpus(5, 16376)], 2), ([gpus(5, 24564), gpus(5, 16376)], 3),
    ([gpus(10, 24564)], 5), ([], 1),
    # 61410 units of 5 x 24564 at factor 2 fit kubelet's 4 MiB (3.997 MB) but not the 90 % the auto factor keeps.
    ([gpus(5, 24564)], 3),
])
def test_memory_factor(nodes, factor):
    assert vp.memory_factor(nodes) == factor
    assert all(vp.memory_list_bytes(n, factor) <= vp.LIST_AND_WATCH_LIMIT * vp.AUTO_FACTOR_HEADROOM for n in nodes)
    assert factor == 1 or any(vp.memory_list_bytes(n, factor - 1) > vp.LIST_AND_WATCH_LIMIT * 0.9 for n in nodes)


@pytest.mark.parametrize("count, mib, factor, fits", [
    (5, 24564, 1, False), (5, 24564, 2, True), (5, 16376, 1, False), (5, 16376, 2, True), (8, 24564, 3, False),
    (8, 24564, 4, True),
    (10, 24564, 3, False), (10, 24564, 4, True),
])
def test_device_list_limit_is_kubelets_message_size(count, mib, factor, fits):
    """The list's protobuf size against gRPC's 4 MiB: what kubelet's device manager accepts (lab-tested)."""
    ids = ["%s-memory-%d" % (g["uuid"], i) for g in gpus(count, mib) for i in range(mib // factor)]
    encoded = sum(2 + (len(i) + 11) for i in ids)   # repeated Device{id, health: "Healthy"}: tag, length, body
    assert vp.memory_list_bytes(gpus(count, mib), factor) == encoded
    assert (encoded <= vp.LIST_AND_WATCH_LIMIT) is fits
    settings = {"split": 2, "memory_factor": factor, "core_scaling": 1.0, "mode": "hami-core", "filter_uuid": [],
                "filter_index": []}
    dummy, resources = vp.registration(gpus(count, mib), settings)
    assert resources["volcano.sh/vgpu-memory"] == (count * (mib // factor) if fits else 0)


def test_device_config_is_complete_and_refuses_unknown_keys():
    assert set(vp.DEVICE_CONFIG_DEFAULTS) <= set(vp.device_config({}))
    with pytest.raises(vp.PluginConfigError, match="unknown device-config key"):
        vp.device_config({"deviceSplitCunt": 3})


HOSTVARS = {
    "rig01": {"device_plugin_gpus": {"count": 5, "model": "NVIDIA GeForce RTX 4090", "memory_mib": 24564}},
    "rig02": {"device_plugin_vgpu": {"split": 3}, "gpu_verify_inventory": {"gpus": [
        {"index": i, "uuid": "GPU-b%d" % i, "name": "NVIDIA GeForce RTX 4070 SUPER", "memory_total_mib": 16376}
        for i in range(5)]}},
}
BASE = {"hosts": ["rig01", "rig02"], "vgpu": {"split": 2, "core_scaling": 1, "mode": "hami-core"},
        "memory_factor": "auto", "device_config": {}, "version": "v1.12.0"}
# rig01 with a dict of its own: split 4, the fleet's other keys.
RIG01_SPLIT_4 = dict(HOSTVARS, rig01=dict(HOSTVARS["rig01"], device_plugin_vgpu={"split": 4}))


def plan(settings, hostvars):
    """What the role's planner does: the GPU hosts as the inventory has them, then the plan."""
    return vp.plan(dict(settings, vgpu_defaults=ROLE_DEFAULT), _gpu_hosts.read(settings["hosts"], hostvars))


def test_plan_per_node_from_hostvars():
    result = plan(BASE, HOSTVARS)
    assert result["errors"] == []
    assert result["memory_factor"] == 3
    # What forces it: rig01 alone needs 3, rig02 alone 2 (a fleet of rig02s would count in 2-MiB units).
    assert result["factor_by_node"] == {"rig01": 3, "rig02": 2}
    assert result["expected"]["rig01"]["volcano.sh/vgpu-number"] == 10
    assert result["expected"]["rig02"]["volcano.sh/vgpu-number"] == 15  # group/host var split 3, measured GPUs
    assert result["expected"]["rig02"]["volcano.sh/vgpu-memory"] == 5 * (16376 // 3)
    nodes = {e["name"]: e for e in json.loads(result["node_config"])["nodeconfig"]}
    assert (nodes["rig01"]["devicesplitcount"], nodes["rig02"]["devicesplitcount"]) == (2, 3)
    assert result["device_config"]["gpuMemoryFactor"] == 3
    assert [d["name"] for d in result["daemonsets"]] == ["volcano-device-plugin"]


def test_plan_legacy_version_groups_by_split():
    result = plan(dict(BASE, version="v1.11.0"), HOSTVARS)
    assert [(d["name"], d["nodes"]) for d in result["daemonsets"]] == [
        ("volcano-device-plugin-split-2", ["rig01"]), ("volcano-device-plugin-split-3", ["rig02"])]
    assert "--device-split-count=3" in result["daemonsets"][1]["args"]
    assert result["node_label_patches"][1] == {"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": "rig02", "labels": {"gpufleet.io/gpu": "true", "gpufleet.io/vgpu-split": "3"}}}


def test_plan_config_hash_follows_the_settings():
    one = plan(BASE, HOSTVARS)["config_hash"]
    assert one == plan(BASE, HOSTVARS)["config_hash"]
    assert one != plan(BASE, RIG01_SPLIT_4)["config_hash"]


@pytest.mark.parametrize("change, message", [
    ({"vgpu": {"split": 0}}, "device_plugin_vgpu: split must be an integer from 1 to 100, got 0"),
    ({"vgpu": {"split": 2, "core_scaling": 0}}, "device_plugin_vgpu: core_scaling must be a number > 0"),
    ({"vgpu": {"split": 2, "mode": "timeslice"}}, "device_plugin_vgpu: mode must be one of hami-core, mig"),
    ({"vgpu": {"splits": 3}}, "device_plugin_vgpu: unknown key(s) splits; allowed: split, core_scaling, mode"),
    ({"vgpu": 3}, "device_plugin_vgpu: must be a dict with the keys split, core_scaling"),
    ({"memory_factor": "big"}, "must be 'auto' or an integer >= 1"),
    ({"memory_factor": 1}, "over the 4194304 bytes kubelet reads from a device plugin"),
    ({"version": "main"}, "device_plugin_version must look like v1.12.0"),
    ({"hosts": ["rig01", "gpu-x"]}, "node gpu-x (host gpu-x): no GPUs known"),
])
def test_plan_errors_name_the_problem(change, message):
    errors = plan(dict(BASE, **change), HOSTVARS)["errors"]
    assert any(message in e for e in errors), errors


# A GPU host's own dict, as a card group's group_vars or a host's host_vars set it.
HOST_VGPU = [
    ({"split": 0}, "device_plugin_vgpu of node rig01 (host rig01): split must be an integer from 1 to 100, got 0"),
    ({"split": "3"}, "split must be an integer from 1 to 100, got '3'"),
    ({"split": True}, "split must be an integer from 1 to 100, got True"),
    ({"core_scaling": -1}, "core_scaling must be a number > 0 (> 1 oversubscribes), got -1"),
    ({"mode": "MIG"}, "mode must be one of hami-core, mig, got 'MIG'"),
    # The vocabulary of the releases before device_plugin_vgpu: plural names are refused, not ignored.
    ({"filter_uuids": ["GPU-a"]}, "unknown key(s) filter_uuids; allowed: split, core_scaling, mode, filter_uuid"),
    ({"filter_uuid": "GPU-a"}, "filter_uuid must be a list of GPU UUIDs, got 'GPU-a'"),
    ({"filter_index": [0, -1]}, "filter_index must be a list of GPU indexes (integers >= 0), got [0, -1]"),
    ([{"split": 3}], "device_plugin_vgpu of node rig01 (host rig01): must be a dict"),
]


@pytest.mark.parametrize("vgpu, message", HOST_VGPU, ids=[case[1][:40] for case in HOST_VGPU])
def test_a_hosts_vgpu_dict_is_checked_key_by_key(vgpu, message):
    hostvars = dict(HOSTVARS, rig01=dict(HOSTVARS["rig01"], device_plugin_vgpu=vgpu))
    errors = plan(BASE, hostvars)["errors"]
    assert any(message in e for e in errors), errors


@pytest.mark.parametrize("fleet, own, want", [
    # The card group sets split alone: the fleet's other keys stay.
    ({"split": 2, "core_scaling": 1.5, "mode": "hami-core"}, {"split": 3},
     {"split": 3, "core_scaling": 1.5, "mode": "hami-core", "filter_uuid": [], "filter_index": []}),
    # group_vars/all replaced the role's dict with a partial one: what the plugin does without the key.
    ({"core_scaling": 2}, None, {"split": 2, "core_scaling": 2, "mode": "hami-core", "filter_uuid": [],
                                 "filter_index": []}),
    ({"split": 4}, {"filter_index": [1]},
     {"split": 4, "core_scaling": 1, "mode": "hami-core", "filter_uuid": [], "filter_index": [1]}),
    # YAML's `filter_uuid:` with nothing after it is null: not set, the fleet's value stays.
    ({"split": 2, "filter_uuid": ["GPU-a"]}, {"split": 3, "filter_uuid": None},
     {"split": 3, "core_scaling": 1, "mode": "hami-core", "filter_uuid": ["GPU-a"], "filter_index": []}),
])
def test_vgpu_settings_merge_key_by_key(fleet, own, want):
    assert vp.vgpu_problems(own or {}) == []
    assert vp.vgpu_settings(fleet, own, ROLE_DEFAULT) == want


def test_two_hosts_of_one_node_name_are_refused():
    hostvars = dict(HOSTVARS, rig02=dict(HOSTVARS["rig02"], device_plugin_node_name="rig01"))
    errors = plan(BASE, hostvars)["errors"]
    assert "node rig01 (host rig02): node name also used by host rig01 (device_plugin_node_name)" in errors, errors


def test_filters_leave_gpus_out_of_the_registration():
    hostvars = dict(HOSTVARS, rig02=dict(HOSTVARS["rig02"], device_plugin_vgpu={
        "split": 3, "filter_uuid": ["GPU-b0"], "filter_index": [4]}))
    result = plan(BASE, hostvars)
    assert result["expected"]["rig02"]["volcano.sh/vgpu-number"] == 3 * 3
    entry = [e for e in json.loads(result["node_config"])["nodeconfig"] if e["name"] == "rig02"][0]
    assert entry["filterdevices"] == {"uuid": ["GPU-b0"], "index": [4]}


@pytest.mark.parametrize("daemonset, conflicts", [
    ({"metadata": {"namespace": "kube-system", "name": "nvidia-device-plugin-daemonset"}}, True),
    ({"metadata": {"namespace": "gpu", "name": "nvdp"}, "spec": {"template": {"spec": {"containers": [
        {"image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"}]}}}}, True),
    ({"metadata": {"namespace": "kube-system", "name": "volcano-device-plugin",
                   "labels": {"gpufleet.io/component": "device-plugin"}}}, False),
    ({"metadata": {"namespace": "kube-system", "name": "kube-proxy"}, "spec": {"template": {"spec": {
        "containers": [{"image": "registry.k8s.io/kube-proxy:v1.35.0"}]}}}}, False),
])
def test_conflicting_daemonsets(daemonset, conflicts):
    listed = [{"namespace": "kube-system", "name": "nvidia-device-plugin-daemonset"}]
    assert bool(vp.conflicting_daemonsets([daemonset], listed, "k8s-device-plugin")) is conflicts


def plugin_ds(**meta):
    return {"metadata": dict({"namespace": "gpu-operator", "name": "nvidia-device-plugin-daemonset"}, **meta),
            "spec": {"template": {"spec": {"containers": [{"image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"}]}}}}


# Metadata as each manager writes it on the DaemonSets it owns.
@pytest.mark.parametrize("daemonset, owner, remedy", [
    (plugin_ds(ownerReferences=[{"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "name": "cluster-policy",
                                 "controller": True}]),
     "NVIDIA GPU Operator (ClusterPolicy cluster-policy)", "devicePlugin.enabled=false"),
    (plugin_ds(labels={"app.kubernetes.io/managed-by": "Helm"},
               annotations={"meta.helm.sh/release-name": "nvdp", "meta.helm.sh/release-namespace": "nvidia"}),
     "Helm release nvdp (namespace nvidia)", "helm uninstall nvdp -n nvidia"),
    (plugin_ds(labels={"argocd.argoproj.io/instance": "gpu-stack"}), "Argo CD application gpu-stack",
     "application's source"),
    (plugin_ds(annotations={"argocd.argoproj.io/tracking-id": "gpu-stack:apps/DaemonSet:kube-system/nvdp"}),
     "Argo CD application gpu-stack", "application's source"),
    (plugin_ds(labels={"kustomize.toolkit.fluxcd.io/name": "infra"}), "Flux Kustomization infra", "source"),
    (plugin_ds(ownerReferences=[{"apiVersion": "example.com/v1", "kind": "GpuStack", "name": "s", "controller": True}]),
     "GpuStack s", "switch off its device plugin in that GpuStack"),
    (plugin_ds(), None, None),                                                   # kubectl create -f, by hand
])
def test_who_manages_a_conflicting_plugin(daemonset, owner, remedy):
    found = vp.conflicting_daemonsets([daemonset], [], "k8s-device-plugin")
    assert len(found) == 1
    if owner is None:
        assert found[0]["owner"] is None
    else:
        assert found[0]["owner"]["owner"] == owner and remedy in found[0]["owner"]["remedy"]


@pytest.mark.parametrize("overrides, fragment", [
    ({"deviceMemoryScaling": -1}, "deviceMemoryScaling must be a number > 0"),
    ({"deviceMemoryScaling": 0}, "deviceMemoryScaling must be a number > 0"),
    ({"deviceCoreScaling": "2"}, "deviceCoreScaling must be a number > 0"),
    # Read by Volcano 1.15.1 and plugin v1.12.0 but used by neither: set, they would only mislead.
    ({"defaultMemory": 2729}, "defaultMemory: 2729 has no effect"),
    ({"defaultMemory": -5}, "defaultMemory: -5 has no effect"),
    ({"defaultCores": 50}, "defaultCores: 50 has no effect"),
    ({"defaultGPUNum": 2}, "defaultGPUNum: 2 has no effect"),
    ({"deviceSplitCount": True}, "deviceSplitCount must be an integer >= 1"),
])
def test_device_config_refuses_values_the_plugin_would_misuse(overrides, fragment):
    with pytest.raises(vp.PluginConfigError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        vp.device_config(overrides)


def test_device_config_accepts_upstreams_values_of_the_unused_keys():
    assert vp.device_config({"defaultMemory": 0, "defaultCores": 0, "defaultGPUNum": 1})["defaultMemory"] == 0


def test_device_config_accepts_oversubscription():
    assert vp.device_config({"deviceMemoryScaling": 1.5})["deviceMemoryScaling"] == 1.5


def _plan(version="v1.12.0", **host):
    hostvars = {"rig01": dict({"device_plugin_gpus": {"count": 1, "model": "m", "memory_mib": 24564}}, **host)}
    return plan({"hosts": ["rig01"], "vgpu": {"split": 2}, "version": version}, hostvars)


def test_plugin_version_needs_its_v():
    assert _plan(version="1.12.0")["errors"] == ["device_plugin_version must look like v1.12.0, got '1.12.0'"]
    assert _plan()["errors"] == []


@pytest.mark.parametrize("host, fragment", [
    ({"device_plugin_gpus": {"count": "five", "memory_mib": 1}}, "device_plugin_gpus.count must be an integer, got 'five'"),
    ({"device_plugin_gpus": {}, "gpu_verify_expected_count": "five", "gpu_verify_min_memory_mib": 24000},
     "gpu_verify_expected_count must be an integer, got 'five'"),
    ({"device_plugin_gpus": {}, "gpu_verify_expected_count": 5, "gpu_verify_min_memory_mib": True},
     "gpu_verify_min_memory_mib must be an integer, got True"),
])
def test_inventory_sizes_of_the_wrong_type_are_messages(host, fragment):
    errors = _plan(**host)["errors"]
    assert errors == ["node rig01 (host rig01): " + fragment], errors


@pytest.mark.parametrize("fleet, host, needle", [
    ({"split": 2, "filter_index": [5]}, {}, "filter_index [5] beyond its 5 GPUs (indexes 0 to 4, as NVML says)"),
    ({"split": 2}, {"filter_index": [0, 9]}, "filter_index [9] beyond its 5 GPUs"),
    ({"split": 2, "mode": "mig"}, {}, "mode mig, but NVIDIA GeForce RTX 4090 has no MIG"),
    ({"split": 2}, {"mode": "mig", "split": 1}, "has no MIG (only data-center GPUs such as the A100 or H100 have it)"),
])
def test_hardware_errors_name_what_the_gpus_cannot_honour(fleet, host, needle):
    gpus = [{"uuid": "GPU-%d" % i, "index": i, "model": "NVIDIA GeForce RTX 4090", "memory_mib": 24564}
            for i in range(5)]
    hosts = [{"host": "rig01", "node": "rig01", "vgpu": host or None, "gpus": gpus, "source": "nvml", "error": None}]
    errors = vp.hardware_errors(fleet, hosts, ROLE_DEFAULT)
    assert len(errors) == 1 and needle in errors[0], errors


def test_hardware_errors_leave_data_center_cards_and_unknown_sizes_alone():
    h100 = [{"uuid": "GPU-0", "index": 0, "model": "NVIDIA H100 80GB HBM3", "memory_mib": 81559}]
    assert vp.hardware_errors({"split": 1, "mode": "mig"}, [
        {"host": "h1", "node": "h1", "vgpu": None, "gpus": h100, "source": "nvml", "error": None},
        {"host": "h2", "node": "h2", "vgpu": {"filter_index": [3]}, "gpus": [], "source": None, "error": None}],
        ROLE_DEFAULT) == []


def test_the_device_configmap_is_what_ansibles_to_nice_yaml_wrote():
    """The plan renders the device ConfigMap's file itself; it must be byte for byte what the role wrote with
    to_nice_yaml(indent=2) before, or every cluster would see a change (and a scheduler roll) on upgrade."""
    from ansible.plugins.filter.core import to_nice_yaml
    config = vp.device_config({})
    assert vp.device_config_yaml(config) == to_nice_yaml({"nvidia": config}, indent=2)
