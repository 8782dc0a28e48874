# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""What the inventory says about each GPU host: its Kubernetes node name, its vGPU settings and its GPUs.

Pure functions, no Ansible, controller only. The one place that reads a GPU host's variables by name (the cluster
roles see them through ``hostvars``); what the settings mean for the plugin is _vgpu_plugin.py.
"""

from __future__ import annotations

NODE_NAME = "device_plugin_node_name"
VGPU = "device_plugin_vgpu"
DECLARED_GPUS = "device_plugin_gpus"
# What gpu_verify read through NVML (its set_fact), and what a card group expects of its hosts.
MEASURED_GPUS = "gpu_verify_inventory"
EXPECTED_COUNT = "gpu_verify_expected_count"
EXPECTED_MEMORY = "gpu_verify_min_memory_mib"
EXPECTED_MODEL = "gpu_verify_model_pattern"


class InventoryError(ValueError):
    """A GPU host's variable has a value of the wrong type; the message names the variable."""


def node_name(hostvars, host):
    """The Kubernetes node name of an inventory host: device_plugin_node_name, else the host's name."""
    return (hostvars or {}).get(NODE_NAME) or host


def node_names(hosts, hostvars):
    """The Kubernetes node names of inventory hosts, in their order."""
    return [node_name(hostvars.get(host), host) for host in hosts or []]


def expected_counts(hosts, hostvars):
    """{node name: the GPUs it should have}: gpu_verify_expected_count, else the count of device_plugin_gpus; a
    value of the wrong type is kept as it is (the monitoring role's check names it)."""
    found = {}
    for host in hosts or []:
        own = hostvars.get(host) or {}
        count = own.get(EXPECTED_COUNT)
        if count is None:
            count = (own.get(DECLARED_GPUS) or {}).get("count")
        if count is not None:
            try:
                count = int(count)
            except (TypeError, ValueError):
                pass
            found[node_name(own, host)] = count
    return found


def _whole(value, variable):
    if isinstance(value, bool):
        raise InventoryError("%s must be an integer, got %r" % (variable, value))
    try:
        return int(value)
    except (TypeError, ValueError):
        raise InventoryError("%s must be an integer, got %r" % (variable, value)) from None


def gpus(hostvars):
    """A host's GPUs, [{uuid, index, model, memory_mib}]: what gpu_verify read through NVML, else what the inventory
    declares (device_plugin_gpus), else what its card group expects of it (gpu_verify_expected_count,
    _min_memory_mib, _model_pattern) - so a fresh fleet passes the preflight before any node is contacted; site.yml
    sizes with NVML's figures, read first. Empty when none of them says."""
    measured = hostvars.get(MEASURED_GPUS) or {}
    if measured.get("gpus"):
        return [{"uuid": g.get("uuid") or "GPU-index-%d" % g["index"], "index": g["index"],
                 "model": g.get("name") or "unknown", "memory_mib": int(g.get("memory_total_mib") or 0)}
                for g in measured["gpus"]]
    declared = hostvars.get(DECLARED_GPUS) or {}
    if declared.get("count"):
        memory = _whole(declared.get("memory_mib"), DECLARED_GPUS + ".memory_mib")
        return [{"uuid": "GPU-index-%d" % i, "index": i, "model": declared.get("model", "unknown"),
                 "memory_mib": memory} for i in range(_whole(declared["count"], DECLARED_GPUS + ".count"))]
    count, memory = hostvars.get(EXPECTED_COUNT), hostvars.get(EXPECTED_MEMORY)
    if count and memory:
        memory = _whole(memory, EXPECTED_MEMORY)
        return [{"uuid": "GPU-index-%d" % i, "index": i, "model": hostvars.get(EXPECTED_MODEL) or "unknown",
                 "memory_mib": memory} for i in range(_whole(count, EXPECTED_COUNT))]
    return []


def read(hosts, hostvars):
    """[{host, node, vgpu, gpus, error}] for the GPU hosts, in their order: ``vgpu`` is the host's own
    device_plugin_vgpu (None when it sets none), ``gpus`` None with ``error`` when a size has the wrong type."""
    found = []
    for host in hosts or []:
        hv = hostvars.get(host) or {}
        entry = {"host": host, "node": node_name(hv, host), "vgpu": hv.get(VGPU), "gpus": None, "error": None}
        try:
            entry["gpus"] = gpus(hv)
        except InventoryError as exc:
            entry["error"] = str(exc)
        found.append(entry)
    return found
