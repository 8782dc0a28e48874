# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Volcano's scheduler configuration, admission rules and chart values, built from structured settings.

Pure functions, no Ansible. The scheduler configuration starts from the chart's own default (which keeps
``overcommit`` and ``enablePreemptable: false`` - what the article's hand-written override lost) and inserts
``deviceshare`` before ``predicates`` as the vGPU plugin's documentation does.
"""

from __future__ import annotations

import copy
import hashlib
import json

KNOWN_ACTIONS = ("enqueue", "allocate", "backfill", "preempt", "reclaim", "shuffle")
SCHEDULE_POLICIES = ("binpack", "spread")

DEFAULT_TIERS = [
    {"plugins": [{"name": "priority"}, {"name": "gang", "enablePreemptable": False}, {"name": "conformance"}]},
    {"plugins": [{"name": "overcommit"}, {"name": "drf", "enablePreemptable": False}, {"name": "deviceshare"},
                 {"name": "predicates"}, {"name": "proportion"}, {"name": "nodeorder"}, {"name": "binpack"}]},
]

# Structured deviceshare settings -> the plugin's argument keys (pkg/scheduler/plugins/deviceshare).
DEVICESHARE_KEYS = {
    "vgpu_enable": "deviceshare.VGPUEnable",
    "schedule_policy": "deviceshare.SchedulePolicy",
    "schedule_weight": "deviceshare.ScheduleWeight",
    "gpu_sharing_enable": "deviceshare.GPUSharingEnable",
    "gpu_number_enable": "deviceshare.GPUNumberEnable",
    "node_lock_enable": "deviceshare.NodeLockEnable",
    "known_geometries_cm_name": "deviceshare.KnownGeometriesCMName",
    "known_geometries_cm_namespace": "deviceshare.KnownGeometriesCMNamespace",
}

# Admissions the namespace -> schedulerName rule needs (charts >= 1.12 dropped /pods/mutate from the default).
POD_MUTATE = "/pods/mutate"


def deviceshare_arguments(settings):
    """Plugin arguments from {vgpu_enable, schedule_policy, ...}; unset/empty values are left out."""
    args = {}
    for key, value in (settings or {}).items():
        if key not in DEVICESHARE_KEYS:
            raise ValueError("volcano_deviceshare: unknown key %r; allowed: %s" % (key, ", ".join(sorted(DEVICESHARE_KEYS))))
        if value is None or value == "":
            continue
        args[DEVICESHARE_KEYS[key]] = value
    return args


def validate(actions, tiers, deviceshare, binpack=None):
    """Messages for a scheduler configuration that Volcano would reject or misread (empty when valid)."""
    errors = []
    if not actions:
        errors.append("volcano_scheduler_actions must not be empty; allowed: %s" % ", ".join(KNOWN_ACTIONS))
    for action in actions or []:
        if action not in KNOWN_ACTIONS:
            errors.append("volcano_scheduler_actions: unknown action %r; allowed: %s" % (action, ", ".join(KNOWN_ACTIONS)))
    names = []
    for index, tier in enumerate(tiers or []):
        plugins = tier.get("plugins") if isinstance(tier, dict) else None
        if not plugins:
            errors.append("volcano_scheduler_tiers[%d] needs a non-empty 'plugins' list" % index)
            continue
        for plugin in plugins:
            if not isinstance(plugin, dict) or not plugin.get("name"):
                errors.append("volcano_scheduler_tiers[%d]: every plugin needs a 'name', got %r" % (index, plugin))
            else:
                names.append(plugin["name"])
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        errors.append("volcano_scheduler_tiers: plugin(s) listed twice: %s" % ", ".join(duplicates))
    ds = deviceshare or {}
    unknown = sorted(set(ds) - set(DEVICESHARE_KEYS))
    if unknown:
        errors.append("volcano_deviceshare: unknown key(s) %s; allowed: %s"
                      % (", ".join(unknown), ", ".join(sorted(DEVICESHARE_KEYS))))
    for flag in ("vgpu_enable", "gpu_sharing_enable", "gpu_number_enable", "node_lock_enable"):
        if flag in ds and not isinstance(ds[flag], bool):
            errors.append("volcano_deviceshare.%s must be true or false, got %r" % (flag, ds[flag]))
    enabled = [k for k in ("vgpu_enable", "gpu_sharing_enable", "gpu_number_enable") if ds.get(k) is True]
    if len(enabled) > 1:
        errors.append("volcano_deviceshare: %s cannot be combined (Volcano's deviceshare exits: VGPUEnable, "
                      "GPUSharingEnable and GPUNumberEnable are mutually exclusive); keep only one"
                      % " and ".join(enabled))
    policy = ds.get("schedule_policy", "")
    if policy not in ("",) + SCHEDULE_POLICIES:
        errors.append("volcano_deviceshare.schedule_policy must be one of binpack, spread (or empty), got %r" % (policy,))
    weight = ds.get("schedule_weight", 0)
    if isinstance(weight, bool) or not isinstance(weight, int) or weight < 0:
        errors.append("volcano_deviceshare.schedule_weight must be an integer >= 0, got %r" % (weight,))
    if enabled and "deviceshare" not in names and "predicates" not in names:
        errors.append("volcano_scheduler_tiers: deviceshare is enabled but neither 'deviceshare' nor 'predicates' "
                      "is listed, so there is nowhere to put it")
    for key, value in (binpack or {}).items():
        if key == "resources":
            if not isinstance(value, dict):
                errors.append("volcano_binpack.resources must be a mapping of resource name to weight")
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            errors.append("volcano_binpack.%s must be an integer >= 0, got %r" % (key, value))
    return errors


def scheduler_conf(actions, tiers, deviceshare, binpack=None):
    """The volcano-scheduler.conf document as a dict (validate() first)."""
    tiers = copy.deepcopy(tiers)
    ds_args = deviceshare_arguments(deviceshare)
    enabled = any(ds_args.get(DEVICESHARE_KEYS[k]) is True for k in ("vgpu_enable", "gpu_sharing_enable",
                                                                     "gpu_number_enable"))
    names = [p["name"] for t in tiers for p in t["plugins"]]
    if enabled and "deviceshare" not in names:
        for tier in tiers:
            for position, plugin in enumerate(tier["plugins"]):
                if plugin["name"] == "predicates":
                    tier["plugins"].insert(position, {"name": "deviceshare"})
                    break
            else:
                continue
            break
    for tier in tiers:
        kept = []
        for plugin in tier["plugins"]:
            if plugin["name"] == "deviceshare":
                if not enabled:
                    continue  # nothing to share: leave the plugin out rather than run it idle
                plugin = dict(plugin, arguments=dict(plugin.get("arguments") or {}, **ds_args))
            if plugin["name"] == "binpack" and binpack:
                plugin = dict(plugin, arguments=dict(plugin.get("arguments") or {}, **binpack_arguments(binpack)))
            kept.append(plugin)
        tier["plugins"] = kept
    return {"actions": ", ".join(actions), "tiers": tiers}


def binpack_arguments(binpack):
    """binpack plugin arguments from {weight, cpu, memory, resources: {name: weight}}."""
    args = {}
    for key in ("weight", "cpu", "memory"):
        if key in binpack:
            args["binpack.%s" % key] = binpack[key]
    resources = binpack.get("resources") or {}
    if resources:
        args["binpack.resources"] = ",".join(sorted(resources))
        for name in sorted(resources):
            args["binpack.resources.%s" % name] = resources[name]
    return args


def admission_conf(namespaces, scheduler_name="volcano"):
    """volcano-admission.conf: pods created in these namespaces get schedulerName (needs /pods/mutate)."""
    if not namespaces:
        return {}
    return {"resourceGroups": [{"resourceGroup": "gpufleet-%s" % scheduler_name,
                                "object": {"key": "namespace", "value": sorted(namespaces)},
                                "schedulerName": scheduler_name}]}


def enabled_admissions(admissions, namespaces):
    """The chart's enabled_admissions string, with /pods/mutate added when namespace rules need it."""
    wanted = list(admissions)
    if namespaces and POD_MUTATE not in wanted:
        wanted.append(POD_MUTATE)
    return ",".join(wanted)


def config_hash(*documents):
    """Short stable hash of configuration documents (pod-template label that rolls a Deployment on change)."""
    return hashlib.sha256(json.dumps(documents, sort_keys=True).encode()).hexdigest()[:16]
