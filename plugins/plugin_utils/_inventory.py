# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Inventory shape checks that Ansible's own variable merge hides (controller only, no Ansible imports)."""

from __future__ import annotations

import difflib

# The variables gpufleet's roles read. Two groups that set one of them for the same host, neither inside the other,
# are resolved by Ansible's group order (depth, then name) - silently.
ROLE_PREFIXES = ("node_python_", "nvidia_driver_", "container_runtime_", "gpu_verify_", "volcano_",
                 "device_plugin_", "monitoring_", "smoke_test_", "gpufleet_")

# Settings of earlier releases that one setting now holds. An inventory that still sets one would otherwise be
# ignored without a word: per-role cluster access would reach the cluster through the client's defaults - perhaps
# another cluster - and a per-node split would silently fall back to the fleet's.
REPLACED_VARIABLES = {
    "volcano_kubeconfig": "gpufleet_kube_auth.kubeconfig",
    "volcano_kube_context": "gpufleet_kube_auth.context",
    "device_plugin_kubeconfig": "gpufleet_kube_auth.kubeconfig",
    "device_plugin_kube_context": "gpufleet_kube_auth.context",
    "monitoring_kubeconfig": "gpufleet_kube_auth.kubeconfig",
    "monitoring_kube_context": "gpufleet_kube_auth.context",
    "smoke_test_kubeconfig": "gpufleet_kube_auth.kubeconfig",
    "smoke_test_kube_context": "gpufleet_kube_auth.context",
    "nvidia_driver_kubeconfig": "gpufleet_kube_auth.kubeconfig",
    "device_plugin_split_count": "device_plugin_vgpu.split",
    "device_plugin_core_scaling": "device_plugin_vgpu.core_scaling",
    "device_plugin_operating_mode": "device_plugin_vgpu.mode",
    "device_plugin_filter_uuids": "device_plugin_vgpu.filter_uuid",
    "device_plugin_filter_indexes": "device_plugin_vgpu.filter_index",
    "device_plugin_node_overrides": "device_plugin_vgpu in the host_vars of each node's host",
}
# What the replacing setting is, said once per message.
REPLACEMENTS = {
    "gpufleet_kube_auth": "one setting for every role that talks to the cluster (gpufleet_kube_auth takes "
                          "kubernetes.core's auth options kubeconfig, context, host, api_key, validate_certs and "
                          "ca_cert)",
    "device_plugin_vgpu": "one dict per GPU host or group with the keys split, core_scaling, mode, filter_uuid and "
                          "filter_index; a key it leaves out keeps the fleet's value",
}


def _ancestors(export):
    """group -> set of the groups above it, from `ansible-inventory --export --list`."""
    parents = {}
    for group, body in export.items():
        if group == "_meta" or not isinstance(body, dict):
            continue
        for child in body.get("children") or ():
            parents.setdefault(child, set()).add(group)
    memo = {}

    def walk(group, seen=()):
        if group not in memo:
            found = set()
            for parent in parents.get(group, ()):
                if parent not in seen:
                    found |= {parent} | walk(parent, seen + (group,))
            memo[group] = found
        return memo[group]

    return {group: walk(group) for group in export if group != "_meta"}


def host_groups(export, ancestors=None):
    """host -> set of every group it is in, directly or through children."""
    ancestors = _ancestors(export) if ancestors is None else ancestors
    hosts = {}
    for group, body in export.items():
        if group == "_meta" or not isinstance(body, dict):
            continue
        for host in body.get("hosts") or ():
            hosts.setdefault(host, set()).update({group} | ancestors.get(group, set()))
    return hosts


def group_conflicts(export, hosts, prefixes=ROLE_PREFIXES):
    """Messages for each host of ``hosts`` whose unrelated groups set one gpufleet variable to different values.

    Groups with different ``ansible_group_priority`` are an explicit order and not reported; a host variable of
    the same name settles the value for that host and is not reported either.
    """
    ancestors = _ancestors(export)
    host_vars = (export.get("_meta") or {}).get("hostvars") or {}
    membership = host_groups(export, ancestors)
    messages = []
    for host in sorted(hosts):
        groups = sorted(membership.get(host, ()))
        seen = {}
        for group in groups:
            variables = (export.get(group) or {}).get("vars") or {}
            for name, value in variables.items():
                if name.startswith(prefixes) and name not in host_vars.get(host, {}):
                    seen.setdefault(name, []).append((group, value))
        for name, settings in sorted(seen.items()):
            clashes = []
            for i, (group_a, value_a) in enumerate(settings):
                for group_b, value_b in settings[i + 1:]:
                    related = group_a in ancestors.get(group_b, ()) or group_b in ancestors.get(group_a, ())
                    priority = [(export.get(g) or {}).get("vars", {}).get("ansible_group_priority", 1)
                                for g in (group_a, group_b)]
                    if value_a != value_b and not related and priority[0] == priority[1]:
                        clashes.append((group_a, value_a, group_b, value_b))
            if clashes:
                group_a, value_a, group_b, value_b = clashes[0]
                messages.append(
                    "host %s is in groups %s (%s: %r) and %s (%s: %r), neither inside the other: Ansible would "
                    "silently take one by group depth and name. Put the host in one card group, set %s in its "
                    "host_vars, or order the groups with ansible_group_priority"
                    % (host, group_a, name, value_a, group_b, name, value_b, name))
    return messages


def duplicate_addresses(addresses):
    """Messages for inventory hosts that share one address and port; ``addresses``: host -> (address, port)."""
    by_address = {}
    for host, (address, port) in sorted(addresses.items()):
        by_address.setdefault((str(address), str(port or "")), []).append(host)
    messages = []
    for (address, port), names in sorted(by_address.items()):
        if len(names) > 1:
            messages.append(
                "hosts %s all have ansible_host %s%s: one machine under several names would get its driver, "
                "reboot and split from each of them. Give each its own address, or one inventory name"
                % (", ".join(names), address, (" port %s" % port) if port else ""))
    return messages


def replaced_variables(present):
    """Messages for the REPLACED_VARIABLES an inventory still sets; ``present``: host -> the names it sets."""
    hosts = {}
    for host, names in sorted(present.items()):
        for name in names:
            if name in REPLACED_VARIABLES:
                hosts.setdefault(name, []).append(host)
    return ["%s (set for %s) is no longer read: set %s instead, %s"
            % (name, ", ".join(names), REPLACED_VARIABLES[name],
               REPLACEMENTS[REPLACED_VARIABLES[name].split(".")[0].split()[0]])
            for name, names in sorted(hosts.items())]


# Variables with a role's prefix that are no role option: what the roles set for later ones (registered or set_fact
# outputs), and the GPU hosts' own settings the cluster roles read through hostvars (_gpu_hosts).
NOT_OPTIONS = ("container_runtime_containerd_result", "gpu_verify_inventory", "gpu_verify_verdict",
               "node_python_interpreter", "nvidia_driver_cordoned_by_run", "nvidia_driver_reboot_decision",
               "smoke_test_capacity", "smoke_test_result", "volcano_release", "device_plugin_gpus",
               "device_plugin_node_name")
# What an inventory lists in this variable is another tool's and never reported as misspelt.
FOREIGN = "gpufleet_foreign_variables"
ROLE_OPTION_PREFIXES = ROLE_PREFIXES[:-1]  # gpufleet_ is the collection's own, not a role's


def own_variables(export):
    """{name: [where it is set]} for every variable the inventory itself sets: group vars by group, host vars by
    host (``ansible-inventory --export --list``, which keeps each where it is written)."""
    found = {}
    for group, body in (export or {}).items():
        if group != "_meta" and isinstance(body, dict):
            for name in body.get("vars") or {}:
                found.setdefault(name, []).append("group %s" % group)
    for host, variables in ((export or {}).get("_meta") or {}).get("hostvars", {}).items():
        for name in variables or {}:
            found.setdefault(name, []).append("host %s" % host)
    return found


def unknown_names(names, known, prefixes, suggest=None):
    """(name, [the nearest of ``suggest``]) for each of ``names`` that starts with one of ``prefixes`` but is not
    ``known``: a misspelt variable, which Ansible would silently ignore while the role keeps its default."""
    found = []
    for name in sorted(set(names)):
        if not name.startswith(tuple(prefixes)) or name in known:
            continue
        found.append((name, difflib.get_close_matches(name, sorted(suggest or known), n=1, cutoff=0.6)))
    return found


def unknown_variables(export, known, foreign=()):
    """Messages for the inventory's variables that carry a role's prefix but no role reads: Ansible would ignore
    them, and the role keep its default, without a word."""
    # Replaced variables have messages of their own (replaced_variables): neither reported here nor suggested.
    variables = {name: where for name, where in own_variables(export).items()
                 if name not in REPLACED_VARIABLES and name not in set(foreign or ())}
    messages = []
    for name, nearest in unknown_names(variables, set(known) | set(NOT_OPTIONS), ROLE_OPTION_PREFIXES, suggest=known):
        where = variables[name]
        shown = ", ".join(where[:3]) + (" and %d more" % (len(where) - 3) if len(where) > 3 else "")
        hint = " - did you mean %s?" % " or ".join(nearest) if nearest else ""
        messages.append("%s (set in %s) is no variable of gpufleet's roles%s; list it in %s if it is another tool's"
                        % (name, shown, hint, FOREIGN))
    return messages


# site.yml's rollout pacing: play keywords, which Ansible templates before any host's variables exist, so only extra
# vars set them. Name -> (the value without an extra var, what it paces).
PACING = {
    "gpufleet_node_serial": ("1", "1 node at a time"),
    "gpufleet_node_max_fail_percentage": ("0", "the run stops at the first failed node"),
}


def pacing_errors(export, extra_vars):
    """Messages for rollout pacing the inventory sets to another value than the run uses (``extra_vars``' or the
    default): Ansible would pace the run by the other value without a word."""
    values = {}
    for group, body in (export or {}).items():
        if group != "_meta" and isinstance(body, dict):
            for name, value in (body.get("vars") or {}).items():
                values.setdefault(name, []).append(("group %s" % group, value))
    for host, variables in ((export or {}).get("_meta") or {}).get("hostvars", {}).items():
        for name, value in (variables or {}).items():
            values.setdefault(name, []).append(("host %s" % host, value))
    messages = []
    for name, (default, meaning) in PACING.items():
        used = str(extra_vars[name]) if name in (extra_vars or {}) else default
        for where, value in values.get(name, []):
            if str(value) != used:
                messages.append(
                    "%s is %s in %s, but this run uses %s: Ansible reads a play's serial and max_fail_percentage "
                    "before inventory variables exist. Pass it as an extra var (-e %s=%s) or remove it from the "
                    "inventory (the default: %s)" % (name, value, where, used, name, value, meaning))
    return messages


def group_errors(groups):
    """Messages for the groups site.yml needs: exactly one kube_control host, at least one gpu_nodes host; a
    missing group is looked for among the inventory's groups by its likely misspellings."""
    messages = []
    for group, wanted in (("kube_control", "exactly one host (it holds the kubeconfig)"),
                          ("gpu_nodes", "at least one host")):
        members = (groups or {}).get(group) or []
        if (group == "kube_control" and len(members) == 1) or (group == "gpu_nodes" and members):
            continue
        near = difflib.get_close_matches(group, [g for g in groups or {} if g != group], n=2, cutoff=0.6)
        messages.append("the inventory needs %s in group %s; found %d%s" % (
            wanted, group, len(members), " - the inventory has group %s: a misspelling of %s?"
            % (" and ".join(near), group) if near and not members else ""))
    return messages


def shape_errors(export, hosts, all_hosts, hostvars):
    """Every inventory shape message: group conflicts among ``hosts``, shared addresses and replaced variables among
    ``all_hosts``; ``hostvars``: host -> its variables (Ansible's hostvars)."""
    addresses, replaced = {}, {}
    for host in all_hosts or []:
        host_vars = hostvars.get(host) or {}
        if host_vars.get("ansible_host") is not None:
            addresses[host] = (host_vars["ansible_host"], host_vars.get("ansible_port") or "")
        replaced[host] = [name for name in REPLACED_VARIABLES if name in host_vars]
    return (group_conflicts(export or {}, hosts or []) + duplicate_addresses(addresses)
            + replaced_variables(replaced))
