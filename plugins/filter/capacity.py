# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: vgpu_capacity_report
short_description: The fleet's vGPU capacity per node and GPU
version_added: 0.1.0
author: gpufleet maintainers (@gpufleet)
description:
  - From the nodes' C(volcano.sh/node-vgpu-register) annotations, their allocatable resources and the running pods'
    vGPU allocations, per node and GPU - model, memory, split count, vGPUs, memory per vGPU (what a pod can really
    request, less than nominal), allocated - and fleet totals, with a Markdown rendering.
options:
  _input:
    description: Node objects as C(kubernetes.core.k8s_info) returns them.
    type: list
    elements: dict
    required: true
  pods:
    description: Pod objects (running ones) as C(kubernetes.core.k8s_info) returns them.
    type: list
    elements: dict
    required: true
  device_configmap:
    description:
      - The plugin's device ConfigMap as C(kubernetes.core.k8s_info) returns it, or null. It gives the MiB per
        C(volcano.sh/vgpu-memory) unit (its gpuMemoryFactor; 1 without it) and what a vGPU request without
        C(volcano.sh/vgpu-memory) gets, as the device_plugin role recorded it (empty means the whole card, Volcano's
        rule).
    type: dict
"""

EXAMPLES = r"""
- name: Capacity
  ansible.builtin.debug:
    msg: "{{ (nodes.resources | gpufleet.vgpu.vgpu_capacity_report(pods.resources, configmap.resources | first)).markdown }}"
"""

RETURN = r"""
_value:
  description: C(memory_factor), C(nodes) (per node, C(gpus) with the per-GPU figures), C(totals), C(markdown) and
    C(lines) (one line per node for the console).
  type: dict
"""

from ansible_collections.gpufleet.vgpu.plugins.module_utils import _capacity as cap
from ansible_collections.gpufleet.vgpu.plugins.module_utils import _contract


def vgpu_capacity_report(nodes, pods, device_configmap=None):
    annotations = ((device_configmap or {}).get("metadata") or {}).get("annotations") or {}
    return cap.full_report(nodes, pods, _contract.memory_factor(device_configmap) or 1,
                           annotations.get(_contract.DEFAULT_MEMORY, ""))


def smoke_line(result):
    return "%s: %s - %s" % (result["check"], result["status"], result["detail"])


class FilterModule:
    """Report filters."""

    def filters(self):
        return {"vgpu_capacity_report": vgpu_capacity_report, "smoke_line": smoke_line}
