# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: vgpu_plugin_plan
short_description: Per-node vGPU settings of role device_plugin, from inventory host and group vars
version_added: 0.1.0
author: gpufleet maintainers (@gpufleet)
description:
  - Reads each GPU host's C(device_plugin_vgpu) (over the fleet's, key by key) and GPUs (measured by gpu_verify,
    else declared in C(device_plugin_gpus)), computes gpuMemoryFactor from the largest node, and returns the
    rendered ConfigMap contents and the registration every node must reach.
options:
  _input:
    description: >-
      Dict with C(hosts) (inventory hosts), C(vgpu) (the fleet's C(device_plugin_vgpu)), C(memory_factor) (auto or
      an integer), C(device_config), C(version) and C(node_label).
    type: dict
    required: true
  hostvars:
    description: Ansible's C(hostvars), or a dict of host to variables.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Plan the plugin configuration
  ansible.builtin.set_fact:
    plan: >-
      {{ {'hosts': groups['gpu_nodes'], 'vgpu': {'split': 2}, 'memory_factor': 'auto', 'device_config': {},
          'version': 'v1.12.0'} | gpufleet.vgpu.vgpu_plugin_plan(hostvars) }}
"""

RETURN = r"""
_value:
  description: >-
    C(errors) (nothing else when not empty), C(memory_factor), C(device_config), C(node_config) (JSON text),
    C(expected) (per node vgpu-number/-memory/-cores), C(daemonsets), C(node_label_patches), C(factor_by_node)
    (the factor each node alone would need), C(gpus) (what each node registers) and C(config_hash) (the plugin
    pods roll on it).
  type: dict
"""

import datetime

from ansible_collections.gpufleet.vgpu.plugins.module_utils import _vgpu_registration
from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _compat
from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _gpu_hosts
from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _vgpu_plugin as vp
from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _admission


def vgpu_plugin_plan(settings, hostvars):
    return vp.plan(settings, _gpu_hosts.read(settings.get("hosts"), hostvars))


def vgpu_registration_check(nodes, expected):
    return _vgpu_registration.check_registration(nodes, expected)


def vgpu_unseen_nodes(nodes, scheduler_pods):
    return _vgpu_registration.unseen_nodes(nodes, scheduler_pods)


def vgpu_resync_patches(nodes, scheduler_pods, now):
    if isinstance(now, str):
        now = datetime.datetime.fromisoformat(now.replace("Z", "+00:00"))
    if now.tzinfo is None:  # Ansible's now(utc=true) is naive
        now = now.replace(tzinfo=datetime.timezone.utc)
    return _vgpu_registration.resync_patches(nodes, scheduler_pods, now)


def vgpu_conflicting_daemonsets(daemonsets, listed, image_pattern):
    return vp.conflicting_daemonsets(daemonsets, listed, image_pattern)


def vgpu_node_names(hosts, hostvars):
    return _gpu_hosts.node_names(hosts, hostvars)


def vgpu_admission_policy(plan, name="gpufleet-vgpu-memory"):
    return _admission.memory_policy_for_plan(plan, name)


def vgpu_default_memory_policy(plan, name="gpufleet-vgpu-default-memory",
                               api_version=_admission.MUTATING_POLICY_APIS[0]):
    return _admission.default_memory_policy_for_plan(plan, name, api_version)


def vgpu_version_compatibility(volcano_version, plugin):
    return _compat.check(volcano_version, plugin)


class FilterModule:
    """vGPU device plugin filters."""

    def filters(self):
        return {"vgpu_plugin_plan": vgpu_plugin_plan, "vgpu_registration_check": vgpu_registration_check,
                "vgpu_unseen_nodes": vgpu_unseen_nodes, "vgpu_resync_patches": vgpu_resync_patches,
                "vgpu_conflicting_daemonsets": vgpu_conflicting_daemonsets,
                "vgpu_version_compatibility": vgpu_version_compatibility, "vgpu_node_names": vgpu_node_names,
                "vgpu_admission_policy": vgpu_admission_policy,
                "vgpu_default_memory_policy": vgpu_default_memory_policy}
