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


def test_options_without_defaults_strips_nested_defaults():
    spec = {"a": {"type": "int", "default": 1},
            "b": {"type": "dict", "default": {}, "options": {"c": {"type": "str", "default": "{{ x }}"}}}}
    expected = {"a": {"type": "int"}, "b": {"type": "dict", "options": {"c": {"type": "str"}}}}
    assert inv.options_without_defaults(spec) == expected
    assert spec["a"]["default"] == 1  # the role's spec itself is left alone


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
