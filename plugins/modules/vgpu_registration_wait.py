#!/usr/bin/python
# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: vgpu_registration_wait
short_description: Wait until every GPU node registers the vGPU resources a device_plugin plan expects
version_added: 0.1.0
description:
  - Lists the cluster's Nodes with M(kubernetes.core.k8s_info) every O(delay) seconds until each node of O(expected)
    registers what the plan expects (P(gpufleet.vgpu.vgpu_registration_check#filter)), or O(timeout) seconds have
    passed; then returns the nodes and the check. It does not fail when the time is up - the caller says which node
    differs (the check's C(problems)).
  - With O(daemonsets), a node's registration counts only once the plugin that wrote it is the one running - those
    DaemonSets have rolled out (every scheduled pod updated, as C(kubectl rollout status) reads it) and the node's
    pod of them has been Ready for longer than O(status_period) plus 5 seconds. Until then the node's allocatable
    may still be what the replaced pod registered, because kubelet posts it only once per period.
  - One task line for the whole wait, with how long it took, where an C(until) loop prints "FAILED - RETRYING" at
    every poll of a normal deployment.
  - Every option of M(kubernetes.core.k8s_info)'s authentication (C(kubeconfig), C(context), C(host), C(api_key),
    ...) is passed on; the roles set them through the C(gpufleet.vgpu.kubernetes) module_defaults group.
author:
  - gpufleet maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.vgpu.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
options:
  expected:
    description: The device_plugin plan's C(expected) (M(gpufleet.vgpu.role_plan)), node name to resources.
    type: dict
    required: true
  timeout:
    description: Seconds to wait at most.
    type: int
    default: 300
  delay:
    description: Seconds between two polls.
    type: int
    default: 5
  daemonsets:
    description: Names of the plugin's DaemonSets in O(namespace) whose rollout and pods the wait checks; none, only
      the nodes' registration is compared.
    type: list
    elements: str
    default: []
  namespace:
    description: Namespace of O(daemonsets); required with them.
    type: str
  status_period:
    description: kubelet's C(nodeStatusUpdateFrequency) on the GPU nodes, in seconds.
    type: int
    default: 10
requirements:
  - kubernetes.core and the kubernetes Python client where M(kubernetes.core.k8s_info) runs
"""

EXAMPLES = r"""
- name: Wait until every GPU node registers its vGPUs
  gpufleet.vgpu.vgpu_registration_wait:
    expected: "{{ plan.expected }}"
    daemonsets: [volcano-device-plugin]
    namespace: kube-system
    timeout: 300
  register: registration

- name: Fail naming the nodes whose registration differs
  ansible.builtin.assert:
    that: registration.check.ok
    fail_msg: "{{ registration.check.problems | join('; ') }}"
"""

RETURN = r"""
resources:
  description: The Nodes as the last poll listed them.
  returned: success
  type: list
  elements: dict
check:
  description: The registration check of the last poll, C(ok) and C(problems) (with O(daemonsets), one line per
    DaemonSet still rolling out and per plugin pod not Ready long enough; then one per node and resource that
    differs).
  returned: success
  type: dict
polls:
  description: How many times the nodes were listed.
  returned: always
  type: int
waited_s:
  description: Seconds from the first poll to the last.
  returned: success
  type: float
"""
