# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""NVML inventory and error diagnoses, independent of Ansible.

``collect(nvml)`` takes the ``pynvml`` module (nvidia-ml-py) as an argument so that the same code runs against a
real driver and against the test suite's fake ``libnvidia-ml.so.1``. Private to the collection: no API promise.
"""

from __future__ import annotations

import os

# NVML return codes (nvml.h); the binding's own constants are used at run time, these names label diagnoses.
ERROR_NAMES = {
    1: "UNINITIALIZED",
    2: "INVALID_ARGUMENT",
    3: "NOT_SUPPORTED",
    4: "NO_PERMISSION",
    8: "INSUFFICIENT_POWER",
    9: "DRIVER_NOT_LOADED",
    10: "TIMEOUT",
    11: "IRQ_ISSUE",
    12: "LIBRARY_NOT_FOUND",
    13: "FUNCTION_NOT_FOUND",
    14: "CORRUPTED_INFOROM",
    15: "GPU_IS_LOST",
    16: "RESET_REQUIRED",
    17: "OPERATING_SYSTEM",
    18: "LIB_RM_VERSION_MISMATCH",
    28: "GPU_NOT_FOUND",
    999: "UNKNOWN",
}

NOT_SUPPORTED = 3
FUNCTION_NOT_FOUND = 13
# Per-device errors after which no further query on that GPU makes sense.
DEVICE_FATAL = frozenset((8, 11, 14, 15, 16, 28))

_DIAGNOSES = {
    "LIBRARY_NOT_FOUND": (
        "the NVIDIA driver's userspace library libnvidia-ml.so.1 is not installed",
        "install the driver (role gpufleet.vgpu.nvidia_driver) or check that libnvidia-ml.so.1 is in the loader path",
    ),
    "DRIVER_NOT_LOADED": (
        "the nvidia kernel module is not loaded: a reboot is pending after the install, the DKMS build failed, "
        "Secure Boot rejected the unsigned module, or nouveau holds the GPUs",
        "check 'dkms status', 'mokutil --sb-state' and 'lsmod | grep nouveau', then reboot the node",
    ),
    "LIB_RM_VERSION_MISMATCH": (
        "the driver userspace was upgraded but the old kernel module is still loaded",
        "reboot the node (or unload and reload the nvidia modules) so that the kernel module matches",
    ),
    "GPU_IS_LOST": (
        "the GPU has fallen off the bus or is otherwise inaccessible",
        "check power cables, riser and PCIe seating, and 'dmesg' for Xid 79; reboot the node",
    ),
    "RESET_REQUIRED": (
        "the GPU requires a reset before it can be used again",
        "drain the node and reset the GPU ('nvidia-smi -r -i <index>') or reboot the node",
    ),
    "INSUFFICIENT_POWER": (
        "a power cable is not connected or the supply cannot deliver enough power to the GPU",
        "check the GPU's power connectors and the PSU rating",
    ),
    "IRQ_ISSUE": (
        "the kernel detected an interrupt problem with the GPU",
        "check 'dmesg' and the BIOS/IOMMU settings; reboot the node",
    ),
    "CORRUPTED_INFOROM": (
        "the GPU's infoROM is corrupted",
        "the GPU needs an RMA or an infoROM recovery by the vendor",
    ),
    "NO_PERMISSION": (
        "the module has no permission to query NVML",
        "run as root (become: true)",
    ),
    "FUNCTION_NOT_FOUND": (
        "the installed driver is older than the NVML function the binding calls",
        "upgrade the driver, or pin an older nvidia-ml-py in node_python_requirements",
    ),
    "UNKNOWN": (
        "NVML failed with an unknown error (often: the driver's userspace is present but no usable kernel driver is)",
        "check 'nvidia-smi' and 'dmesg' on the node",
    ),
}


# Per-GPU wording where the init wording would mislead: a query of one device failing is not a missing driver.
_DEVICE_DIAGNOSES = {
    "UNKNOWN": (
        "the GPU answered an NVML query with an unknown error (a hung or failing GPU)",
        "check 'nvidia-smi -q -i <index>' and 'dmesg' for Xid errors; drain the node, then reset the GPU or reboot",
    ),
    "TIMEOUT": (
        "the GPU did not answer an NVML query in time (a hung GPU or a stuck driver)",
        "check 'dmesg' for Xid errors; drain the node, then reset the GPU or reboot",
    ),
}


def error_name(code):
    """Symbolic NVML error name for a numeric code."""
    return ERROR_NAMES.get(code, "ERROR_%s" % code)


def diagnose(code, gpu_index=None):
    """Map an NVML error code to a cause and next step; ``gpu_index`` names the GPU for per-device errors."""
    name = error_name(code)
    known = dict(_DIAGNOSES, **_DEVICE_DIAGNOSES) if gpu_index is not None else _DIAGNOSES
    cause, next_step = known.get(name, ("NVML returned %s" % name, "check 'nvidia-smi' and 'dmesg' on the node"))
    if gpu_index is not None:
        next_step = next_step.replace("<index>", str(gpu_index))
    return {
        "error": name,
        "code": code,
        "gpu_index": gpu_index,
        "cause": cause,
        "next_step": next_step,
    }


def _text(value):
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


def _bytes_to_mib(value):
    return None if value is None else int(value // (1024 * 1024))


COMPUTE_MODES = {0: "default", 1: "exclusive_thread", 2: "prohibited", 3: "exclusive_process"}


class _DeviceLost(Exception):
    def __init__(self, code):
        super().__init__(code)
        self.code = code


def _query(nvml, errors, field, fn, *args):
    """Call one NVML query; unsupported -> None, a device-fatal error -> _DeviceLost, others -> None + recorded."""
    try:
        return fn(*args)
    except nvml.NVMLError as exc:
        code = exc.value
        if code in (NOT_SUPPORTED, FUNCTION_NOT_FOUND):
            return None
        if code in DEVICE_FATAL:
            raise _DeviceLost(code) from None
        errors[field] = error_name(code)
        return None


def error_code(name):
    """Numeric NVML error code for a symbolic name (error_name's inverse), or None."""
    return next((code for code, known in ERROR_NAMES.items() if known == name), None)


def _device(nvml, index, handle):
    errors = {}

    def q(field, fn, *args):
        return _query(nvml, errors, field, fn, handle, *args)

    # The bus ID first: a GPU that fails a later query is still named by where it sits.
    pci = q("pci", nvml.nvmlDeviceGetPciInfo)
    try:
        return _device_fields(nvml, index, q, errors, pci)
    except _DeviceLost as exc:
        return _lost_device(index, exc.code, _text(pci.busId) if pci is not None else None)


def _device_fields(nvml, index, q, errors, pci):
    memory = q("memory", nvml.nvmlDeviceGetMemoryInfo)
    ecc = q("ecc_mode", nvml.nvmlDeviceGetEccMode)
    rows = q("remapped_rows", nvml.nvmlDeviceGetRemappedRows)
    mig = q("mig_mode", nvml.nvmlDeviceGetMigMode)
    power = q("power_limit", nvml.nvmlDeviceGetPowerManagementLimit)
    persistence = q("persistence_mode", nvml.nvmlDeviceGetPersistenceMode)
    compute = q("compute_mode", nvml.nvmlDeviceGetComputeMode)
    pending_pages = q("retired_pages_pending", nvml.nvmlDeviceGetRetiredPagesPendingStatus)
    return {
        "index": index,
        "uuid": _text(q("uuid", nvml.nvmlDeviceGetUUID)),
        "name": _text(q("name", nvml.nvmlDeviceGetName)),
        "pci_bus_id": _text(pci.busId) if pci is not None else None,
        "memory_total_mib": _bytes_to_mib(memory.total) if memory is not None else None,
        "memory_used_mib": _bytes_to_mib(memory.used) if memory is not None else None,
        "memory_free_mib": _bytes_to_mib(memory.free) if memory is not None else None,
        "pcie_link_gen_current": q("pcie_link_gen_current", nvml.nvmlDeviceGetCurrPcieLinkGeneration),
        "pcie_link_gen_max": q("pcie_link_gen_max", nvml.nvmlDeviceGetMaxPcieLinkGeneration),
        "pcie_link_width_current": q("pcie_link_width_current", nvml.nvmlDeviceGetCurrPcieLinkWidth),
        "pcie_link_width_max": q("pcie_link_width_max", nvml.nvmlDeviceGetMaxPcieLinkWidth),
        "temperature_c": q("temperature", nvml.nvmlDeviceGetTemperature, nvml.NVML_TEMPERATURE_GPU),
        "power_limit_w": None if power is None else round(power / 1000.0, 1),
        "persistence_mode": None if persistence is None else bool(persistence),
        "compute_mode": None if compute is None else COMPUTE_MODES.get(compute, str(compute)),
        "ecc_mode_current": None if ecc is None else bool(ecc[0]),
        "ecc_mode_pending": None if ecc is None else bool(ecc[1]),
        "ecc_uncorrected_volatile": q(
            "ecc_uncorrected_volatile", nvml.nvmlDeviceGetTotalEccErrors,
            nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC),
        "ecc_uncorrected_aggregate": q(
            "ecc_uncorrected_aggregate", nvml.nvmlDeviceGetTotalEccErrors,
            nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_AGGREGATE_ECC),
        "retired_pages_pending": None if pending_pages is None else bool(pending_pages),
        "remapped_rows_pending": None if rows is None else bool(rows[2]),
        "remapped_rows_failure": None if rows is None else bool(rows[3]),
        "mig_mode_current": None if mig is None else bool(mig[0]),
        "mig_mode_pending": None if mig is None else bool(mig[1]),
        "query_errors": errors,
        "diagnosis": None,
    }


def _lost_device(index, code, pci_bus_id=None):
    record = {"index": index, "uuid": None, "name": None, "pci_bus_id": pci_bus_id, "query_errors": {}}
    record["diagnosis"] = diagnose(code, gpu_index=index)
    return record


def _system(nvml, errors):
    cuda = _query(nvml, errors, "cuda_driver_version", nvml.nvmlSystemGetCudaDriverVersion)
    return {
        "driver_version": _text(_query(nvml, errors, "driver_version", nvml.nvmlSystemGetDriverVersion)),
        "nvml_version": _text(_query(nvml, errors, "nvml_version", nvml.nvmlSystemGetNVMLVersion)),
        # NVML encodes CUDA versions as major * 1000 + minor * 10 (12040 -> 12.4).
        "cuda_driver_version": None if cuda is None else "%d.%d" % (cuda // 1000, (cuda % 1000) // 10),
    }


def is_wsl(osrelease="/proc/sys/kernel/osrelease", dxg="/dev/dxg"):
    """Whether this is Windows Subsystem for Linux: its kernel names itself (5.15.167.4-microsoft-standard-WSL2) and
    the GPU is reached through Windows' driver by /dev/dxg, not through the NVIDIA Linux kernel module."""
    try:
        with open(osrelease, encoding="utf-8") as handle:
            if "microsoft" in handle.read().lower():
                return True
    except OSError:
        pass
    return os.path.exists(dxg)


def collect(nvml):
    """Inventory every GPU through the pynvml module ``nvml``; never raises NVMLError.

    Returns a dict with ``ok`` (NVML initialised), ``diagnosis`` (why not), system versions,
    ``gpu_count`` and ``gpus`` (one record per index; a GPU that cannot be opened has a ``diagnosis``).
    """
    result = {
        "ok": False,
        "diagnosis": None,
        "driver_version": None,
        "nvml_version": None,
        "cuda_driver_version": None,
        "gpu_count": 0,
        "gpus": [],
        "query_errors": {},
    }
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        result["diagnosis"] = diagnose(exc.value)
        return result
    try:
        result.update(_system(nvml, result["query_errors"]))
        count = nvml.nvmlDeviceGetCount()
        result["gpu_count"] = count
        for index in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                result["gpus"].append(_device(nvml, index, handle))
            except nvml.NVMLError as exc:
                result["gpus"].append(_lost_device(index, exc.value))
            except _DeviceLost as exc:
                result["gpus"].append(_lost_device(index, exc.code))
        result["ok"] = True
    except nvml.NVMLError as exc:
        result["diagnosis"] = diagnose(exc.value)
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass
    return result
