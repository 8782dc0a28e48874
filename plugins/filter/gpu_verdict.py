# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: gpu_verdict
short_description: Judge a node's nvml_info result against inventory expectations
version_added: 0.1.0
author: gpufleet maintainers (@gpufleet)
description:
  - Compares the RV(gpufleet.vgpu.nvml_info#module:nvml) result of one node with the expected GPU count, model
    pattern, minimum driver and memory, and a health policy.
  - Returns C(node), C(ok), C(failures), C(warnings) and one readable C(line) naming the node, the GPU and the cause.
options:
  _input:
    description: The C(nvml) dict returned by M(gpufleet.vgpu.nvml_info).
    type: dict
    required: true
  node:
    description: Name of the node, used in every message.
    type: str
    required: true
  expect:
    description:
      - Expectations; missing keys use the defaults.
      - C(expected_count) (int or null), C(model_pattern) (regex), C(min_driver) (for example C(550.54)),
        C(min_memory_mib) (int), C(fail_on_retired_pages_pending), C(fail_on_remapped_rows),
        C(fail_on_uncorrected_ecc), C(warn_on_pcie_degraded), C(warn_on_persistence_off) (bools).
    type: dict
    default: {}
"""

EXAMPLES = r"""
- name: Judge this node
  ansible.builtin.set_fact:
    verdict: "{{ result.nvml | gpufleet.vgpu.gpu_verdict(inventory_hostname, {'expected_count': 5}) }}"
"""

RETURN = r"""
_value:
  description: The verdict.
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.vgpu.plugins.module_utils._gpu_policy import evaluate, fleet_summary


def gpu_verdict(inventory, node, expect=None):
    try:
        xid = inventory.get("xid") or {}
        return evaluate(node, inventory, expect or {}, xid.get("events"), inventory.get("baseline"))
    except ValueError as exc:
        raise AnsibleFilterError("gpu_verdict: invalid expectations for %s: %s" % (node, exc)) from exc


def gpu_fleet_summary(verdicts):
    return fleet_summary(list(verdicts))


class FilterModule:
    """GPU verdict filters."""

    def filters(self):
        return {
            "gpu_verdict": gpu_verdict,
            "gpu_fleet_summary": gpu_fleet_summary,
        }
