#!/usr/bin/python
# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: capacity_picture
short_description: Draw the vGPU capacity report as a PNG on the controller
version_added: 0.1.0
description:
  - Draws the result of the P(gpufleet.vgpu.vgpu_capacity_report#filter) filter as a picture - per node and GPU one
    square per vGPU, filled where a running pod holds it, and a bar of the card's memory, filled by what running pods
    hold - and writes it to O(dest) on the controller when its content differs.
  - The same capacity always gives the same bytes, so a rerun with nothing changed reports no change.
  - Runs on the controller only (an action plugin); no host is contacted.
  - Needs Pillow on the controller; without it the task is skipped with a message.
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
  capacity:
    description: The P(gpufleet.vgpu.vgpu_capacity_report#filter) filter's result.
    type: dict
    required: true
  dest:
    description: Path of the PNG on the controller; its directory must exist.
    type: path
    required: true
requirements:
  - pillow (on the controller)
"""

EXAMPLES = r"""
- name: Capacity picture next to the report
  gpufleet.vgpu.capacity_picture:
    capacity: "{{ nodes.resources | gpufleet.vgpu.vgpu_capacity_report(pods.resources) }}"
    dest: gpufleet-report/capacity.png
  run_once: true
"""

RETURN = r"""
dest:
  description: The picture's path.
  returned: success
  type: str
size:
  description: The picture's size in bytes.
  returned: success
  type: int
"""
