# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: volcano_scheduler_labels
short_description: Pod labels that roll Volcano's scheduler when a configuration it reads once changes
version_added: 0.1.0
author: gpufleet maintainers (@gpufleet)
description:
- The scheduler conf's hash (C(gpufleet.io/scheduler-config)) and, where the conf enables deviceshare, a hash of the device
  ConfigMap's data as the cluster has it (C(gpufleet.io/device-config); C(missing) when it does not exist). deviceshare
  loads that ConfigMap once per process (Volcano 1.15.1, config.InitDevicesConfig), so a change by anyone - the device_plugin
  role, or a hand edit - rolls the scheduler at the volcano role's next chart upgrade.
options:
  _input:
    description: The volcano role's plan (M(gpufleet.vgpu.role_plan)).
    type: dict
    required: true
  device_configmaps:
    description: The device ConfigMap as C(kubernetes.core.k8s_info) returns it (its C(resources)); omit where the plan
      has no C(device_configmap).
    type: list
    elements: dict
"""

EXAMPLES = r"""
- name: Labels for the chart's scheduler_podLabels
  ansible.builtin.set_fact:
    labels: "{{ plan | gpufleet.vgpu.volcano_scheduler_labels(device_cm.resources) }}"
"""

RETURN = r"""
_value:
  description: Label name to value.
  type: dict
"""

from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _volcano_config as vc


def volcano_scheduler_labels(plan, device_configmaps=None):
    return vc.scheduler_pod_labels(plan, device_configmaps)


def volcano_queue_definitions(queues, existing=None):
    return vc.queue_definitions(queues, existing)


class FilterModule:
    def filters(self):
        return {"volcano_scheduler_labels": volcano_scheduler_labels,
                "volcano_queue_definitions": volcano_queue_definitions}
