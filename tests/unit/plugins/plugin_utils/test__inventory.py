"""Table tests for the inventory shape checks of site.yml's preflight (plugin_utils._inventory)."""

import pytest

from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _inventory as inv


def export(**groups):
    """An `ansible-inventory --export --list` document: group -> {hosts, children, vars}."""
    doc = {"_meta": {"hostvars": groups.pop("_hostvars", {})},
           "all": {"children": [g for g in groups if not any(g in (b.get("children") or []) for b in groups.values())]}}
    doc.update(groups)
    return doc


# The example inventory's shape: card groups under gpu_nodes, each with its own values.
EXAMPLE = dict(
    gpu_nodes={"children": ["rtx4090", "rtx4070s"], "vars": {"nvidia_driver_branch": "570"}},
    rtx4090={"hosts": ["rig01"], "vars": {"device_plugin_split_count": 2, "gpu_verify_model_pattern": "RTX 4090"}},
    rtx4070s={"hosts": ["rig02"], "vars": {"device_plugin_split_count": 2, "gpu_verify_model_pattern": "RTX 4070"}},
)

CONFLICTS = [
    ("the example: one card group per host", EXAMPLE, [], []),
    ("a host in both card groups",
     dict(EXAMPLE, rtx4090={"hosts": ["rig01", "rig02"], "vars": EXAMPLE["rtx4090"]["vars"]}),
     ["rig02"], ["gpu_verify_model_pattern"]),
    ("same value in both groups is no conflict",
     dict(EXAMPLE, rtx4090={"hosts": ["rig01", "rig02"], "vars": {"device_plugin_split_count": 2}}), [], []),
    # A child group overriding its parent is Ansible's documented order, not a silent pick.
    ("child overrides parent",
     dict(EXAMPLE, gpu_nodes={"children": ["rtx4090", "rtx4070s"], "vars": {"device_plugin_split_count": 4}}), [], []),
    # A rack group outside gpu_nodes that sets the split too: Ansible picks by depth, silently.
    ("unrelated rack group", dict(EXAMPLE, rack1={"hosts": ["rig01"], "vars": {"device_plugin_split_count": 8}}),
     ["rig01"], ["device_plugin_split_count"]),
    ("explicit ansible_group_priority is an order", dict(
        EXAMPLE, rack1={"hosts": ["rig01"], "vars": {"device_plugin_split_count": 8, "ansible_group_priority": 10}}),
     [], []),
    ("a host variable settles it", dict(
        EXAMPLE, rack1={"hosts": ["rig01"], "vars": {"device_plugin_split_count": 8}},
        _hostvars={"rig01": {"device_plugin_split_count": 3}}), [], []),
    ("variables of other tools are not ours to judge",
     dict(EXAMPLE, rack1={"hosts": ["rig01"], "vars": {"ntp_server": "a"}},
          rtx4090={"hosts": ["rig01"], "vars": {"ntp_server": "b"}}), [], []),
]


@pytest.mark.parametrize(("case", "groups", "hosts", "variables"), CONFLICTS, ids=[c[0] for c in CONFLICTS])
def test_group_conflicts(case, groups, hosts, variables):
    messages = inv.group_conflicts(export(**groups), ["rig01", "rig02"])
    # One message per host and variable in dispute.
    assert len(messages) == len(hosts) * len(variables), messages
    for host in hosts:
        assert any(m.startswith("host %s is in groups" % host) for m in messages), messages
    for variable in variables:
        assert any(variable in m for m in messages), (variable, messages)
    if not hosts:
        assert messages == [], messages


def test_a_conflict_names_both_groups_and_values():
    groups = dict(EXAMPLE, rack1={"hosts": ["rig01"], "vars": {"device_plugin_split_count": 8}})
    [message] = inv.group_conflicts(export(**groups), ["rig01"])
    assert "rack1 (device_plugin_split_count: 8)" in message and "rtx4090 (device_plugin_split_count: 2)" in message


def test_host_groups_follow_children_transitively():
    groups = inv.host_groups(export(**EXAMPLE))
    assert groups["rig01"] == {"rtx4090", "gpu_nodes", "all"}


ADDRESSES = [
    ("distinct", {"rig01": ("10.0.0.21", ""), "rig02": ("10.0.0.22", "")}, []),
    ("same address, other ports (NAT)", {"rig01": ("203.0.113.5", 2201), "rig02": ("203.0.113.5", 2202)}, []),
    ("one machine, two names", {"rig01": ("10.0.0.21", ""), "rig01b": ("10.0.0.21", "")},
     ["hosts rig01, rig01b all have ansible_host 10.0.0.21"]),
    ("same address and port", {"a": ("10.0.0.9", 22), "b": ("10.0.0.9", 22), "c": ("10.0.0.8", 22)},
     ["hosts a, b all have ansible_host 10.0.0.9 port 22"]),
]


@pytest.mark.parametrize(("case", "addresses", "expected"), ADDRESSES, ids=[a[0] for a in ADDRESSES])
def test_duplicate_addresses(case, addresses, expected):
    messages = inv.duplicate_addresses(addresses)
    assert len(messages) == len(expected)
    for message, start in zip(messages, expected):
        assert message.startswith(start), message


REPLACED = [
    ("none", {"master1": [], "rig01": []}, []),
    ("one role, one host", {"master1": ["volcano_kubeconfig"]},
     ["volcano_kubeconfig (set for master1) is no longer read: set gpufleet_kube_auth.kubeconfig instead"]),
    # group_vars/all sets it for every host: one message naming them all, in host order.
    ("every host", {"rig02": ["nvidia_driver_kubeconfig"], "master1": ["nvidia_driver_kubeconfig"]},
     ["nvidia_driver_kubeconfig (set for master1, rig02)"]),
    ("context", {"master1": ["smoke_test_kube_context", "smoke_test_kubeconfig"]},
     ["smoke_test_kube_context (set for master1) is no longer read: set gpufleet_kube_auth.context instead",
      "smoke_test_kubeconfig (set for master1)"]),
    # A per-node setting of an earlier release, set in a card group: the key of the one dict that replaces it.
    ("split count", {"rig01": ["device_plugin_split_count"], "rig02": ["device_plugin_node_overrides"]},
     ["device_plugin_node_overrides (set for rig02) is no longer read: set device_plugin_vgpu in the host_vars of "
      "each node's host instead, one dict per GPU host or group",
      "device_plugin_split_count (set for rig01) is no longer read: set device_plugin_vgpu.split instead, one dict"]),
    # Names still read, or never gpufleet's, are no business of this check.
    ("current names", {"master1": ["gpufleet_kube_auth", "device_plugin_kube_host", "kubeconfig",
                                   "device_plugin_vgpu"]}, []),
]


@pytest.mark.parametrize(("case", "present", "expected"), REPLACED, ids=[r[0] for r in REPLACED])
def test_replaced_variables(case, present, expected):
    messages = inv.replaced_variables(present)
    assert len(messages) == len(expected), messages
    for message, start in zip(messages, expected):
        assert message.startswith(start), message


def test_every_replaced_variable_is_gone_from_the_roles():
    """A replaced name that a role still read would make the check refuse a setting that works."""
    import pathlib  # pylint: disable=import-outside-toplevel
    roles = pathlib.Path(__file__).resolve().parents[4] / "roles"
    texts = "".join(p.read_text() for p in roles.rglob("*.yml"))
    assert [name for name in inv.REPLACED_VARIABLES if name in texts] == []
    assert all(target.split(".")[0].split()[0] in inv.REPLACEMENTS for target in inv.REPLACED_VARIABLES.values())


EXPORT = {
    "all": {"children": ["kube_control", "gpu_nodes"], "vars": {"volcano_scheduler_tier": [], "gpufleet_x": 1,
                                                                "other_tool_setting": 1}},
    "gpu_nodes": {"children": ["rtx4090"], "vars": {"device_plugin_vgpus": {"split": 3}}},
    "rtx4090": {"hosts": ["rig01"], "vars": {"gpu_verify_expected_count": 5}},
    "kube_control": {"hosts": ["master0"]},
    "_meta": {"hostvars": {"rig01": {"nvidia_driver_brnach": "570", "device_plugin_node_name": "rig01.k8s"}}},
}
KNOWN = {"volcano_scheduler_tiers", "device_plugin_vgpu", "gpu_verify_expected_count", "nvidia_driver_branch"}


def test_unknown_variables_are_named_with_the_nearest_known_one():
    messages = inv.unknown_variables(EXPORT, KNOWN)
    assert messages == [
        "device_plugin_vgpus (set in group gpu_nodes) is no variable of gpufleet's roles - did you mean "
        "device_plugin_vgpu?; list it in gpufleet_foreign_variables if it is another tool's",
        "nvidia_driver_brnach (set in host rig01) is no variable of gpufleet's roles - did you mean "
        "nvidia_driver_branch?; list it in gpufleet_foreign_variables if it is another tool's",
        "volcano_scheduler_tier (set in group all) is no variable of gpufleet's roles - did you mean "
        "volcano_scheduler_tiers?; list it in gpufleet_foreign_variables if it is another tool's"]
    # Another tool's variable that happens to share a prefix is left alone once listed.
    assert len(inv.unknown_variables(EXPORT, KNOWN, foreign=["volcano_scheduler_tier"])) == 2


@pytest.mark.parametrize("groups, needles", [
    ({"kube_control": ["m0"], "gpu_nodes": ["r1"]}, []),
    ({"kube-control": ["m0"], "gpu_nodes": ["r1"]},
     ["exactly one host (it holds the kubeconfig) in group kube_control; found 0 - the inventory has group "
      "kube-control: a misspelling of kube_control?"]),
    ({"kube_control": ["m0", "m1"], "gpu_nodes": ["r1"]}, ["in group kube_control; found 2"]),
    ({"kube_control": ["m0"], "gpu_node": ["r1"]},
     ["at least one host in group gpu_nodes; found 0 - the inventory has group gpu_node"]),
])
def test_group_errors(groups, needles):
    messages = inv.group_errors(groups)
    assert len(messages) == len(needles), messages
    for message, needle in zip(messages, needles):
        assert needle in message


@pytest.mark.parametrize("written, extra, expected", [
    ({}, {}, []),
    ({"gpu_nodes": {"gpufleet_node_serial": 1}}, {}, []),                      # what the default does anyway
    ({"gpu_nodes": {"gpufleet_node_serial": "25%"}}, {"gpufleet_node_serial": "25%"}, []),  # the extra var wins
    ({"gpu_nodes": {"gpufleet_node_serial": "25%"}}, {},
     ["gpufleet_node_serial is 25% in group gpu_nodes, but this run uses 1: Ansible reads a play's serial"]),
    ({"gpu_nodes": {"gpufleet_node_serial": 3}}, {"gpufleet_node_serial": 2},
     ["gpufleet_node_serial is 3 in group gpu_nodes, but this run uses 2"]),
    ({"_host": {"gpufleet_node_max_fail_percentage": 50}}, {},
     ["gpufleet_node_max_fail_percentage is 50 in host rig01, but this run uses 0"]),
])
def test_pacing_the_inventory_sets_is_refused_unless_the_run_uses_it(written, extra, expected):
    export = {"_meta": {"hostvars": {"rig01": written.get("_host", {})}}}
    export.update({group: {"vars": variables} for group, variables in written.items() if group != "_host"})
    messages = inv.pacing_errors(export, extra)
    assert len(messages) == len(expected), messages
    for message, start in zip(messages, expected):
        assert message.startswith(start), message
        assert "-e %s=" % message.split(" ")[0] in message
