"""Table tests of what the inventory says about each GPU host (plugin_utils._gpu_hosts)."""

import pytest

from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _gpu_hosts as gh


@pytest.mark.parametrize("hosts, hostvars, want", [
    (["rig01", "rig02"], {"rig01": {}, "rig02": {"device_plugin_node_name": "rig02.k8s.local"}},
     ["rig01", "rig02.k8s.local"]),
    (["gpu-a"], {}, ["gpu-a"]),                                    # a host without vars keeps its name
    (["gpu-a"], {"gpu-a": {"device_plugin_node_name": ""}}, ["gpu-a"]),  # an empty name is no name
    ([], {}, []),
])
def test_node_names(hosts, hostvars, want):
    assert gh.node_names(hosts, hostvars) == want


@pytest.mark.parametrize("hostvars, source, want", [
    # What NVML read wins over everything else.
    ({"gpu_verify_inventory": {"gpus": [{"index": 0, "uuid": "GPU-a", "name": "NVIDIA GeForce RTX 4090",
                                         "memory_total_mib": 24564}]},
      "device_plugin_gpus": {"count": 3, "model": "x", "memory_mib": 1}, "gpu_verify_expected_count": 9,
      "gpu_verify_min_memory_mib": 1}, "nvml", [("GPU-a", "NVIDIA GeForce RTX 4090", 24564)]),
    # Then the inventory's declaration.
    ({"device_plugin_gpus": {"count": 2, "model": "RTX 4070 Super", "memory_mib": 16376},
      "gpu_verify_expected_count": 9, "gpu_verify_min_memory_mib": 1}, "declared",
     [("GPU-index-0", "RTX 4070 Super", 16376), ("GPU-index-1", "RTX 4070 Super", 16376)]),
    # A fresh fleet: the card group's expectations (the example inventory's group_vars/rtx4090.yml).
    ({"gpu_verify_expected_count": 2, "gpu_verify_model_pattern": "RTX 4090", "gpu_verify_min_memory_mib": 24000},
     "minimum", [("GPU-index-0", "RTX 4090", 24000), ("GPU-index-1", "RTX 4090", 24000)]),
    ({"gpu_verify_expected_count": 2}, None, []),          # no memory: nothing to size with
    ({"gpu_verify_expected_count": None, "gpu_verify_min_memory_mib": 24000}, None, []),
    ({}, None, []),
])
def test_gpus_sources_in_order(hostvars, source, want):
    found_source, gpus = gh.gpus(hostvars)
    assert found_source == source
    assert [(g["uuid"], g["model"], g["memory_mib"]) for g in gpus] == want


# Plugin v1.12.0's registration of two RTX 4090 under gpuMemoryFactor 3: 8188 units each.
REGISTERED = ("GPU-11111111-2222-3333-4444-555555555555,2,8188,NVIDIA-NVIDIA GeForce RTX 4090,true,hami-core:"
              "GPU-66666666-7777-8888-9999-000000000000,2,8188,NVIDIA-NVIDIA GeForce RTX 4090,true,hami-core:")


def node(name, register=REGISTERED):
    return {"metadata": {"name": name, "annotations": {"volcano.sh/node-vgpu-register": register} if register else {}}}


def test_registered_gpus_read_the_plugins_annotation():
    assert gh.registered_gpus(node("rig01"), 3) == [
        {"uuid": "GPU-11111111-2222-3333-4444-555555555555", "index": 0, "model": "NVIDIA GeForce RTX 4090",
         "memory_mib": 24564},
        {"uuid": "GPU-66666666-7777-8888-9999-000000000000", "index": 1, "model": "NVIDIA GeForce RTX 4090",
         "memory_mib": 24564}]
    assert gh.registered_gpus(node("rig01", register=None), 3) == []
    assert gh.registered_gpus(node("rig01", register="GPU-1,2:"), 3) == []   # not the plugin's format


@pytest.mark.parametrize("host, nodes, factor, source, memory", [
    # The card group's minimum, and the plugin has registered the node: the registration wins.
    ({"source": "minimum"}, [node("rig01")], 3, "registration", 24564),
    ({"source": "declared"}, [node("rig01")], 3, "registration", 24564),
    # NVML's sizes of this run stay.
    ({"source": "nvml"}, [node("rig01")], 3, "nvml", 24000),
    # Nothing registered, or no device ConfigMap to say the unit: the inventory's sizes stay.
    ({"source": "minimum"}, [node("rig02")], 3, "minimum", 24000),
    ({"source": "minimum"}, [node("rig01")], None, "minimum", 24000),
    # GPUs left out by index: the registration lists only those kept, its indexes are not the node's.
    ({"source": "minimum", "vgpu": {"filter_index": [1]}}, [node("rig01")], 3, "minimum", 24000),
])
def test_sized_takes_the_truest_source(host, nodes, factor, source, memory):
    entry = dict({"host": "rig01", "node": "rig01", "vgpu": None, "error": None,
                  "gpus": [{"uuid": "GPU-index-0", "index": 0, "model": "RTX 4090", "memory_mib": 24000}]}, **host)
    [sized] = gh.sized([entry], nodes, factor)
    assert sized["source"] == source
    assert sized["gpus"][0]["memory_mib"] == memory


def test_expected_counts_from_the_inventory():
    hostvars = {"rig01": {"gpu_verify_expected_count": 5, "device_plugin_gpus": {"count": 4}},
                "rig02": {"device_plugin_gpus": {"count": "5"}, "device_plugin_node_name": "rig02.example"},
                "rig03": {}, "rig04": {"gpu_verify_expected_count": "x"}}
    assert gh.expected_counts(["rig01", "rig02", "rig03", "rig04"], hostvars) == {
        "rig01": 5, "rig02.example": 5, "rig04": "x"}


def test_read_keeps_the_hosts_own_vgpu_dict_and_names_a_wrong_size():
    hostvars = {"rig01": {"device_plugin_vgpu": {"split": 3}, "device_plugin_gpus": {"count": 1, "memory_mib": 1}},
                "rig02": {"device_plugin_gpus": {"count": "five", "memory_mib": 1}, "device_plugin_node_name": "n2"}}
    assert gh.read(["rig01", "rig02"], hostvars) == [
        {"host": "rig01", "node": "rig01", "vgpu": {"split": 3}, "error": None, "source": "declared",
         "gpus": [{"uuid": "GPU-index-0", "index": 0, "model": "unknown", "memory_mib": 1}]},
        {"host": "rig02", "node": "n2", "vgpu": None, "gpus": None, "source": None,
         "error": "device_plugin_gpus.count must be an integer, got 'five'"}]
