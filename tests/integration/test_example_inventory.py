"""README's "On your cluster" on a copy of inventories/example: the preflight passes on a fresh fleet (no GPU facts
yet) and refuses bad settings, both before any host is contacted. The example's private addresses are never used:
every host is pointed at a closed loopback port, so any contact would show as UNREACHABLE."""

import json
import shutil

import pytest
import yaml

from helpers import ROOT, failed_messages, run_playbook

# 127.0.0.2, port 9 (discard, closed here): a host the test could never reach.
NOWHERE = ["-e", "ansible_host=127.0.0.2", "-e", "ansible_port=9", "-e", "ansible_connection=ssh"]


def example(tmp_path, **group_vars):
    dest = tmp_path / "mysite"
    shutil.copytree(ROOT / "inventories" / "example", dest)
    for group, values in group_vars.items():
        path = dest / "group_vars" / ("%s.yml" % group)
        current = yaml.safe_load(path.read_text()) if path.exists() else {}
        current.update(values)
        path.write_text(yaml.safe_dump(current))
    return str(dest)


def preflight(inventory, *extra):
    # -l kube_control: the node play has no host; --tags never: only the preflight (tagged always) runs.
    return run_playbook(ROOT / "playbooks" / "site.yml", "--tags", "never", "-l", "kube_control", *NOWHERE, *extra,
                        inventory=inventory, local=False)


def contacted(out):
    return {host: s for host, s in out["stats"].items() if s.get("unreachable")}


def test_the_example_inventory_passes_its_own_preflight_without_contact(tmp_path):
    rc, out, err = preflight(example(tmp_path))
    assert rc == 0, (failed_messages(out), err[-2000:])
    assert not contacted(out), out["stats"]
    names = [task["task"]["name"].split(" : ")[-1] for play in out["plays"] for task in play["tasks"]]
    assert "Reject invalid per-node settings" in names and "Reject an invalid scheduler configuration" in names
    assert "Look for the kubeconfig" not in names  # the roles look for it when they run, not the preflight


@pytest.mark.parametrize("group_vars, message", [
    ({"rtx4070s": {"device_plugin_split_count": 0}}, "node rig02: split must be an integer from 1 to 100, got 0"),
    ({"all": {"device_plugin_version": "main"}}, "device_plugin_version must look like v1.12.0"),
    ({"all": {"volcano_scheduler_actions": "enqueue, allocate, teleport"}}, "teleport"),
    # A card group without expectations and no GPU facts: nothing to size the node with.
    ({"rtx4070s": {"gpu_verify_min_memory_mib": None}}, "node rig02 (host rig02): no GPUs known"),
])
def test_bad_settings_fail_in_the_preflight_without_contact(tmp_path, group_vars, message):
    rc, out, err = preflight(example(tmp_path, **group_vars))
    assert rc != 0
    messages = " ".join(failed_messages(out))
    assert message in messages, (messages, err[-2000:])
    assert not contacted(out), out["stats"]
    assert json.dumps(out["stats"]).count('"changed": 0') == len(out["stats"])
