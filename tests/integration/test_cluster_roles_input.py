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
    ({"device_plugin_vgpu": {"split": 0}}, "device_plugin_vgpu: split must be an integer from 1 to 100, got 0"),
    ({"device_plugin_vgpu": {"split": 101}}, "split must be an integer from 1 to 100, got 101"),
    ({"device_plugin_vgpu": {"core_scaling": -1}}, "core_scaling must be a number > 0 (> 1 oversubscribes), got -1"),
    # The argument spec's choices, before the plan: Ansible's own wording, naming the dict.
    ({"device_plugin_vgpu": {"mode": "time-slicing"}},
     "value of mode must be one of: hami-core, mig, got: time-slicing found in device_plugin_vgpu"),
    ({"device_plugin_vgpu": {"splits": 3}}, "device_plugin_vgpu.splits. Supported parameters include"),
    ({"device_plugin_gpu_memory_factor": 0}, "device_plugin_gpu_memory_factor must be 'auto' or an integer >= 1"),
    ({"device_plugin_gpu_memory_factor": 1}, "over the 4194304 bytes kubelet reads from a device plugin"),
    ({"volcano_deviceshare": {"vgpu_enable": True, "schedule_policy": "fastest"}},
     "volcano_deviceshare.schedule_policy must be one of binpack, spread"),
    ({"volcano_deviceshare": {"vgpu_enable": True, "gpu_sharing_enable": True}},
     "vgpu_enable and gpu_sharing_enable cannot be combined"),
    ({"volcano_deviceshare": {"vgpu_enable": True, "gpu_number_enable": True}},
     "vgpu_enable and gpu_number_enable cannot be combined"),
    ({"volcano_scheduler_actions": ["enqueue", "allocate", "teleport"]},
     "volcano_scheduler_actions: unknown action 'teleport'"),
    ({"volcano_scheduler_actions": "enqueue, allocate, teleport"},
     "volcano_scheduler_actions: unknown action 'teleport'"),
    # deviceshare arguments as Volcano's docs write them, inside the tiers, contradicting the structured ones.
    ({"volcano_scheduler_tiers": [{"plugins": [{"name": "gang"}, {"name": "predicates"}, {
        "name": "deviceshare", "arguments": {"deviceshare.VGPUEnable": True, "deviceshare.GPUSharingEnable": True}}]}],
      "volcano_deviceshare": {}},
     "vgpu_enable and gpu_sharing_enable cannot be combined"),
    ({"volcano_scheduler_tiers": [{"plugins": [{"name": "gang"}, {"name": "predicate"}]}]},
     "unknown plugin 'predicate'"),
    ({"volcano_chart_version": ""}, "needs a pinned volcano_chart_version"),
    # A plugin after v1.12.0 writes no handshake, which Volcano 1.15.0 still waits for.
    ({"volcano_image_tag": "v1.15.0", "device_plugin_version": "v1.13.0"},
     "Volcano v1.15.0 (volcano_image_tag) and volcano-vgpu-device-plugin v1.13.0 (device_plugin_version) do not "
     "work together"),
])
def test_bad_input_is_refused_before_anything_changes(tmp_path, extra, needle):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump(INVENTORY))
    rc, out, err = run_playbook(ROOT / "playbooks" / "cluster.yml", "-e", json.dumps(extra), inventory=str(inventory))
    assert rc != 0
    messages = " ".join(failed_messages(out))
    assert needle in messages, (messages, err[-1500:])
    assert out["stats"]["localhost"]["changed"] == 0


def test_the_default_versions_pass_the_compatibility_check(tmp_path):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump(INVENTORY))
    rc, out, err = run_playbook(ROOT / "playbooks" / "cluster.yml", "--tags", "never", inventory=str(inventory))
    assert rc == 0, (failed_messages(out), err[-1500:])
    checks = [result.get("msg") for play in out["plays"] for task in play["tasks"]
              if task["task"]["name"].startswith("Refuse a Volcano and plugin pair")
              for result in task["hosts"].values()]
    assert checks == ["Volcano v1.15.1 with plugin v1.12.0: works"], checks
