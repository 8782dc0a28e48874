"""site.yml paces the disruptive part of the node layers safely: one node at a time by default, faster only through
extra vars, and an inventory that sets the pacing (which Ansible cannot apply to a play's serial) is refused before
any host is contacted. --tags rollout shows the batches and changes nothing."""

import json

import pytest
import yaml

from helpers import ROOT, failed_messages, run_playbook

GPUS = {"count": 2, "model": "NVIDIA GeForce RTX 4090", "memory_mib": 24564}


def inventory(tmp_path, gpu_node_vars=None):
    hosts = {"gpu-a": {}, "gpu-b": {}, "gpu-c": {}}
    for host in hosts.values():
        host.update({"device_plugin_gpus": GPUS}, **(gpu_node_vars or {}))
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"children": {
        "kube_control": {"hosts": {"localhost": {}}},
        "gpu_nodes": {"hosts": hosts}}}}))
    return str(path)


def node_batches(out, part="GPU nodes the run disrupts"):
    """The hosts of each batch of a part of the node layers (the JSON callback starts a play per batch)."""
    return [sorted(task["hosts"]) for play in out["plays"] if play["play"]["name"].startswith(part)
            for task in play["tasks"] if task["task"]["name"] == "Gather facts"]


@pytest.mark.parametrize("extra, batches", [
    ({}, [["gpu-a"], ["gpu-b"], ["gpu-c"]]),                         # the default: one node at a time
    ({"gpufleet_node_serial": 2}, [["gpu-a", "gpu-b"], ["gpu-c"]]),
    ({"gpufleet_node_serial": "50%"}, [["gpu-a"], ["gpu-b"], ["gpu-c"]]),  # 1.5 rounds down, as Ansible does
    ({"gpufleet_node_serial": "100%"}, [["gpu-a", "gpu-b", "gpu-c"]]),
])
def test_node_layers_go_in_small_batches_unless_extra_vars_say_otherwise(tmp_path, extra, batches):
    # Hosts gpufleet never converged: the decision puts every one in the rolling part.
    args = ["--tags", "rollout"] + (["-e", json.dumps(extra)] if extra else [])
    rc, out, err = run_playbook(ROOT / "playbooks" / "site.yml", *args, inventory=inventory(tmp_path))
    assert rc == 0, (failed_messages(out), err[-1500:])
    assert node_batches(out, "GPU nodes - decide") == [["gpu-a", "gpu-b", "gpu-c"]]  # looked at all at once
    assert node_batches(out) == batches
    assert node_batches(out, "GPU nodes the run does not disrupt") == []
    # --tags rollout only shows the plan: no task of a role ran, nothing changed.
    ran = {task["task"]["name"] for play in out["plays"] for task in play["tasks"]}
    assert not [name for name in ran if name.startswith("gpufleet.vgpu.") and "Validating arguments" not in name], ran
    assert sum(stats.get("changed", 0) for stats in out["stats"].values()) == 0


@pytest.mark.parametrize("value", [1, "100%", 3])
def test_pacing_set_in_the_inventory_is_refused_before_any_node_is_contacted(tmp_path, value):
    rc, out, err = run_playbook(ROOT / "playbooks" / "site.yml", "--tags", "rollout",
                                inventory=inventory(tmp_path, {"gpufleet_node_serial": value}))
    if value == 1:  # what the default does anyway
        assert rc == 0, (failed_messages(out), err[-1500:])
        return
    assert rc != 0
    messages = " ".join(failed_messages(out))
    assert "gpufleet_node_serial is %s in host gpu-a, but this run uses 1" % value in messages, messages
    assert "-e gpufleet_node_serial=%s" % value in messages
    assert node_batches(out, "GPU nodes") == []  # no facts gathered: no node contacted
