# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: inventory_shape_errors
short_description: Inventory mistakes that Ansible's variable merge would hide
version_added: 0.1.0
author: gpufleet maintainers (@gpufleet)
description:
  - Finds hosts in two unrelated groups that set one of gpufleet's variables to different values (Ansible would
    pick one by group depth and name, silently), inventory hosts that share one C(ansible_host) and port, and
    hosts that still set a variable of an earlier release that one setting replaced (the per-role cluster access
    variables, now C(gpufleet_kube_auth); the per-node split variables, now C(device_plugin_vgpu)).
  - Controller only; it reads the inventory as C(ansible-inventory --export --list) prints it.
options:
  _input:
    description: The JSON of C(ansible-inventory --export --list), as a dict.
    type: dict
    required: true
  hosts:
    description: The hosts whose groups are compared (gpufleet's GPU nodes).
    type: list
    elements: str
    required: true
  all_hosts:
    description: Every inventory host (C(groups['all'])); those that set C(ansible_host) are compared by address,
      and each is checked for replaced variables.
    type: list
    elements: str
    required: true
  hostvars:
    description: Ansible's C(hostvars).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Check the inventory's shape
  ansible.builtin.assert:
    that: _errors | length == 0
    fail_msg: "{{ _errors | join('; ') }}"
  vars:
    _errors: >-
      {{ lookup('ansible.builtin.pipe', 'ansible-inventory --export --list -i inventories/example') | from_json
         | gpufleet.vgpu.inventory_shape_errors(groups['gpu_nodes'], groups['all'], hostvars) }}
"""

RETURN = r"""
_value:
  description: One message per mistake, naming the hosts, groups, variables and values; empty when none.
  type: list
  elements: str
"""


from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _inventory


def inventory_shape_errors(export, hosts, all_hosts, hostvars):
    return _inventory.shape_errors(export, hosts, all_hosts, hostvars)


def argument_spec_options(argument_specs):
    return _inventory.options_without_defaults(argument_specs["argument_specs"]["main"].get("options"))


class FilterModule:
    def filters(self):
        return {"inventory_shape_errors": inventory_shape_errors, "argument_spec_options": argument_spec_options}
