# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: vgpu_registration_check
short_description: Compare the GPU nodes' registered vGPU resources with what the inventory asks for
version_added: 0.1.0
author: gpufleet maintainers (@gpufleet)
description:
- Checks C(volcano.sh/vgpu-number), C(volcano.sh/vgpu-memory) and C(volcano.sh/vgpu-cores) in each node's allocatable against
  the C(expected) map of the device_plugin role's plan (M(gpufleet.vgpu.role_plan)).
- Whether Volcano's scheduler has seen the registration is C(vgpu_unseen_nodes).
options:
  _input:
    description: Node objects as C(kubernetes.core.k8s_info) returns them.
    type: list
    elements: dict
    required: true
  expected:
    description: C(expected) of the device_plugin role's plan (M(gpufleet.vgpu.role_plan)).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Check
  ansible.builtin.debug:
    msg: "{{ (nodes.resources | gpufleet.vgpu.vgpu_registration_check(plan.expected)).problems }}"
"""

RETURN = r"""
_value:
  description: C(ok) and C(problems) (one line per node and resource that differs, naming the node).
  type: dict
"""

import datetime

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.vgpu.plugins.module_utils import _vgpu_registration
from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _compat
from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _gpu_hosts
from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _vgpu_plugin as vp
from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _admission


def vgpu_registration_check(nodes, expected):
    return _vgpu_registration.check_registration(nodes, expected)


def vgpu_unseen_nodes(nodes, scheduler_pods):
    try:
        return _vgpu_registration.unseen_nodes(nodes, scheduler_pods)
    except ValueError as exc:  # a scheduler start time that is not RFC 3339
        raise AnsibleFilterError("vgpu_unseen_nodes: %s" % exc) from exc


def vgpu_resync_patches(nodes, scheduler_pods, now):
    if isinstance(now, str):
        now = datetime.datetime.fromisoformat(now.replace("Z", "+00:00"))
    if now.tzinfo is None:  # Ansible's now(utc=true) is naive
        now = now.replace(tzinfo=datetime.timezone.utc)
    try:
        return _vgpu_registration.resync_patches(nodes, scheduler_pods, now)
    except ValueError as exc:
        raise AnsibleFilterError("vgpu_resync_patches: %s" % exc) from exc


def vgpu_conflicting_daemonsets(daemonsets, listed, image_pattern):
    return vp.conflicting_daemonsets(daemonsets, listed, image_pattern)


def vgpu_node_names(hosts, hostvars):
    return _gpu_hosts.node_names(hosts, hostvars)


def vgpu_admission_policy(plan, name="gpufleet-vgpu-memory", scheduler_names=("volcano",), nodes=()):
    return _admission.request_policies_for_plan(plan, name, scheduler_names, nodes)


def vgpu_default_memory_policy(plan, name="gpufleet-vgpu-default-memory",
                               api_version=_admission.MUTATING_POLICY_APIS[0]):
    return _admission.default_memory_policy_for_plan(plan, name, api_version)


def vgpu_default_memory_probe(plan, namespace, image, scheduler_name="volcano"):
    return _admission.default_memory_probe_for_plan(plan, namespace, image, scheduler_name)


def vgpu_version_compatibility(volcano_version, plugin):
    return _compat.check(volcano_version, plugin)


class FilterModule:
    """vGPU device plugin filters."""

    def filters(self):
        return {"vgpu_registration_check": vgpu_registration_check,
                "vgpu_unseen_nodes": vgpu_unseen_nodes, "vgpu_resync_patches": vgpu_resync_patches,
                "vgpu_conflicting_daemonsets": vgpu_conflicting_daemonsets,
                "vgpu_version_compatibility": vgpu_version_compatibility, "vgpu_node_names": vgpu_node_names,
                "vgpu_admission_policy": vgpu_admission_policy,
                "vgpu_default_memory_policy": vgpu_default_memory_policy,
                "vgpu_default_memory_probe": vgpu_default_memory_probe}
