#!/usr/bin/python
# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: vgpu_registration_wait
short_description: Wait until every GPU node registers the vGPU resources a device_plugin plan expects
version_added: 0.1.0
description:
  - Lists the cluster's Nodes every O(delay) seconds until each node of O(expected) registers what the plan expects
    (P(gpufleet.vgpu.vgpu_registration_check#filter)), or O(timeout) seconds have passed; then returns the nodes and
    the check. It does not fail when the time is up - the caller says which node differs (the check's C(problems)).
  - With O(daemonsets), a node's registration counts only once the plugin that wrote it is the one running - those
    DaemonSets have rolled out (every scheduled pod updated, as C(kubectl rollout status) reads it) and the node's
    pod of them has been Ready for longer than O(status_period) plus 5 seconds. Until then the node's allocatable
    may still be what the replaced pod registered, because kubelet posts it only once per period.
  - The whole wait is one module run with one kubernetes.core client, on the host the task runs on (the
    C(kube_control) host in the collection's playbooks). Listing with M(kubernetes.core.k8s_info) instead would start
    a module process, with its client and API discovery, for every listing of every poll.
  - One task line for the whole wait, with how long it took, where an C(until) loop prints "FAILED - RETRYING" at
    every poll of a normal deployment.
author:
  - gpufleet maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.vgpu.attributes
  - kubernetes.core.k8s_auth_options
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
notes:
  - The module is in the action group C(gpufleet.vgpu.kubernetes) with kubernetes.core's modules, so one
    C(module_defaults) entry gives them all the same auth options (role M(gpufleet.vgpu.device_plugin) takes them
    from C(gpufleet_kube_auth)).
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
  - the kubernetes Python client (and PyYAML) on the host the task runs on, as for M(kubernetes.core.k8s_info)
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
msg:
  description: How the wait ended, or which listing failed.
  returned: always
  type: str
waited_s:
  description: Seconds from the first poll to the last.
  returned: success
  type: float
"""

import copy

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.vgpu.plugins.module_utils import _vgpu_registration
from ansible_collections.kubernetes.core.plugins.module_utils.args_common import AUTH_ARG_SPEC
from ansible_collections.kubernetes.core.plugins.module_utils.k8s.client import get_api_client
from ansible_collections.kubernetes.core.plugins.module_utils.k8s.core import AnsibleK8SModule
from ansible_collections.kubernetes.core.plugins.module_utils.k8s.exceptions import CoreException
from ansible_collections.kubernetes.core.plugins.module_utils.k8s.service import K8sService


def argument_spec():
    """kubernetes.core's auth options, then the wait's own."""
    spec = copy.deepcopy(AUTH_ARG_SPEC)
    spec.update({
        "expected": {"type": "dict", "required": True},
        "timeout": {"type": "int", "default": 300},
        "delay": {"type": "int", "default": 5},
        "daemonsets": {"type": "list", "elements": "str", "default": []},
        "namespace": {"type": "str"},
        "status_period": {"type": "int", "default": 10},
    })
    return spec


def main():
    # AnsibleK8SModule fails with kubernetes.core's message when the kubernetes client (or PyYAML) is missing.
    module = AnsibleK8SModule(module_class=AnsibleModule, argument_spec=argument_spec(), supports_check_mode=True)
    params = module.params
    if params["timeout"] < 0 or params["delay"] < 1 or params["status_period"] < 1:
        module.fail_json(msg="timeout must be >= 0, delay and status_period >= 1, got %d, %d and %d"
                         % (params["timeout"], params["delay"], params["status_period"]), polls=0)
    if params["daemonsets"] and not params["namespace"]:
        module.fail_json(msg="daemonsets %s need namespace (the plugin's)" % params["daemonsets"], polls=0)
    try:
        service = K8sService(get_api_client(module=module), module)
    except CoreException as exc:
        module.fail_json(msg=str(exc), polls=0)

    def list_objects(kind, api_version, namespace=None, label_selectors=None):
        # K8sService.find is k8s_info's own listing: the same objects and the same error messages.
        try:
            return service.find(kind, api_version, namespace=namespace, label_selectors=label_selectors)
        except CoreException as exc:
            return {"failed": True, "msg": str(exc)}

    waited = _vgpu_registration.wait_for_registration(
        list_objects, params["expected"], daemonsets=params["daemonsets"], namespace=params["namespace"],
        status_period=params["status_period"], timeout=params["timeout"], delay=params["delay"])
    if "failed" in waited:
        module.fail_json(msg=waited["failed"], polls=waited["polls"])
    module.exit_json(changed=False, resources=waited["resources"], check=waited["check"], polls=waited["polls"],
                     waited_s=waited["waited_s"],
                     msg=("every GPU node registered (after %d s)" % round(waited["waited_s"]) if waited["ok"] else
                          "not every GPU node registered within %d s" % params["timeout"]))


if __name__ == "__main__":
    main()
