# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: volcano_plan
short_description: Validate and build the Volcano scheduler, admission and chart settings of role volcano
version_added: 0.1.0
author: gpufleet maintainers (@gpufleet)
description:
  - Validates the structured scheduler settings (actions, tiers, deviceshare, binpack) and returns the scheduler
    configuration, the admission configuration, the chart's C(enabled_admissions) string and a hash of the
    configuration that rolls the scheduler when it changes.
options:
  _input:
    description: >-
      Dict with C(actions) (list or Volcano's comma string), C(tiers), C(deviceshare), C(binpack),
      C(custom_plugins), C(admission_namespaces), C(enabled_admissions) and C(scheduler_name). deviceshare arguments
      written inside C(tiers) are merged with C(deviceshare) and checked alike.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Plan the scheduler configuration
  ansible.builtin.set_fact:
    plan: >-
      {{ {'actions': ['enqueue', 'allocate', 'backfill'], 'tiers': volcano_scheduler_tiers,
          'deviceshare': {'vgpu_enable': true, 'schedule_policy': 'binpack'}, 'binpack': {},
          'admission_namespaces': ['mljobs'], 'enabled_admissions': ['/jobs/mutate'],
          'scheduler_name': 'volcano'} | gpufleet.vgpu.volcano_plan }}
"""

RETURN = r"""
_value:
  description: >-
    C(errors) (list; nothing else when not empty), C(scheduler_conf) and C(admission_conf) (YAML-ready dicts),
    C(device_configmap) (C(namespace) and C(name) of the ConfigMap deviceshare loads once; null without deviceshare),
    C(enabled_admissions) (string) and C(config_hash).
  type: dict
"""

from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _volcano_config as vc


def volcano_plan(settings):
    return vc.plan(settings)


def volcano_scheduler_labels(plan, device_configmaps=None):
    return vc.scheduler_pod_labels(plan, device_configmaps)


class FilterModule:
    def filters(self):
        return {"volcano_plan": volcano_plan, "volcano_scheduler_labels": volcano_scheduler_labels}
