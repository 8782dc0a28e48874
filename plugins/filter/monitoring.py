# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: monitoring_expected_gpus
short_description: Each GPU node's Kubernetes name and the number of GPUs the inventory says it has
version_added: 0.1.0
author: gpufleet maintainers (@gpufleet)
description:
- For each inventory host, its Kubernetes node name (C(device_plugin_node_name), else the host name) and its expected GPU
  count - C(gpu_verify_expected_count), else the count of C(device_plugin_gpus). Hosts with neither are left out (nothing
  to compare with).
options:
  _input:
    description: Inventory host names (group gpu_nodes).
    type: list
    elements: str
    required: true
  hostvars:
    description: Ansible's C(hostvars).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Expected GPUs
  ansible.builtin.debug:
    msg: "{{ groups['gpu_nodes'] | gpufleet.vgpu.monitoring_expected_gpus(hostvars) }}"
"""

RETURN = r"""
_value:
  description: Node name to expected GPU count.
  type: dict
"""

from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _gpu_hosts


def monitoring_expected_gpus(hosts, hostvars):
    return _gpu_hosts.expected_counts(hosts, hostvars)


class FilterModule:
    def filters(self):
        return {"monitoring_expected_gpus": monitoring_expected_gpus}
