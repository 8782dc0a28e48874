# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: contract
short_description: A name the roles share (ConfigMaps, labels, annotations)
version_added: 0.1.0
author: gpufleet maintainers (@gpufleet)
description:
  - The names of module_utils/_contract.py by their role in the contract, so that role tasks never spell one out.
options:
  _terms:
    description: The names' keys - C(device_configmap), C(device_config_key), C(node_configmap), C(node_config_key),
      C(component_label), C(plugin_component), C(monitor_component), C(managed_by_label), C(config_hash),
      C(default_memory), C(scheduler_resync), C(cordoned_by), C(smoke_label).
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
- name: Read the plugin's device ConfigMap
  kubernetes.core.k8s_info:
    kind: ConfigMap
    namespace: kube-system
    name: "{{ lookup('gpufleet.vgpu.contract', 'device_configmap') }}"
"""

RETURN = r"""
_raw:
  description: The names, in the order asked.
  type: list
  elements: str
"""

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

from ansible_collections.gpufleet.vgpu.plugins.module_utils import _contract


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        names = _contract.names()
        unknown = [term for term in terms if term not in names]
        if unknown:
            raise AnsibleLookupError("contract: unknown name(s) %s; known: %s" % (", ".join(unknown),
                                                                                  ", ".join(sorted(names))))
        return [names[term] for term in terms]
