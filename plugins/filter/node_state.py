# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: node_state_verdict
short_description: Whether a node role may skip its tasks (the fast path)
version_added: 0.1.0
author: gpufleet maintainers (@gpufleet)
description:
  - Reads the stamp O(name) from the local fact C(gpufleet_state) (see module M(gpufleet.vgpu.node_state)) and
    says whether the node is as the role left it - the same input digest, nothing drifted, facts gathered now.
options:
  _input:
    description: The host's facts (C(ansible_facts)).
    type: dict
    required: true
  name:
    description: The stamp's name (the role's).
    type: str
    required: true
  digest:
    description: Digest of this run's inputs.
    type: str
    required: true
  enabled:
    description: V(false) always answers "not converged" (the role's C(*_fast_path) switch).
    type: bool
    default: true
  now:
    description: The controller's epoch; facts older than 300 s (a fact cache) do not count. Omit to skip that check.
    type: float
"""

EXAMPLES = r"""
- name: Decide
  ansible.builtin.set_fact:
    fast: "{{ ansible_facts | gpufleet.vgpu.node_state_verdict('container_runtime', digest, now=now().timestamp()) }}"
"""

RETURN = r"""
_value:
  description: C(converged) (bool) and C(reason), a sentence for the run's output.
  type: dict
"""

from ansible_collections.gpufleet.vgpu.plugins.module_utils import _node_state as ns


def node_state_verdict(facts, name, digest, enabled=True, now=None):
    return ns.verdict(facts or {}, name, digest, enabled=enabled, now=now)


class FilterModule:
    def filters(self):
        return {"node_state_verdict": node_state_verdict}
