"""A stand-in for volcano-vgpu-device-plugin v1.12.0 and the kubelet it talks to, on GPU nodes without a host.

One real plugin per node is too heavy for the 1000-node benchmark fleet, so on kwok-only GPU nodes (nodes that carry
their simulated GPUs in the annotation lab.gpufleet.io/gpus and have no podman host) this module does what the
plugin and kubelet's device manager would do together. It is its own reading of the plugin's code (v1.12.0), shares
nothing with the device_plugin role's prediction of it, and a lab test (tests/lab/test_plugin.py) checks it against
the real binary: same GPUs, same deployed configuration, same node annotation and allocatable.

What v1.12.0 does at its start, and so what this reads once per plugin pod:
- ConfigMap volcano-vgpu-device-config (kube-system, else volcano-system; util.LoadConfigFromCM): without it the
  plugin divides by a gpuMemoryFactor of 0 and crashes (no registration);
- --device-split-count, --gpu-memory-factor and --device-cores-scaling override it only when given (c.IsSet);
- /config/config.json (the pod's ConfigMap volume mounted there): the entry named like $NODE_NAME sets the split
  count, core scaling, operating mode and the devices not to register (util.readFromConfigFile,
  config.FilterDeviceToRegister).
What it registers (plugin.RegisterInAnnotation, every 30 s; server.apiDevices through kubelet's ListAndWatch):
- annotation volcano.sh/node-vgpu-register: per GPU "UUID,split,MiB/factor,NVIDIA-<name>,true,mode:"; the
  handshake annotation "Reported <time>" with it. With the lab option plugin-register=on-change, as the plugin's
  main branch does since commit 9a6973b (volcano-sh/volcano#5388's counterpart, after v1.12.0): the register
  annotation only, written only when its value changed (pkg/plugin/register.go compares it with the Node's);
- allocatable vgpu-number = GPUs x split, vgpu-memory = sum of MiB/factor, vgpu-cores = GPUs x int(100 x
  scaling), one kubelet device per unit. kubelet reads ListAndWatch with gRPC's 4 MiB message limit: a larger device
  list (about 63,000 memory entries of a real UUID) is dropped and the resource stays 0.
Pods bound to these nodes that ask for vGPUs are admitted (lab.gpufleet.io/admitted) as the device manager admits
them on host nodes; Allocate itself is not emulated.
"""

import datetime
import json
import time
import zlib

import yaml

from . import images, kube, volcano
from .paths import LAB, log, read_json

GPUS = "lab.gpufleet.io/gpus"
ADMITTED = "lab.gpufleet.io/admitted"
REGISTER = "volcano.sh/node-vgpu-register"
HANDSHAKE = "volcano.sh/node-vgpu-handshake"
RESOURCES = ("volcano.sh/vgpu-number", "volcano.sh/vgpu-memory", "volcano.sh/vgpu-cores")
GRPC_MAX_MESSAGE = 4 * 1024 * 1024
REGISTER_PERIOD = 30.0
STARTED = time.monotonic()


def go_time_string():
    """Now as Go's time.Now().String() writes it, as the plugin does (pkg/plugin/register.go):
    '2026-12-01 15:27:15.123456789 +0000 UTC m=+12.345678901'."""
    now = datetime.datetime.now(datetime.timezone.utc)
    fraction = ("%06d" % now.microsecond).rstrip("0")  # Go's .999999999 layout drops trailing zeros
    clock = now.strftime("%Y-%m-%d %H:%M:%S") + ("." + fraction if fraction else "")
    return "%s +0000 UTC m=+%.9f" % (clock, time.monotonic() - STARTED)


def node_gpus(node_name, spec):
    """The GPUs of a node's annotation: {"gpus": [{uuid, model, memory_mib}]} or {count, model, memory_mib}."""
    if spec.get("gpus"):
        return [dict(gpu, index=index) for index, gpu in enumerate(spec["gpus"])]
    return [{"uuid": "GPU-%08x-0000-4000-8000-%012d" % (zlib.crc32(node_name.encode()), index), "index": index,
             "model": spec["model"], "memory_mib": int(spec["memory_mib"])} for index in range(int(spec["count"]))]


def _varint_len(value):
    length = 1
    while value >= 0x80:
        value >>= 7
        length += 1
    return length


def list_and_watch_size(prefixes_and_counts):
    """Bytes of a ListAndWatchResponse listing the devices "<prefix><i>" for i < count per (prefix, count), all
    Healthy (protobuf encoding), counted without building the list (a large node has 100,000 of them)."""
    total = 0
    for prefix, count in prefixes_and_counts:
        digits, low = 1, 0
        while low < count:
            high = min(count, 10 ** digits)
            id_len = len(prefix) + digits
            device = 1 + _varint_len(id_len) + id_len + 1 + 1 + len("Healthy")
            total += (high - low) * (1 + _varint_len(device) + device)
            digits, low = digits + 1, high
    return total


def settings(node_name, device_config, node_config, args):
    """What the plugin runs with on a node, or {"error": why it does not register}."""
    if device_config is None:
        return {"error": "volcano-vgpu-device-config missing: gpuMemoryFactor 0, the plugin divides by zero"}
    split = device_config.get("deviceSplitCount") or 0
    factor = device_config.get("gpuMemoryFactor") or 0
    cores = device_config.get("deviceCoreScaling") or 0
    given = {name: volcano.flag(args, name) for name in ("device-split-count", "gpu-memory-factor",
                                                         "device-cores-scaling")}
    if given["device-split-count"] is not None:
        split = int(given["device-split-count"])
    if given["gpu-memory-factor"] is not None:
        factor = int(given["gpu-memory-factor"])
    if given["device-cores-scaling"] is not None:
        cores = float(given["device-cores-scaling"])
    mode, skip_uuid, skip_index = "hami-core", set(), set()
    for entry in (node_config or {}).get("nodeconfig") or []:
        if entry.get("name") != node_name:
            continue
        if (entry.get("devicecorescaling") or 0) > 0:
            cores = float(entry["devicecorescaling"])
        if (entry.get("devicesplitcount") or 0) > 0:
            split = int(entry["devicesplitcount"])
        filters = entry.get("filterdevices") or {}
        if filters.get("uuid") or filters.get("index"):
            skip_uuid, skip_index = set(filters.get("uuid") or []), {int(i) for i in filters.get("index") or []}
        mode = entry.get("operatingmode") or mode
    if int(factor) <= 0:
        return {"error": "gpuMemoryFactor %r: the plugin divides by zero" % factor}
    return {"split": int(split), "factor": int(factor), "cores": float(cores), "mode": mode,
            "skip_uuid": sorted(skip_uuid), "skip_index": sorted(skip_index)}


def registration(gpus, conf):
    """(annotation value, allocatable) the plugin and kubelet produce for these GPUs and settings."""
    kept = [g for g in gpus if g["uuid"] not in conf["skip_uuid"] and g["index"] not in conf["skip_index"]]
    value = "".join("%s,%d,%d,NVIDIA-%s,true,%s:" % (g["uuid"], conf["split"], g["memory_mib"] // conf["factor"],
                                                     g["model"], conf["mode"]) for g in kept)
    units = [("%s-memory-" % g["uuid"], g["memory_mib"] // conf["factor"]) for g in kept]
    memory = sum(n for dummy, n in units) if list_and_watch_size(units) <= GRPC_MAX_MESSAGE else 0
    return value, {"volcano.sh/vgpu-number": str(len(kept) * conf["split"]), "volcano.sh/vgpu-memory": str(memory),
                   "volcano.sh/vgpu-cores": str(len(kept) * int(100 * conf["cores"]))}


class Emulator:
    """The plugin and the device manager of every GPU node that has no host."""

    def __init__(self, api):
        from kubernetes import client  # pylint: disable=import-outside-toplevel

        self.core, self.apps = client.CoreV1Api(api), client.AppsV1Api(api)
        self.pods = {}          # plugin pod UID -> settings read at its start
        self.registered = {}    # node -> time of the last registration
        self.noted = set()

    def note(self, message):
        if message not in self.noted:
            self.noted.add(message)
            log("emulator: %s" % message)

    def read_settings(self, pod, container):
        text = None
        for namespace in ("kube-system", "volcano-system"):
            text = kube.configmap_text(self.core, namespace, "volcano-vgpu-device-config", "device-config.yaml")
            if text is not None:
                break
        device_config = (yaml.safe_load(text) or {}).get("nvidia") or {} if text is not None else None
        cm_name, dummy = volcano.mounted_configmap(pod, container, "/config/config.json")
        node_config = None
        if cm_name:
            raw = kube.configmap_text(self.core, pod.metadata.namespace, cm_name, "config.json")
            node_config = json.loads(raw) if raw else None
        return settings(pod.spec.node_name, device_config, node_config,
                        list(container.command or [])[1:] + list(container.args or []))

    def sync(self, emulated):
        """emulated: {node name: Node} of the GPU nodes without a host."""
        if not emulated:
            return
        active, seen = {}, set()
        for ds in self.apps.list_daemon_set_for_all_namespaces().items:
            if not any(images.plugin_image(c.image) for c in ds.spec.template.spec.containers):
                continue
            selector = ",".join("%s=%s" % kv for kv in (ds.spec.selector.match_labels or {}).items())
            for pod in self.core.list_namespaced_pod(ds.metadata.namespace, label_selector=selector).items:
                node_name = pod.spec.node_name
                if (node_name not in emulated or pod.status.phase != "Running"
                        or pod.metadata.deletion_timestamp is not None):
                    continue
                container = next((c for c in pod.spec.containers if images.plugin_image(c.image)
                                  and "volcano-vgpu-monitor" not in " ".join(c.command or [])), None)
                if container is None:
                    continue
                refused = (images.resolve(container.image) or {}).get("refused")
                if refused:
                    self.note(refused)
                    continue
                seen.add(pod.metadata.uid)
                if pod.metadata.uid not in self.pods:
                    self.pods[pod.metadata.uid] = self.read_settings(pod, container)
                active[node_name] = self.pods[pod.metadata.uid]
        for uid in set(self.pods) - seen:
            del self.pods[uid]
        now = time.time()
        periodic = read_json(LAB / "lab.json").get("plugin_register", "periodic") == "periodic"
        for node_name, conf in sorted(active.items()):
            if "error" in conf:
                self.note("plugin on %s does not register: %s" % (node_name, conf["error"]))
                continue
            node = emulated[node_name]
            value, resources = registration(node_gpus(node_name, json.loads(node.metadata.annotations[GPUS])), conf)
            allocatable = node.status.allocatable or {}
            if any(allocatable.get(k) != v for k, v in resources.items()):
                self.core.patch_node_status(node_name, {"status": {"capacity": resources, "allocatable": resources}})
            if not periodic:
                if node.metadata.annotations.get(REGISTER) != value:
                    self.core.patch_node(node_name, {"metadata": {"annotations": {REGISTER: value}}})
            elif (node.metadata.annotations.get(REGISTER) != value
                  or now - self.registered.get(node_name, 0) >= REGISTER_PERIOD):
                self.core.patch_node(node_name, {"metadata": {"annotations": {
                    REGISTER: value, HANDSHAKE: "Reported " + go_time_string()}}})
                self.registered[node_name] = now
        self.admit(emulated)

    def admit(self, emulated):
        """vGPU pods bound to these nodes start (the lab's kwok stage waits for the admission mark)."""
        pending = self.core.list_pod_for_all_namespaces(field_selector="status.phase=Pending,spec.nodeName!=").items
        for pod in pending:
            if pod.spec.node_name not in emulated or (pod.metadata.annotations or {}).get(ADMITTED):
                continue
            self.core.patch_namespaced_pod(pod.metadata.name, pod.metadata.namespace,
                                           {"metadata": {"annotations": {ADMITTED: "true"}}})
