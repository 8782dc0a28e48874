#!/usr/bin/python
# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: nvml_info
short_description: Inventory a node's NVIDIA GPUs through NVML
version_added: 0.1.0
description:
  - Reads the driver, CUDA and NVML versions and, for every GPU, its identity, memory, PCIe link, temperature,
    power limit, persistence/compute/ECC/MIG modes and memory-health counters, using NVIDIA's nvidia-ml-py binding
    (C(import pynvml)).
  - A query that a GPU does not support (for example ECC on GeForce cards) is returned as V(null), never as a failure.
  - When NVML cannot be used, the module does not fail; it returns O(ignore:nvml.ok=false) with a diagnosis that
    names the cause and the next step (driver userspace missing, kernel module not loaded, library/kernel version
    mismatch). A GPU that cannot be opened (lost, reset required) gets its own diagnosis.
  - Run it with the interpreter that role M(gpufleet.vgpu.node_python) exports (C(node_python_interpreter)).
author:
  - gpufleet maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.vgpu.attributes
  - gpufleet.vgpu.attributes.info_module
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
options:
  health_state:
    description:
      - The state file of the GPU health check between runs (module M(gpufleet.vgpu.gpu_health_timer) writes it);
        when it exists, the result adds this boot's Xid events (those it recorded and those the kernel logged
        since, read without moving its position) and the GPUs of the node's last passed check.
    type: path
  xid_source:
    description: Where to read the kernel's Xid events, as M(gpufleet.vgpu.gpu_health_timer)'s O(gpufleet.vgpu.gpu_health_timer#module:xid_source).
    type: str
    default: auto
requirements:
  - nvidia-ml-py (C(pynvml)) on the node
  - the NVIDIA driver's C(libnvidia-ml.so.1) for real data (without it the module reports the diagnosis)
notes:
  - Memory values are MiB as NVML reports them; an RTX 4090 shows 24564 MiB, not 24576.
  - The PCIe link generation of an idle GPU is often lower than its maximum by design; compare widths instead.
seealso:
  - name: Role gpufleet.vgpu.gpu_verify
    description: Checks this module's result against the inventory's expectations.
    link: https://github.com/gpufleet/gpufleet/tree/main/roles/gpu_verify
  - name: Role gpufleet.vgpu.node_python
    description: Provides the interpreter with nvidia-ml-py.
    link: https://github.com/gpufleet/gpufleet/tree/main/roles/node_python
"""

EXAMPLES = r"""
- name: Inventory the GPUs
  gpufleet.vgpu.nvml_info:
  vars:
    ansible_python_interpreter: "{{ node_python_interpreter }}"
  register: gpus

- name: Show the first GPU
  ansible.builtin.debug:
    msg: "{{ gpus.nvml.gpus[0].name }} with {{ gpus.nvml.gpus[0].memory_total_mib }} MiB"
  when: gpus.nvml.ok and gpus.nvml.gpu_count > 0
"""

RETURN = r"""
nvml:
  description: The NVML inventory of the node.
  returned: always
  type: dict
  contains:
    ok:
      description: Whether NVML could be initialised and queried.
      type: bool
      sample: true
    diagnosis:
      description: Why NVML could not be used, or V(null).
      type: dict
      sample:
        error: DRIVER_NOT_LOADED
        code: 9
        gpu_index: null
        cause: the nvidia kernel module is not loaded
        next_step: check 'dkms status' ... then reboot the node
    driver_version:
      description: Driver version.
      type: str
      sample: 570.133.20
    cuda_driver_version:
      description: Highest CUDA version the driver supports.
      type: str
      sample: "12.8"
    nvml_version:
      description: NVML library version.
      type: str
      sample: 12.570.133.20
    gpu_count:
      description: Number of GPUs NVML enumerates.
      type: int
      sample: 5
    query_errors:
      description: System-level queries that failed with an error other than "not supported".
      type: dict
      sample: {}
    gpus:
      description:
        - One record per GPU index. Fields the GPU does not support are V(null).
        - A GPU that cannot be opened has only RV(nvml.gpus[].index) and RV(nvml.gpus[].diagnosis).
      type: list
      elements: dict
      contains:
        index:
          description: NVML index.
          type: int
        uuid:
          description: GPU UUID.
          type: str
        name:
          description: Product name.
          type: str
          sample: NVIDIA GeForce RTX 4090
        pci_bus_id:
          description: PCI bus id.
          type: str
          sample: "00000000:01:00.0"
        memory_total_mib:
          description: Total memory in MiB.
          type: int
          sample: 24564
        memory_used_mib:
          description: Used memory in MiB.
          type: int
        memory_free_mib:
          description: Free memory in MiB.
          type: int
        pcie_link_gen_current:
          description: Current PCIe link generation.
          type: int
        pcie_link_gen_max:
          description: Maximum PCIe link generation.
          type: int
        pcie_link_width_current:
          description: Current PCIe link width (lanes).
          type: int
        pcie_link_width_max:
          description: Maximum PCIe link width (lanes).
          type: int
        temperature_c:
          description: GPU core temperature in degrees Celsius.
          type: int
        power_limit_w:
          description: Power management limit in watts.
          type: float
        persistence_mode:
          description: Whether persistence mode is on.
          type: bool
        compute_mode:
          description: V(default), V(exclusive_thread), V(prohibited) or V(exclusive_process).
          type: str
        ecc_mode_current:
          description: Whether ECC is on.
          type: bool
        ecc_mode_pending:
          description: ECC mode after the next reset.
          type: bool
        ecc_uncorrected_volatile:
          description: Uncorrectable ECC errors since the driver loaded.
          type: int
        ecc_uncorrected_aggregate:
          description: Uncorrectable ECC errors over the GPU's lifetime.
          type: int
        retired_pages_pending:
          description: Whether retired pages wait for a reset (before Ampere).
          type: bool
        remapped_rows_pending:
          description: Whether a row remapping waits for a reset (Ampere and newer).
          type: bool
        remapped_rows_failure:
          description: Whether a row remapping failed (RMA).
          type: bool
        mig_mode_current:
          description: Whether MIG is on.
          type: bool
        mig_mode_pending:
          description: MIG mode after the next reset.
          type: bool
        query_errors:
          description: Queries of this GPU that failed with an error other than "not supported".
          type: dict
        diagnosis:
          description: Why this GPU could not be opened (for example V(GPU_IS_LOST)), or V(null).
          type: dict
    wsl:
      description: Whether the node is Windows Subsystem for Linux (GPUs through Windows' WDDM driver; unsupported).
      type: bool
    xid:
      description: The NVIDIA driver's Xid events of this boot (C(source), C(error), C(events) by card and code).
      type: dict
    baseline:
      description: The GPUs (index, UUID, bus ID) of the node's last passed health check, or V(null).
      type: dict
"""

import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.gpufleet.vgpu.plugins.module_utils import _gpu_health, _xid
from ansible_collections.gpufleet.vgpu.plugins.module_utils._nvml import collect, is_wsl

try:
    import pynvml
except ImportError:
    PYNVML_IMPORT_ERROR = traceback.format_exc()
    pynvml = None
else:
    PYNVML_IMPORT_ERROR = None


def main():
    module = AnsibleModule(argument_spec=dict(health_state=dict(type="path"),
                                              xid_source=dict(type="str", default="auto")),
                           supports_check_mode=True)
    if pynvml is None:
        module.fail_json(
            msg=missing_required_lib(
                "nvidia-ml-py",
                reason="to query NVML; run role gpufleet.vgpu.node_python and use its node_python_interpreter",
            ),
            exception=PYNVML_IMPORT_ERROR,
        )
    nvml = collect(pynvml)
    nvml["wsl"] = is_wsl()
    state = _gpu_health.load_state(module.params["health_state"]) if module.params["health_state"] else {}
    # Read only: the position stays the health check's, which reads the same lines again on its next run.
    xid = _xid.read(module.params["xid_source"], state.get("xid") or {})
    nvml["xid"] = {"source": xid["source"], "error": xid["error"], "events": xid["events"]}
    nvml["baseline"] = state.get("baseline")
    module.exit_json(changed=False, nvml=nvml)


if __name__ == "__main__":
    main()
