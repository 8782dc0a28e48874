# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""What Project-HAMi's volcano-vgpu-device-plugin registers for a node, and the settings gpufleet renders for it.

Pure functions, no Ansible, controller only: the ``device_plugin`` role's plan through its filters (expected
registration, gpuMemoryFactor, rendered ConfigMaps); whether a node has registered is
module_utils/_vgpu_registration.py. The lab runs the real plugin; its emulator for large benchmark fleets keeps a
reading of its own (tools/lab/gpufleet_lab/emulator.py), compared with the real binary in tests/lab/test_plugin.py.
This reading:

- v1.12.0+: ``volcano-vgpu-device-config`` (no defaults when missing), command-line flags override it only when
  given, then the node's entry in ``volcano-vgpu-node-config`` (split count, core scaling, device filters, mode).
- before v1.12.0: the node ConfigMap is ignored and the flag defaults win over the device ConfigMap (upstream
  volcano-vgpu-device-plugin#87 and #119) - hence the one-DaemonSet-per-split-count fallback.
- kubelet drops a device list larger than gRPC's 4 MiB message limit (upstream #145): ``volcano.sh/vgpu-memory``
  then reads 0. For NVML's 40-character UUIDs that is about 64,000 memory units per node.
"""

from __future__ import annotations

from ansible_collections.gpufleet.vgpu.plugins.module_utils import _contract

import hashlib
import json
import re

import yaml

# kubelet reads each device plugin's ListAndWatch with gRPC's default 4 MiB receive limit. Plugin v1.12.0 lists one
# device per vgpu-memory unit, "<uuid>-memory-<i>" (server.go apiDevices), so a large node's list is dropped whole
# (upstream volcano-vgpu-device-plugin#145). The lab checks this against kubelet's own device manager.
LIST_AND_WATCH_LIMIT = 4 * 1024 * 1024
# An NVML UUID is "GPU-" and 36 characters; GPUs only declared in the inventory are sized as such.
UUID_LENGTH = 40
# The auto factor keeps every list within this share of the limit, so that a driver reporting a few more MiB, or a
# GPU more, does not tip a node over it.
AUTO_FACTOR_HEADROOM = 0.9
NODE_CONFIG_VERSION = (1, 12, 0)
# The first release with a CDI variant of the DaemonSet (volcano-vgpu-device-plugin-cdi.yml: DEVICE_LIST_STRATEGY
# cdi-cri, runtimeClassName nvidia).
CDI_VERSION = (1, 12, 0)
FLAG_DEFAULTS = {"split": 2, "memory_factor": 1, "core_scaling": 1.0}
OPERATING_MODES = ("hami-core", "mig")
SPLIT_LABEL = _contract.SPLIT_LABEL

DEVICE_CONFIG_DEFAULTS = {
    "resourceCountName": "volcano.sh/vgpu-number",
    "resourceMemoryName": "volcano.sh/vgpu-memory",
    "resourceMemoryPercentageName": "volcano.sh/vgpu-memory-percentage",
    "resourceCoreName": "volcano.sh/vgpu-cores",
    "overwriteEnv": False,
    "defaultMemory": 0,
    "defaultCores": 0,
    "defaultGPUNum": 1,
    "deviceSplitCount": 10,
    "deviceMemoryScaling": 1,
    "deviceCoreScaling": 1,
    "gpuMemoryFactor": 1,
    "disableCoreLimit": False,
    "knownMigGeometries": [],
}


# Read from the device ConfigMap by Volcano 1.15.1's scheduler (pkg/scheduler/api/devices/config/vgpu.go) and by
# plugin v1.12.0 (pkg/config/config.go), and used by neither: a container without vgpu-memory gets 100 % of the card
# (Volcano pkg/scheduler/api/devices/util.go ExtractResourceRequest), one without vgpu-cores 0, one without
# vgpu-number none. A value other than upstream's would only mislead (device_plugin_default_memory does the first).
UNUSED_KEYS = ("defaultMemory", "defaultCores", "defaultGPUNum")


class PluginConfigError(ValueError):
    """The plugin would refuse to start (or crash) with this configuration."""


def image_version(image):
    """'docker.io/projecthami/volcano-vgpu-device-plugin:v1.12.0' -> (1, 12, 0); None when the tag is no version."""
    match = re.search(r":v?(\d+)\.(\d+)(?:\.(\d+))?(?:[-+@].*)?$", image or "")
    if not match:
        return None
    return tuple(int(part or 0) for part in match.groups())


def flag_value(args, name):
    """Value of --name=value or --name value in a container's args, or None when the flag is not given."""
    args = list(args or [])
    for index, arg in enumerate(args):
        if arg.startswith("--%s=" % name):
            return arg.split("=", 1)[1]
        if arg == "--%s" % name and index + 1 < len(args):
            return args[index + 1]
    return None


def resolve_config(node_name, device_config, node_config, args, version):
    """Effective settings of the plugin on one node.

    device_config: the parsed ``nvidia:`` section of volcano-vgpu-device-config, or None when the ConfigMap is missing.
    node_config: the parsed config.json of volcano-vgpu-node-config ({"nodeconfig": [...]}) or None.
    args: the plugin container's args. version: tuple from image_version() or None (treated as current).
    """
    modern = version is None or version >= NODE_CONFIG_VERSION
    if modern:
        if device_config is None:
            raise PluginConfigError("%s is missing: plugin v1.12.0 has no defaults for it (gpuMemoryFactor 0 "
                                    "divides by zero)" % _contract.DEVICE_CONFIGMAP)
        split = device_config.get("deviceSplitCount")
        factor = device_config.get("gpuMemoryFactor")
        cores = device_config.get("deviceCoreScaling", 1)
    else:
        split, factor, cores = (FLAG_DEFAULTS["split"], FLAG_DEFAULTS["memory_factor"], FLAG_DEFAULTS["core_scaling"])
    for key, flag, cast in (("split", "device-split-count", int), ("factor", "gpu-memory-factor", int),
                            ("cores", "device-cores-scaling", float)):
        given = flag_value(args, flag)
        if given is not None:
            if key == "split":
                split = cast(given)
            elif key == "factor":
                factor = cast(given)
            else:
                cores = cast(given)
    settings = {"split": split, "memory_factor": factor, "core_scaling": cores, "mode": "hami-core",
                "filter_uuid": [], "filter_index": [], "node_config_applied": False}
    if modern and node_config:
        for entry in node_config.get("nodeconfig") or []:
            if entry.get("name") != node_name:
                continue
            settings["node_config_applied"] = True
            if entry.get("devicesplitcount"):
                settings["split"] = int(entry["devicesplitcount"])
            if entry.get("devicecorescaling"):
                settings["core_scaling"] = float(entry["devicecorescaling"])
            if entry.get("operatingmode"):
                settings["mode"] = entry["operatingmode"]
            filters = entry.get("filterdevices") or {}
            settings["filter_uuid"] = list(filters.get("uuid") or [])
            settings["filter_index"] = [int(i) for i in filters.get("index") or []]
    if not isinstance(settings["memory_factor"], int) or settings["memory_factor"] < 1:
        raise PluginConfigError("gpuMemoryFactor must be an integer >= 1, got %r" % (settings["memory_factor"],))
    if not isinstance(settings["split"], int) or settings["split"] < 1:
        raise PluginConfigError("deviceSplitCount must be an integer >= 1, got %r" % (settings["split"],))
    return settings


def memory_list_bytes(gpus, factor):
    """Size of the plugin's vgpu-memory ListAndWatch message for these GPUs. Each device is one protobuf entry of
    its ID and the word Healthy: 13 bytes around the ID for every ID shorter than 117 characters."""
    size = 0
    for gpu in gpus:
        prefix = max(len(gpu["uuid"]), UUID_LENGTH) + len("-memory-")
        units = gpu["memory_mib"] // factor
        for digits in range(1, len(str(max(units - 1, 0))) + 1):
            with_digits = min(units, 10 ** digits) - (10 ** (digits - 1) if digits > 1 else 0)
            size += max(with_digits, 0) * (prefix + digits + 13)
    return size


def kept_gpus(gpus, settings):
    """The GPUs the plugin registers: those not left out by filter_uuid / filter_index."""
    return [g for g in gpus if g["uuid"] not in settings["filter_uuid"] and g["index"] not in settings["filter_index"]]


def registration(gpus, settings):
    """Annotation value of volcano.sh/node-vgpu-register and the node's extended resources.

    gpus: [{"uuid", "index", "model", "memory_mib"}] as NVML reports them. Filtered devices are left out.
    """
    factor = settings["memory_factor"]
    kept = kept_gpus(gpus, settings)
    entries = ["%s,%d,%d,NVIDIA-%s,true,%s" % (g["uuid"], settings["split"], g["memory_mib"] // factor, g["model"],
                                               settings["mode"]) for g in kept]
    memory_units = sum(g["memory_mib"] // factor for g in kept)
    resources = {
        "volcano.sh/vgpu-number": len(kept) * settings["split"],
        # One device per unit: past kubelet's message limit the whole list is dropped and the resource reads 0.
        "volcano.sh/vgpu-memory": memory_units if memory_list_bytes(kept, factor) <= LIST_AND_WATCH_LIMIT else 0,
        "volcano.sh/vgpu-cores": int(len(kept) * 100 * settings["core_scaling"]),
    }
    return ":".join(entries) + ":" if entries else "", resources


def memory_factor(nodes_gpus, limit=LIST_AND_WATCH_LIMIT * AUTO_FACTOR_HEADROOM):
    """Smallest gpuMemoryFactor that keeps every node's vgpu-memory device list within `limit` bytes."""
    factor = 1
    while any(memory_list_bytes(gpus, factor) > limit for gpus in nodes_gpus):
        factor += 1
    return factor


def device_config(overrides=None):
    """The complete ``nvidia:`` section of volcano-vgpu-device-config (v1.12.0 has no defaults for missing keys)."""
    merged = dict(DEVICE_CONFIG_DEFAULTS)
    unknown = sorted(set(overrides or {}) - set(DEVICE_CONFIG_DEFAULTS) - {"resourcePriorityName", "passDeviceSpecs"})
    if unknown:
        raise PluginConfigError("unknown device-config key(s): %s; allowed: %s"
                                % (", ".join(unknown), ", ".join(sorted(DEVICE_CONFIG_DEFAULTS))))
    merged.update(overrides or {})
    problems = []
    for key in ("deviceMemoryScaling", "deviceCoreScaling"):
        value = merged[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            problems.append("%s must be a number > 0 (> 1 oversubscribes), got %r" % (key, value))
    for key in UNUSED_KEYS:
        if merged[key] != DEVICE_CONFIG_DEFAULTS[key]:
            problems.append("%s: %r has no effect - Volcano 1.15.1 and plugin v1.12.0 read it but never use it (a "
                            "vGPU request without memory gets the whole card; see device_plugin_default_memory)"
                            % (key, merged[key]))
    for key, low in (("deviceSplitCount", 1), ("gpuMemoryFactor", 1)):
        value = merged[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            problems.append("%s must be an integer >= %d, got %r" % (key, low, value))
    if problems:
        raise PluginConfigError("; ".join(problems))
    return merged


def device_config_yaml(config):
    """The device ConfigMap's file: ``{"nvidia": config}`` as YAML, byte for byte what Ansible's
    ``to_nice_yaml(indent=2)`` wrote before the plan rendered it (so a release of gpufleet alone changes nothing)."""
    return yaml.safe_dump({"nvidia": config}, indent=2, allow_unicode=True, default_flow_style=False, sort_keys=True)


def node_config(nodes):
    """config.json of volcano-vgpu-node-config from {node: {split, core_scaling, mode, filter_uuid, filter_index}}."""
    entries = []
    for name in sorted(nodes):
        spec = nodes[name]
        entry = {"name": name, "operatingmode": spec.get("mode", "hami-core"),
                 "devicesplitcount": int(spec["split"]), "devicecorescaling": float(spec.get("core_scaling", 1)),
                 "migstrategy": "none",
                 "filterdevices": {"uuid": list(spec.get("filter_uuid", [])),
                                   "index": [int(i) for i in spec.get("filter_index", [])]}}
        entries.append(entry)
    # One line per node: compact, since the ConfigMap holds every GPU node of the fleet (1 MiB limit).
    lines = [json.dumps(entry, sort_keys=True, separators=(",", ":")) for entry in entries]
    return "{\"nodeconfig\": [\n%s\n]}\n" % ",\n".join(lines)


# The keys of device_plugin_vgpu, in the vocabulary of the node ConfigMap's entries.
VGPU_KEYS = ("split", "core_scaling", "mode", "filter_uuid", "filter_index")


def vgpu_problems(vgpu):
    """Messages for one device_plugin_vgpu dict (empty when valid), each naming the key and the allowed values.
    Keys left out, or null (YAML's `filter_uuid:` with nothing after it), are not checked: they come from the
    fleet's dict, or the role's defaults."""
    if not isinstance(vgpu, dict):
        return ["must be a dict with the keys %s, got %r" % (", ".join(VGPU_KEYS), vgpu)]
    vgpu = {key: value for key, value in vgpu.items() if value is not None}
    problems = []
    unknown = sorted(set(vgpu) - set(VGPU_KEYS))
    if unknown:
        problems.append("unknown key(s) %s; allowed: %s" % (", ".join(map(str, unknown)), ", ".join(VGPU_KEYS)))
    split = vgpu.get("split", 1)
    if not isinstance(split, int) or isinstance(split, bool) or not 1 <= split <= 100:
        problems.append("split must be an integer from 1 to 100, got %r" % (split,))
    scaling = vgpu.get("core_scaling", 1)
    if isinstance(scaling, bool) or not isinstance(scaling, (int, float)) or scaling <= 0:
        problems.append("core_scaling must be a number > 0 (> 1 oversubscribes), got %r" % (scaling,))
    mode = vgpu.get("mode", "hami-core")
    if mode not in OPERATING_MODES:
        problems.append("mode must be one of %s, got %r" % (", ".join(OPERATING_MODES), mode))
    uuids = vgpu.get("filter_uuid", [])
    if not isinstance(uuids, list) or not all(isinstance(u, str) for u in uuids):
        problems.append("filter_uuid must be a list of GPU UUIDs, got %r" % (uuids,))
    indexes = vgpu.get("filter_index", [])
    if not isinstance(indexes, list) or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0
                                                for i in indexes):
        problems.append("filter_index must be a list of GPU indexes (integers >= 0), got %r" % (indexes,))
    return problems


def vgpu_settings(fleet, own, base):
    """One node's settings: its host's device_plugin_vgpu (``own``, None when unset) over the fleet's, key by key,
    over ``base``, the role's default dict (defaults/main.yml: the fleet's dict may be a partial one that
    group_vars/all wrote) - a card group sets {split: 3} and keeps the fleet's other keys."""
    merged = {}
    for given in (base or {}, fleet or {}, own or {}):
        merged.update({key: value for key, value in given.items() if value is not None})
    return {key: merged[key] for key in VGPU_KEYS}


def _digest(data):
    """16 hex digits of SHA-256 over ``data`` as sorted JSON (what Ansible's ``to_json(sort_keys=true)`` writes)."""
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def plan(settings, hosts):
    """Everything the device_plugin role renders and then expects, from the inventory.

    settings: {vgpu: the fleet's device_plugin_vgpu, vgpu_defaults: the role's default of it (the keys a partial
    dict leaves out), memory_factor ('auto' or int), device_config: {...overrides},
    version, node_label}. hosts: the GPU hosts as _gpu_hosts.read() returns them.
    """
    errors, nodes = [], {}
    fleet, base = settings.get("vgpu") or {}, settings.get("vgpu_defaults")
    errors.extend("device_plugin_vgpu: %s" % problem for problem in vgpu_problems(fleet))
    fleet = fleet if isinstance(fleet, dict) else {}
    for host in hosts or []:
        name = host["node"]
        where = "node %s (host %s)" % (name, host["host"])
        if host["error"]:
            errors.append("%s: %s" % (where, host["error"]))
        elif not host["gpus"]:
            errors.append("%s: no GPUs known - run gpu_verify on it first, declare device_plugin_gpus: {count, "
                          "model, memory_mib}, or give its card group gpu_verify_expected_count and "
                          "gpu_verify_min_memory_mib" % where)
        if host["vgpu"] is not None:
            errors.extend("device_plugin_vgpu of %s: %s" % (where, problem) for problem in vgpu_problems(host["vgpu"]))
        if name in nodes:
            errors.append("%s: node name also used by host %s (device_plugin_node_name)" % (where, nodes[name]["host"]))
        nodes[name] = dict(vgpu_settings(fleet, host["vgpu"] if isinstance(host["vgpu"], dict) else None, base),
                           host=host["host"], gpus=host["gpus"] or [], source=host.get("source"),
                           registered_factor=host.get("registered_factor"))
    factor = settings.get("memory_factor", "auto")
    if factor == "auto":
        factor = memory_factor([n["gpus"] for n in nodes.values()])
    elif isinstance(factor, bool) or not isinstance(factor, int) or factor < 1:
        errors.append("device_plugin_gpu_memory_factor must be 'auto' or an integer >= 1, got %r" % (factor,))
    version = image_version("x:%s" % settings.get("version", ""))
    # The image tags are v-prefixed (v1.12.0); 1.12.0 would fail only when the node pulls the image.
    if version is None or not str(settings.get("version", "")).startswith("v"):
        errors.append("device_plugin_version must look like v1.12.0, got %r" % (settings.get("version"),))
    try:
        overrides = dict(settings.get("device_config") or {})
        config = device_config(overrides) if not errors else None
    except PluginConfigError as exc:
        errors.append("device_plugin_device_config: %s" % exc)
    if errors:
        return {"errors": errors}
    config["gpuMemoryFactor"] = factor
    # The fleet's values, for a node without an entry of its own (every GPU host of the inventory has one).
    config["deviceSplitCount"] = vgpu_settings(fleet, None, base)["split"]
    config["deviceCoreScaling"] = vgpu_settings(fleet, None, base)["core_scaling"]
    legacy = version < NODE_CONFIG_VERSION
    expected, groups, kept = {}, {}, {}
    for name in sorted(nodes):
        spec = nodes[name]
        effective = {"split": int(spec["split"]), "memory_factor": factor, "core_scaling": float(spec["core_scaling"]),
                     "mode": spec["mode"], "filter_uuid": spec["filter_uuid"],
                     "filter_index": [int(i) for i in spec["filter_index"]]}
        if legacy:
            # Before v1.12 only flags count: one DaemonSet per split count; filters and modes are not available.
            effective.update(mode="hami-core", filter_uuid=[], filter_index=[])
            groups.setdefault(effective["split"], []).append(name)
        kept[name] = kept_gpus(spec["gpus"], effective)
        dummy, resources = registration(spec["gpus"], effective)
        # Sizes from a minimum (the card group's expectations), or from a registration under another factor, give
        # the memory a node registers at least, not exactly (_gpu_hosts.SOURCES).
        exact = spec["source"] in ("nvml", "declared") or (
            spec["source"] == "registration" and spec.get("registered_factor") == factor)
        expected[name] = dict(resources, host=spec["host"], gpus=len(spec["gpus"]), split=effective["split"],
                              memory_mib=sum(g["memory_mib"] for g in spec["gpus"]), source=spec["source"],
                              memory_exact=exact)
        if resources["volcano.sh/vgpu-memory"] == 0:
            errors.append("node %s: with gpuMemoryFactor %d its %d memory units make a %d-byte device list, over the "
                          "%d bytes kubelet reads from a device plugin (vgpu-memory would be 0); raise "
                          "device_plugin_gpu_memory_factor"
                          % (name, factor, expected[name]["memory_mib"] // factor,
                             memory_list_bytes(spec["gpus"], factor), LIST_AND_WATCH_LIMIT))
    if errors:
        return {"errors": errors}
    node_cfg = node_config({n: nodes[n] for n in nodes})
    label = dict(settings.get("node_label") or _contract.GPU_NODE_LABEL)
    if legacy:
        # Before v1.12 only flags count: the article's workaround, one DaemonSet per split count on nodes labelled
        # with it.
        daemonsets = [{"name": "volcano-device-plugin-split-%d" % split, "nodes": groups[split],
                       "node_selector": dict(label, **{SPLIT_LABEL: str(split)}),
                       "args": ["--device-split-count=%d" % split, "--gpu-memory-factor=%d" % factor]}
                      for split in sorted(groups)]
    else:
        daemonsets = [{"name": "volcano-device-plugin", "nodes": sorted(nodes), "node_selector": label, "args": []}]
    node_labels = {name: dict(label, **({SPLIT_LABEL: str(expected[name]["split"])} if legacy else {}))
                   for name in sorted(nodes)}
    return {"errors": [], "memory_factor": factor, "device_config": config, "node_config": node_cfg,
            "expected": expected, "daemonsets": daemonsets,
            # One strategic-merge patch per node, applied in a single module call (a task per node does not scale).
            "node_label_patches": [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}
                                   for name, labels in sorted(node_labels.items())],
            # The factor each node alone would need: those above 1 are why a unit is not one MiB.
            "factor_by_node": {name: memory_factor([nodes[name]["gpus"]]) for name in sorted(nodes)},
            # The GPUs each node registers (filtered ones left out): what a vGPU's memory can be at most.
            "gpus": kept,
            # The DaemonSet's pods roll when this changes (both ConfigMaps and the DaemonSets' own settings).
            # Volcano's scheduler, which reads the device ConfigMap once, is rolled by the volcano role.
            "config_hash": _digest([config, node_cfg, daemonsets])}


def label_patches_to_send(patches, nodes):
    """The node label patches (plan()'s node_label_patches) that change something, given the Nodes as this run read
    them (k8s_info dicts): a Node that already carries every label with its value is left out; one not read is kept
    (the module then says it is not in the cluster). kubernetes.core.k8s's patched state reads, patches and compares
    the whole Node: another client's write in between - the plugin's handshake every 30 s, kubelet's status - reads
    as a change (on 1000 nodes, 2 of 8 such passes over labelled nodes reported one). A patch not sent cannot."""
    labels_of = {(n.get("metadata") or {}).get("name"): (n.get("metadata") or {}).get("labels") or {}
                 for n in nodes or []}
    return [patch for patch in patches
            if patch["metadata"]["name"] not in labels_of
            or any(labels_of[patch["metadata"]["name"]].get(key) != value
                   for key, value in patch["metadata"]["labels"].items())]


# GPUs that never have MIG: GeForce and TITAN cards, and the RTX 20xx to 50xx consumer numbers (NVML's names:
# "NVIDIA GeForce RTX 4090"; a card group's gpu_verify_model_pattern such as "RTX 4070 SUPER").
NO_MIG = re.compile(r"GeForce|TITAN|RTX\s*[2-5]0[5-9]0", re.IGNORECASE)


def hardware_errors(fleet, hosts, base):
    """Settings the GPUs cannot honour, once their count and models are known (hosts as _gpu_hosts.sized()
    returns them): a device index beyond the node's GPUs, the mig mode on a card without MIG."""
    errors = []
    fleet = fleet if isinstance(fleet, dict) else {}
    for host in hosts or []:
        own = host.get("vgpu") if isinstance(host.get("vgpu"), dict) else None
        if host.get("error") or not host.get("gpus") or vgpu_problems(fleet) or (own and vgpu_problems(own)):
            continue
        settings = vgpu_settings(fleet, own, base)
        where = "node %s (host %s)" % (host["node"], host["host"])
        count = len(host["gpus"])
        beyond = [i for i in settings["filter_index"] if i >= count]
        if beyond:
            errors.append("device_plugin_vgpu of %s: filter_index %s beyond its %d GPUs (indexes 0 to %d, as %s says)"
                          % (where, beyond, count, count - 1, _SAID_BY.get(host.get("source"), "the inventory")))
        models = sorted({g["model"] for g in host["gpus"] if NO_MIG.search(str(g.get("model") or ""))})
        if settings["mode"] == "mig" and models:
            errors.append("device_plugin_vgpu of %s: mode mig, but %s has no MIG (only data-center GPUs such as the "
                          "A100 or H100 have it); allowed for this card: hami-core" % (where, ", ".join(models)))
    return errors


_SAID_BY = {"nvml": "NVML", "registration": "its registration", "declared": "device_plugin_gpus",
            "minimum": "gpu_verify_expected_count"}


def daemonset_owner(ds):
    """Who manages a DaemonSet (dict as k8s_info returns it) and how to switch it off there, or None when nothing
    does (applied by hand). Deleting an owned one fights its owner, which puts it back."""
    meta = ds.get("metadata") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    for ref in meta.get("ownerReferences") or []:
        if ref.get("kind") == "ClusterPolicy" and str(ref.get("apiVersion", "")).startswith("nvidia.com/"):
            return {"owner": "NVIDIA GPU Operator (ClusterPolicy %s)" % ref.get("name"),
                    "remedy": "disable its device plugin: set devicePlugin.enabled=false in the gpu-operator chart "
                              "(ClusterPolicy spec.devicePlugin.enabled: false) and keep the operator for the "
                              "driver and toolkit"}
    if annotations.get("meta.helm.sh/release-name") or labels.get("app.kubernetes.io/managed-by") == "Helm":
        release = annotations.get("meta.helm.sh/release-name") or labels.get("app.kubernetes.io/instance") or "?"
        namespace = annotations.get("meta.helm.sh/release-namespace") or meta.get("namespace")
        return {"owner": "Helm release %s (namespace %s)" % (release, namespace),
                "remedy": "uninstall it (helm uninstall %s -n %s) or disable the device plugin in its values"
                          % (release, namespace)}
    if labels.get("argocd.argoproj.io/instance") or annotations.get("argocd.argoproj.io/tracking-id"):
        app = labels.get("argocd.argoproj.io/instance") or annotations["argocd.argoproj.io/tracking-id"].split(":")[0]
        return {"owner": "Argo CD application %s" % app, "remedy": "remove it from the application's source"}
    if labels.get("kustomize.toolkit.fluxcd.io/name"):
        return {"owner": "Flux Kustomization %s" % labels["kustomize.toolkit.fluxcd.io/name"],
                "remedy": "remove it from the Kustomization's source"}
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller"):
            return {"owner": "%s %s" % (ref.get("kind"), ref.get("name")),
                    "remedy": "switch off its device plugin in that %s" % ref.get("kind")}
    return None


def conflicting_daemonsets(daemonsets, listed, image_pattern):
    """DaemonSets (dicts as k8s_info returns them) that are another GPU device plugin: named in `listed`
    ([{namespace, name}]) or running an image matching `image_pattern`; gpufleet's own are never returned.
    Each comes with `owner` (daemonset_owner(), or None when applied by hand)."""
    wanted = {(item.get("namespace"), item.get("name")) for item in listed or []}
    pattern = re.compile(image_pattern) if image_pattern else None
    found = []
    for ds in daemonsets or []:
        meta = ds.get("metadata") or {}
        if (meta.get("labels") or {}).get(_contract.PLUGIN_POD_LABEL[0]) == _contract.PLUGIN_POD_LABEL[1]:
            continue
        key = (meta.get("namespace"), meta.get("name"))
        images = [c.get("image") or "" for c in (((ds.get("spec") or {}).get("template") or {}).get("spec") or {})
                  .get("containers") or []]
        if key in wanted:
            reason = "listed in device_plugin_conflicting_daemonsets"
        elif pattern and any(pattern.search(image) for image in images):
            reason = ("image %s matches device_plugin_conflicting_image_pattern"
                      % next(i for i in images if pattern.search(i)))
        else:
            continue
        found.append({"namespace": key[0], "name": key[1], "reason": reason, "owner": daemonset_owner(ds)})
    return found
