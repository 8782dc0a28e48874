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


@pytest.mark.parametrize("hostvars, want", [
    # What NVML read wins over everything else.
    ({"gpu_verify_inventory": {"gpus": [{"index": 0, "uuid": "GPU-a", "name": "NVIDIA GeForce RTX 4090",
                                         "memory_total_mib": 24564}]},
      "device_plugin_gpus": {"count": 3, "model": "x", "memory_mib": 1}, "gpu_verify_expected_count": 9,
      "gpu_verify_min_memory_mib": 1}, [("GPU-a", "NVIDIA GeForce RTX 4090", 24564)]),
    # Then the inventory's declaration.
    ({"device_plugin_gpus": {"count": 2, "model": "RTX 4070 Super", "memory_mib": 16376},
      "gpu_verify_expected_count": 9, "gpu_verify_min_memory_mib": 1},
     [("GPU-index-0", "RTX 4070 Super", 16376), ("GPU-index-1", "RTX 4070 Super", 16376)]),
    # A fresh fleet: the card group's expectations (the example inventory's group_vars/rtx4090.yml).
    ({"gpu_verify_expected_count": 2, "gpu_verify_model_pattern": "RTX 4090", "gpu_verify_min_memory_mib": 24000},
     [("GPU-index-0", "RTX 4090", 24000), ("GPU-index-1", "RTX 4090", 24000)]),
    ({"gpu_verify_expected_count": 2}, []),          # no memory: nothing to size with
    ({"gpu_verify_expected_count": None, "gpu_verify_min_memory_mib": 24000}, []),
    ({}, []),
])
def test_gpus_sources_in_order(hostvars, want):
    assert [(g["uuid"], g["model"], g["memory_mib"]) for g in gh.gpus(hostvars)] == want


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
        {"host": "rig01", "node": "rig01", "vgpu": {"split": 3}, "error": None,
         "gpus": [{"uuid": "GPU-index-0", "index": 0, "model": "unknown", "memory_mib": 1}]},
        {"host": "rig02", "node": "n2", "vgpu": None, "gpus": None,
         "error": "device_plugin_gpus.count must be an integer, got 'five'"}]
