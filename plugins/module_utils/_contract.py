# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The names the roles share with each other and with the software they deploy: ConfigMaps, labels, annotations.

Pure data and two small helpers, no Ansible. Ships with the modules that read the cluster (vgpu_smoke), and serves
the controller's planners and filters; role tasks get these names from their plan (action role_plan), never as
literals, so a name changes in one place. A unit test keeps every other file free of them.
"""

from __future__ import annotations

import re

# The plugin's two ConfigMaps, and their keys (volcano-vgpu-device-plugin v1.12.0: util.LoadConfigFromCM and the
# DaemonSet's /config volume; Volcano's scheduler reads the first: pkg/scheduler/api/devices/config).
DEVICE_CONFIGMAP = "volcano-vgpu-device-config"
DEVICE_CONFIG_KEY = "device-config.yaml"
NODE_CONFIGMAP = "volcano-vgpu-node-config"
NODE_CONFIG_KEY = "config.json"

# What the plugin writes on its Node: the registration (per GPU "UUID,split,units,NVIDIA-<model>,health,mode:"), and
# up to v1.12.0 a handshake with the time of each registration (every 30 s).
REGISTER = "volcano.sh/node-vgpu-register"
HANDSHAKE = "volcano.sh/node-vgpu-handshake"

# Labels on the objects gpufleet deploys (selectors of the monitoring, the smoke test and the conflict check).
COMPONENT_LABEL = "gpufleet.io/component"
PLUGIN_POD_LABEL = (COMPONENT_LABEL, "device-plugin")
MONITOR_COMPONENT = "device-plugin-monitor"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
# Nodes: the GPU label's default, and the split label of the one-DaemonSet-per-split fallback (plugin < v1.12).
GPU_NODE_LABEL = {"gpufleet.io/gpu": "true"}
SPLIT_LABEL = "gpufleet.io/vgpu-split"
# The smoke test's pods and namespaces.
SMOKE_LABEL = "gpufleet.io/smoke"

# Annotations and pod labels that carry a decision from one role (or run) to the next.
CONFIG_HASH = "gpufleet.io/config-hash"                     # plugin pods: roll on a change of their config
DEFAULT_MEMORY = "gpufleet.io/vgpu-default-memory"         # device ConfigMap and policy: a request without memory
SCHEDULER_CONFIG = "gpufleet.io/scheduler-config"          # scheduler pods: hash of its configuration
DEVICE_CONFIG = "gpufleet.io/device-config"                # scheduler pods: hash of the device ConfigMap it loaded
SCHEDULER_RESYNC = "gpufleet.io/vgpu-scheduler-resync"     # GPU nodes: marked for the running scheduler's start
CORDONED_BY = "gpufleet.vgpu/cordoned-by"                  # GPU nodes: gpufleet cordoned it (not an operator)

# Kubernetes' node names: RFC 1123 subdomains.
_NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def valid_node_name(name):
    """Whether `name` can be a Kubernetes node's name (lowercase, RFC 1123, at most 253 characters)."""
    return isinstance(name, str) and len(name) <= 253 and bool(_NODE_NAME.match(name))


def device_config(configmap):
    """The ``nvidia`` section of a device ConfigMap (the dict k8s_info returns, or the client's object as a dict);
    {} when it is missing or unreadable."""
    import yaml  # only where it runs: PyYAML comes with Ansible on the controller and with the Kubernetes client

    data = ((configmap or {}).get("data") or {}).get(DEVICE_CONFIG_KEY)
    try:
        parsed = yaml.safe_load(data) if data else None
    except yaml.YAMLError:
        return {}
    return (parsed or {}).get("nvidia") or {} if isinstance(parsed, dict) else {}


def memory_factor(configmap):
    """The gpuMemoryFactor a device ConfigMap gives (MiB per volcano.sh/vgpu-memory unit), or None."""
    value = device_config(configmap).get("gpuMemoryFactor")
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


def names():
    """Every shared name by its role in the contract, for the roles' plans (what their tasks and templates use)."""
    return {"device_configmap": DEVICE_CONFIGMAP, "device_config_key": DEVICE_CONFIG_KEY,
            "node_configmap": NODE_CONFIGMAP, "node_config_key": NODE_CONFIG_KEY,
            "component_label": COMPONENT_LABEL, "plugin_component": PLUGIN_POD_LABEL[1],
            "monitor_component": MONITOR_COMPONENT, "managed_by_label": MANAGED_BY_LABEL,
            "config_hash": CONFIG_HASH, "default_memory": DEFAULT_MEMORY, "scheduler_resync": SCHEDULER_RESYNC,
            "cordoned_by": CORDONED_BY,
            "smoke_label": SMOKE_LABEL}
