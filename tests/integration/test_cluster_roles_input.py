"""Bad input to roles volcano and device_plugin is refused before the cluster is touched (no cluster needed)."""

import json

import pytest
import yaml

from helpers import ROOT, failed_messages, run_playbook

INVENTORY = {"all": {"children": {
    "kube_control": {"hosts": {"localhost": {"ansible_connection": "local"}}},
    "gpu_nodes": {"hosts": {
        "rig01": {"device_plugin_gpus": {"count": 5, "model": "NVIDIA GeForce RTX 4090", "memory_mib": 24564}},
        "rig02": {"device_plugin_gpus": {"count": 5, "model": "NVIDIA GeForce RTX 4070 SUPER", "memory_mib": 16376}},
    }},
}}}


@pytest.mark.parametrize("extra, needle", [
    ({"device_plugin_split_count": 0}, "node rig01: split must be an integer from 1 to 100, got 0"),
    ({"device_plugin_split_count": 101}, "split must be an integer from 1 to 100, got 101"),
    ({"device_plugin_core_scaling": -1}, "core_scaling must be a number > 0, got -1"),
    ({"device_plugin_operating_mode": "time-slicing"}, "mode must be one of hami-core, mig"),
    ({"device_plugin_node_overrides": {"rig99": {"split": 3}}},
     "device_plugin_node_overrides names rig99, which is not a GPU node of the inventory (known: rig01, rig02)"),
    ({"device_plugin_gpu_memory_factor": 0}, "device_plugin_gpu_memory_factor must be 'auto' or an integer >= 1"),
    ({"device_plugin_gpu_memory_factor": 1}, "exceed kubelet's device-list limit"),
    ({"volcano_deviceshare": {"vgpu_enable": True, "schedule_policy": "fastest"}},
     "volcano_deviceshare.schedule_policy must be one of binpack, spread"),
    ({"volcano_deviceshare": {"vgpu_enable": True, "gpu_sharing_enable": True}},
     "vgpu_enable and gpu_sharing_enable cannot be combined"),
    ({"volcano_deviceshare": {"vgpu_enable": True, "gpu_number_enable": True}},
     "vgpu_enable and gpu_number_enable cannot be combined"),
    ({"volcano_scheduler_actions": ["enqueue", "allocate", "teleport"]},
     "volcano_scheduler_actions: unknown action 'teleport'"),
    ({"volcano_chart_version": ""}, "needs a pinned volcano_chart_version"),
])
def test_bad_input_is_refused_before_anything_changes(tmp_path, extra, needle):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump(INVENTORY))
    rc, out, err = run_playbook(ROOT / "playbooks" / "cluster.yml", "-e", json.dumps(extra), inventory=str(inventory))
    assert rc != 0
    messages = " ".join(failed_messages(out))
    assert needle in messages, (messages, err[-1500:])
    assert out["stats"]["localhost"]["changed"] == 0
