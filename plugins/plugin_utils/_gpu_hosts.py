# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""What the inventory says about each GPU host: its Kubernetes node name, its vGPU settings and its GPUs.

Pure functions, no Ansible objects, controller only. The one place that reads a GPU host's variables by name (the
cluster roles see them through ``hostvars``): its vGPU settings and sizes, and how its containerd hands out the GPUs;
what the vGPU settings mean for the plugin is _vgpu_plugin.py.
"""

from __future__ import annotations

from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.gpufleet.vgpu.plugins.module_utils import _contract

NODE_NAME = "device_plugin_node_name"
VGPU = "device_plugin_vgpu"
DECLARED_GPUS = "device_plugin_gpus"
# What gpu_verify read through NVML (its set_fact), and what a card group expects of its hosts.
MEASURED_GPUS = "gpu_verify_inventory"
EXPECTED_COUNT = "gpu_verify_expected_count"
EXPECTED_MEMORY = "gpu_verify_min_memory_mib"
EXPECTED_MODEL = "gpu_verify_model_pattern"
# How the node's containerd hands GPUs to containers (role container_runtime): CDI mode, and the runtime's name.
CDI_MODE = "container_runtime_cdi"
RUNTIME_NAME = "container_runtime_runtime_name"
SET_AS_DEFAULT = "container_runtime_set_as_default"


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


# Where a host's GPU sizes come from, truest first (the plan records which, per node):
#   nvml          what gpu_verify read through NVML in this run;
#   registration  what the plugin registered on the Node (its units times the factor they were registered with);
#   declared      device_plugin_gpus, exact figures written in the inventory;
#   minimum       the card group's expectations (gpu_verify_expected_count, _min_memory_mib): a lower bound.
SOURCES = ("nvml", "registration", "declared", "minimum")


def gpus(hostvars):
    """(source, a host's GPUs [{uuid, index, model, memory_mib}]) from the inventory's side: what gpu_verify read
    through NVML, else what the inventory declares (device_plugin_gpus), else what its card group expects of it
    (gpu_verify_expected_count, _min_memory_mib, _model_pattern: a minimum), so a fresh fleet passes the preflight
    before any node is contacted. (None, []) when none of them says."""
    measured = hostvars.get(MEASURED_GPUS) or {}
    if measured.get("gpus"):
        return "nvml", [{"uuid": g.get("uuid") or "GPU-index-%d" % g["index"], "index": g["index"],
                         "model": g.get("name") or "unknown", "memory_mib": int(g.get("memory_total_mib") or 0)}
                        for g in measured["gpus"]]
    declared = hostvars.get(DECLARED_GPUS) or {}
    if declared.get("count"):
        memory = _whole(declared.get("memory_mib"), DECLARED_GPUS + ".memory_mib")
        return "declared", [{"uuid": "GPU-index-%d" % i, "index": i, "model": declared.get("model", "unknown"),
                             "memory_mib": memory}
                            for i in range(_whole(declared["count"], DECLARED_GPUS + ".count"))]
    count, memory = hostvars.get(EXPECTED_COUNT), hostvars.get(EXPECTED_MEMORY)
    if count and memory:
        memory = _whole(memory, EXPECTED_MEMORY)
        return "minimum", [{"uuid": "GPU-index-%d" % i, "index": i,
                            "model": hostvars.get(EXPECTED_MODEL) or "unknown", "memory_mib": memory}
                           for i in range(_whole(count, EXPECTED_COUNT))]
    return None, []


def read(hosts, hostvars):
    """[{host, node, vgpu, gpus, source, error}] for the GPU hosts, in their order: ``vgpu`` is the host's own
    device_plugin_vgpu (None when it sets none), ``gpus`` None with ``error`` when a size has the wrong type."""
    found = []
    for host in hosts or []:
        hv = hostvars.get(host) or {}
        entry = {"host": host, "node": node_name(hv, host), "vgpu": hv.get(VGPU), "gpus": None, "source": None,
                 "error": None}
        try:
            entry["source"], entry["gpus"] = gpus(hv)
        except InventoryError as exc:
            entry["error"] = str(exc)
        found.append(entry)
    return found


def registered_gpus(node, factor):
    """The GPUs a Node's plugin registered ([{uuid, index, model, memory_mib}]), their memory as the units times
    the gpuMemoryFactor they were registered with; [] without a registration."""
    value = (((node or {}).get("metadata") or {}).get("annotations") or {}).get(_contract.REGISTER)
    found = []
    for index, entry in enumerate(item for item in (value or "").split(":") if item):
        parts = entry.split(",")
        if len(parts) < 6:
            return []
        model = parts[3][len("NVIDIA-"):] if parts[3].startswith("NVIDIA-") else parts[3]
        try:
            found.append({"uuid": parts[0], "index": index, "model": model, "memory_mib": int(parts[2]) * factor})
        except ValueError:
            return []
    return found


def sized(hosts, nodes=None, factor=None):
    """The hosts of read() with the truest GPU sizes known: NVML's stay; a node the plugin has registered (its
    Node in ``nodes``, the k8s_info dicts of a run that reads the cluster, with the gpuMemoryFactor ``factor`` of the
    device ConfigMap it registered under) is sized from that registration, unless its vGPU settings leave GPUs out
    by index (the registration lists only the GPUs kept, so their indexes no longer match)."""
    by_name = {(n.get("metadata") or {}).get("name"): n for n in nodes or []}
    result = []
    for host in hosts or []:
        host = dict(host)
        vgpu = host.get("vgpu") if isinstance(host.get("vgpu"), dict) else {}
        if host.get("source") != "nvml" and factor and not vgpu.get("filter_index"):
            registered = registered_gpus(by_name.get(host["node"]), factor)
            if registered:
                host.update(source="registration", gpus=registered, registered_factor=factor)
        result.append(host)
    return result


def vgpu_mode(hostvars):
    """The vGPU operating mode a host's settings ask for: its device_plugin_vgpu's mode, else hami-core."""
    vgpu = (hostvars or {}).get(VGPU)
    mode = vgpu.get("mode") if isinstance(vgpu, dict) else None
    return mode or "hami-core"


def _flag(hostvars, variable, host, default):
    """A GPU host's boolean variable as the role reads it (``| bool``: YAML's booleans, an INI inventory's strings);
    ``default`` when the host does not set it or sets null."""
    value = hostvars.get(variable)
    if value is None:
        return default
    try:
        return boolean(value, strict=True)
    except TypeError:
        raise InventoryError("%s is %r for %s: allowed true or false" % (variable, value, host)) from None


def runtime_mode(hosts, hostvars):
    """{"cdi": bool, "runtime": name, "error": str or None}: how the GPU hosts' containerd hands out the GPUs, which
    the plugin's one DaemonSet must match on every host - CDI mode on all of them or on none, in CDI mode one runtime
    name (the RuntimeClass's handler), and outside it nvidia as containerd's default runtime (the stock DaemonSet has
    no runtimeClassName: its container finds NVML only through the default runtime)."""
    modes, names, non_default, errors = {}, {}, [], []
    for host in hosts or []:
        hv = hostvars.get(host) or {}
        try:
            modes[host] = _flag(hv, CDI_MODE, host, False)
            if not modes[host] and _flag(hv, SET_AS_DEFAULT, host, True) is False:
                non_default.append(host)
        except InventoryError as exc:
            errors.append(str(exc))
        names[host] = hv.get(RUNTIME_NAME) or "nvidia"
    on = sorted(host for host, cdi in modes.items() if cdi)
    off = sorted(host for host, cdi in modes.items() if not cdi)
    if on and off:
        errors.append("%s is true for %s but not for %s: the vGPU device plugin runs one DaemonSet on every GPU node, "
                      "in CDI mode or not; set it for all of device_plugin_gpu_hosts or for none"
                      % (CDI_MODE, ", ".join(on), ", ".join(off)))
    if non_default:
        errors.append("%s is False for %s, but outside CDI mode the vGPU device plugin runs without a "
                      "runtimeClassName: its container finds the GPUs (NVML) only through containerd's default "
                      "runtime, so such a node would register no vGPU. Allowed: true or null (the default), or false "
                      "together with %s: true" % (SET_AS_DEFAULT, ", ".join(sorted(non_default)), CDI_MODE))
    runtimes = sorted(set(names[host] for host in on))
    if len(runtimes) > 1:
        errors.append("%s differs between the GPU hosts in CDI mode (%s): the plugin's RuntimeClass names one handler"
                      % (RUNTIME_NAME, ", ".join(runtimes)))
    return {"cdi": bool(on) and not off, "runtime": runtimes[0] if runtimes else "nvidia",
            "error": "; ".join(errors) or None}
