#!/usr/bin/python
# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: inventory_check
short_description: Check the inventory's shape and variables before any host is contacted
version_added: 0.1.0
description:
  - Runs on the controller only (an action plugin). Reads the inventory as C(ansible-inventory --export --list) prints
    it, where each variable stays with the group or host that sets it.
  - Refuses, one message per mistake - a missing or misspelt C(kube_control) or C(gpu_nodes) group (exactly one
    host holds the kubeconfig; at least one GPU host), variables with a role's prefix that no role reads (naming
    the nearest known variable), a host in two unrelated groups that set one gpufleet variable differently,
    several inventory names for one address and port, variables of earlier releases that one setting now
    holds, and rollout pacing (C(gpufleet_node_serial), C(gpufleet_node_max_fail_percentage)) that the inventory
    sets to another value than the run uses - play keywords, which only extra vars can set.
  - Names in C(gpufleet_foreign_variables) belong to another tool and are never reported.
author:
  - gpufleet maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.vgpu.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
options: {}
notes:
  - When ansible-inventory cannot read the inventory (vaulted group_vars without the vault secret), the checks that
    need it are skipped and C(skipped_checks) says so; the group check still runs.
seealso:
  - module: gpufleet.vgpu.role_plan
"""

EXAMPLES = r"""
- name: Check the inventory
  gpufleet.vgpu.inventory_check:
  run_once: true
"""

RETURN = r"""
errors:
  description: One message per mistake (empty when the inventory passes).
  returned: always
  type: list
  elements: str
skipped_checks:
  description: Why the checks that need C(ansible-inventory) did not run, or null.
  returned: always
  type: str
"""
