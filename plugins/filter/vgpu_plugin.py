# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: vgpu_plugin_plan
short_description: Per-node vGPU settings of role device_plugin, from inventory host and group vars
version_added: 0.1.0
author: gpufleet maintainers (@gpufleet)
description:
  - Reads each GPU host's split count, core scaling, operating mode, device filters and GPUs (measured by
    gpu_verify, else declared in C(device_plugin_gpus)), applies C(device_plugin_node_overrides), computes
    gpuMemoryFactor from the largest node, and returns the rendered ConfigMap contents and the registration every
    node must reach.
options:
  _input:
    description: >-
      Dict with C(hosts) (inventory hosts), C(defaults) (split, core_scaling, mode), C(overrides), C(memory_factor)
      (auto or an integer), C(device_config) and C(version).
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
      {{ {'hosts': groups['gpu_nodes'], 'defaults': {'split': 2}, 'overrides': {}, 'memory_factor': 'auto',
          'device_config': {}, 'version': 'v1.12.0'} | gpufleet.vgpu.vgpu_plugin_plan(hostvars) }}
"""

RETURN = r"""
_value:
  description: >-
    C(errors) (nothing else when not empty), C(memory_factor), C(device_config), C(node_config) (JSON text),
    C(expected) (per node vgpu-number/-memory/-cores), C(daemonsets), C(node_label_patches), C(factor_by_node)
    (the factor each node alone would need), C(gpus) (what each node registers), C(handshake), C(config_hash) (the
    plugin pods roll on it) and C(device_config_hash) (Volcano's scheduler rolls on it).
  type: dict
"""

from ansible_collections.gpufleet.vgpu.plugins.module_utils import _vgpu_registration
from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _compat
from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _vgpu_plugin as vp
from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _admission


def vgpu_plugin_plan(settings, hostvars):
    return vp.plan(settings, hostvars)


def vgpu_registration_check(nodes, expected, scheduler_pods=None):
    return _vgpu_registration.check_registration(nodes, expected, scheduler_pods)


def vgpu_conflicting_daemonsets(daemonsets, listed, image_pattern):
    return vp.conflicting_daemonsets(daemonsets, listed, image_pattern)


def vgpu_node_names(hosts, hostvars):
    return vp.node_names(hosts, hostvars)


def vgpu_admission_policy(plan, name="gpufleet-vgpu-memory"):
    largest = _admission.largest_gpu(plan.get("gpus") or {}, plan["memory_factor"])
    if largest is None:
        return []
    resource = (plan.get("device_config") or {}).get("resourceMemoryName") or "volcano.sh/vgpu-memory"
    return _admission.policy(name, largest, plan["memory_factor"], resource)


def vgpu_default_memory_policy(plan, name="gpufleet-vgpu-default-memory",
                               api_version=_admission.MUTATING_POLICY_APIS[0]):
    splits = {node: want["split"] for node, want in (plan.get("expected") or {}).items()}
    share = _admission.even_share(plan.get("gpus") or {}, splits, plan["memory_factor"])
    if share is None:
        return []
    config = plan.get("device_config") or {}
    names = {key: config[field] for key, field in (("number", "resourceCountName"), ("memory", "resourceMemoryName"),
                                                   ("percentage", "resourceMemoryPercentageName")) if config.get(field)}
    return _admission.default_memory_policy(name, share, api_version, names)


def vgpu_version_compatibility(volcano_version, plugin):
    return _compat.check(volcano_version, plugin)


class FilterModule:
    """vGPU device plugin filters."""

    def filters(self):
        return {"vgpu_plugin_plan": vgpu_plugin_plan, "vgpu_registration_check": vgpu_registration_check,
                "vgpu_conflicting_daemonsets": vgpu_conflicting_daemonsets,
                "vgpu_version_compatibility": vgpu_version_compatibility, "vgpu_node_names": vgpu_node_names,
                "vgpu_admission_policy": vgpu_admission_policy,
                "vgpu_default_memory_policy": vgpu_default_memory_policy}
