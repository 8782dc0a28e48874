# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: kubeflow_gang_patch
short_description: The JSON patch that makes Kubeflow's training-operator create Volcano PodGroups
version_added: 0.1.0
author: gpufleet maintainers (@gpufleet)
description:
- For the training-operator Deployment as C(kubernetes.core.k8s_info) returns it, the JSON patch that adds
  C(--gang-scheduler-name=<scheduler>) to its manager container - appended to C(args), or as new C(args) where the
  release manifest starts the manager with C(command) only - and the flag's current value.
- A flag already present (in C(command) or C(args), C(-) or C(--), C(=value) or a separate value) gives an empty patch.
options:
  _input:
    description: The Deployment.
    type: dict
    required: true
  scheduler:
    description: The gang scheduler's name.
    type: str
    default: volcano
  container:
    description: The manager container's name (the only container is taken when none has this name).
    type: str
    default: training-operator
"""

EXAMPLES = r"""
- name: The patch
  ansible.builtin.set_fact:
    gang: "{{ operator.resources[0] | gpufleet.vgpu.kubeflow_gang_patch('volcano') }}"
"""

RETURN = r"""
_value:
  description: C(patch) (JSON-patch operations, empty when the flag is set), C(current) (its value, or none) and
    C(container) (the manager container's index).
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _kubeflow


def kubeflow_gang_patch(deployment, scheduler="volcano", container="training-operator"):
    try:
        return _kubeflow.gang_patch(deployment, scheduler, container)
    except ValueError as exc:
        raise AnsibleFilterError("kubeflow_gang_patch: %s" % exc) from exc


def kubeflow_trainer_runtimes(runtimes, scheduler="volcano"):
    return _kubeflow.trainer_runtimes(runtimes, scheduler)


class FilterModule:
    def filters(self):
        return {"kubeflow_gang_patch": kubeflow_gang_patch, "kubeflow_trainer_runtimes": kubeflow_trainer_runtimes}
