#!/usr/bin/python
# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: role_plan
short_description: Check a gpufleet role's settings and plan what it renders, on the controller
version_added: 0.1.0
description:
  - The one check of a role's settings, run both by the playbooks' preflight (before any host is contacted) and at
    the start of the role. Runs on the controller only (an action plugin); no host is contacted.
  - Reads the role's options from its C(meta/argument_specs.yml) (entry point C(main)) and their values as the role
    sees them - the inventory's, else the role's defaults, templated.
  - Refuses, one message per mistake, each naming the variable, the value and what is allowed - values YAML read
    as another type than meant (an unquoted version such as C(1.15) is a number, C(yes) a boolean, a plain string
    where a list belongs), Ansible's own type, choice and element checks, and the role's own rules (paths, pins,
    ranges, cross-field rules, what the GPUs can honour).
  - Returns the role's plan (what its tasks and templates render) as keys of the result.
  - For the C(device_plugin) role the GPU sizes come from the truest source known, recorded per node in
    C(expected.<node>.source) - C(nvml) (what gpu_verify read in this run), C(registration) (what the plugin
    registered on the Node, given in O(cluster)), C(declared) (C(device_plugin_gpus)) or C(minimum) (the card
    group's C(gpu_verify_expected_count) and C(gpu_verify_min_memory_mib)).
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
  role:
    description: The role to plan (C(node_python), C(nvidia_driver), C(container_runtime), C(gpu_verify),
      C(volcano), C(device_plugin), C(monitoring), C(smoke_test)). Default, the role the task belongs to.
    type: str
  cluster:
    description:
      - What the cluster says, for the C(device_plugin) role inside a run - C(nodes) (Node objects as
        M(kubernetes.core.k8s_info) returns them) and C(device_configmap) (the plugin's device ConfigMap, or null).
    type: dict
notes:
  - Unknown variables with a role's prefix are the inventory check's (M(gpufleet.vgpu.inventory_check)), which sees
    every host's and group's own variables.
seealso:
  - module: gpufleet.vgpu.inventory_check
"""

EXAMPLES = r"""
# In a role's tasks/main.yml: check, then use the plan.
- name: Check the settings and plan
  gpufleet.vgpu.role_plan:
  register: _volcano_plan

# In a preflight play, for a role that has not run yet (its defaults are read from the role).
- name: Check the cluster roles' settings
  gpufleet.vgpu.role_plan:
    role: "{{ item }}"
  loop: [volcano, device_plugin, monitoring, smoke_test]
"""

RETURN = r"""
errors:
  description: One message per failed rule (empty when the settings are valid).
  returned: always
  type: list
  elements: str
expected:
  description: C(device_plugin) only - per node the registration expected (vgpu-number, vgpu-memory, vgpu-cores), with
    the GPU sizes' C(source) and whether the memory is C(memory_exact) or a minimum.
  returned: success, role device_plugin
  type: dict
expect:
  description: C(gpu_verify) only - the expectations the GPU check applies (MIG mode resolved from the host's vGPU
    settings).
  returned: success, role gpu_verify
  type: dict
"""
