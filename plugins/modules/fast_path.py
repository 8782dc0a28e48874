#!/usr/bin/python
# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: fast_path
short_description: Decide on the controller whether a node role may skip its tasks
version_added: 0.1.0
description:
  - The fast path of this collection's node roles (C(node_python), C(nvidia_driver), C(container_runtime)). Runs on
    the controller only (an action plugin); the node is not contacted.
  - Digests the inputs of the role this task belongs to - the values of the options in its
    C(meta/argument_specs.yml) (entry point C(main), less its C(<role>_fast_path) switch), the node facts that change
    what a role does (OS family, distribution and version, architecture, kernel, virtualization) and gpufleet's code
    (the role's files and the collection's plugins, Markdown excepted).
  - Compares that digest with the stamp that M(gpufleet.vgpu.node_state) recorded at the end of the role's last full
    run, as re-observed by the local fact C(gpufleet_state) during this run's fact gathering. The role may skip its
    tasks when the digests are equal, nothing the stamp watches drifted and the facts are this run's (at most 300 s
    old, so that a fact cache never stands in for the node).
  - Prints, per node, whether the role runs and why.
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
  enabled:
    description: V(false) always answers "run every task" (the role's C(<role>_fast_path) switch).
    type: bool
    default: true
  role:
    description:
      - The node role to decide for, from outside it (site.yml decides which nodes a run disrupts before the roles
        run). Its options are read as the role reads them - the inventory's values over its defaults file - so the
        digest is the one the role computes itself. Default, the role the task belongs to.
    type: str
notes:
  - Needs facts gathered with the C(local) and C(date_time) subsets (the defaults) in this run.
  - Options whose values change on every run (a timestamp, a random value) make the role run in full every time.
seealso:
  - module: gpufleet.vgpu.node_state
"""

EXAMPLES = r"""
# In a node role's tasks/main.yml: decide, converge when needed, record what was converged to.
- name: Fast path
  gpufleet.vgpu.fast_path:
    enabled: "{{ container_runtime_fast_path }}"
  register: _container_runtime_fast

- name: Converge
  ansible.builtin.include_tasks: converge.yml
  when: not _container_runtime_fast.converged

- name: Record the converged state for the next run's fast path
  gpufleet.vgpu.node_state:
    name: container_runtime
    digest: "{{ _container_runtime_fast.digest }}"
    spec:
      trees: [/etc/containerd]
  when: not _container_runtime_fast.converged and not ansible_check_mode
"""

RETURN = r"""
converged:
  description: Whether the node is as the role's last full run left it, so that its tasks may be skipped.
  returned: success
  type: bool
reason:
  description: Why, as a sentence.
  returned: success
  type: str
  sample: "changed on the node: tree /etc/containerd changed"
digest:
  description: The digest of this run's inputs, for M(gpufleet.vgpu.node_state) to record.
  returned: success
  type: str
msg:
  description: The host, the decision and the reason, as printed.
  returned: success
  type: str
"""
