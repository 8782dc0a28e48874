# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Volcano's scheduler configuration, admission rules and chart values, built from structured settings.

Pure functions, no Ansible. The scheduler configuration starts from the chart's own default (which keeps
``overcommit`` and ``enablePreemptable: false`` - what the article's hand-written override lost) and inserts
``deviceshare`` before ``predicates`` as the vGPU plugin's documentation does.
"""

from __future__ import annotations

from ansible_collections.gpufleet.vgpu.plugins.module_utils import _contract

import copy
import hashlib
import json

# What the pinned scheduler registers (update with volcano_version): actions in
# pkg/scheduler/actions/factory.go, plugins in pkg/scheduler/plugins/factory.go of Volcano v1.15.1. An unknown action
# stops vc-scheduler from loading its configuration ("failed to find Action"); an unknown plugin is only logged
# ("Failed to get plugin") and silently left out of every session.
KNOWN_VERSION = "v1.15.1"
KNOWN_ACTIONS = ("enqueue", "allocate", "backfill", "preempt", "reclaim", "gangpreempt", "gangreclaim", "shuffle")
KNOWN_PLUGINS = ("drf", "gang", "deviceshare", "predicates", "priority", "nodeorder", "conformance", "binpack",
                 "resource-strategy-fit", "tdm", "overcommit", "sla", "task-topology", "numa-aware", "cdp",
                 "rescheduling", "usage", "pdb", "nodegroup", "network-topology-aware", "proportion", "capacity",
                 "extender", "resourcequota")
SCHEDULE_POLICIES = ("binpack", "spread")

# Structured deviceshare settings -> the plugin's argument keys (pkg/scheduler/plugins/deviceshare/deviceshare.go).
DEVICESHARE_KEYS = {
    "vgpu_enable": "deviceshare.VGPUEnable",
    "schedule_policy": "deviceshare.SchedulePolicy",
    "schedule_weight": "deviceshare.ScheduleWeight",
    "gpu_sharing_enable": "deviceshare.GPUSharingEnable",
    "gpu_number_enable": "deviceshare.GPUNumberEnable",
    "node_lock_enable": "deviceshare.NodeLockEnable",
    "known_geometries_cm_name": "deviceshare.KnownGeometriesCMName",
    "known_geometries_cm_namespace": "deviceshare.KnownGeometriesCMNamespace",
    "ascend_mindcluster_vnpu_enable": "deviceshare.AscendMindClusterVNPUEnable",
    "ascend_hami_vnpu_enable": "deviceshare.AscendHAMiVNPUEnable",
    # gpuexclusive.go: pods carrying every label of one rule get physical GPUs no other pod of that rule shares.
    "gpu_exclusive_rules": "deviceshare.GPUExclusiveRules",
}
DEVICESHARE_FLAGS = ("vgpu_enable", "gpu_sharing_enable", "gpu_number_enable", "node_lock_enable",
                     "ascend_mindcluster_vnpu_enable", "ascend_hami_vnpu_enable")
# Volcano's Arguments.GetBool also takes strings, as Go's strconv.ParseBool reads them.
GO_BOOL_STRINGS = {"1": True, "t": True, "T": True, "TRUE": True, "true": True, "True": True,
                   "0": False, "f": False, "F": False, "FALSE": False, "false": False, "False": False}

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


def exclusive_rules_problems(rules):
    """What is wrong with deviceshare.GPUExclusiveRules: a list of label mappings (label -> value, all strings).
    Volcano silently drops a rule that is not a mapping and a label whose value is not a string, which would leave
    pods sharing GPUs that the rule was written to keep apart."""
    if rules in (None, "", []):
        return []
    name = "volcano_deviceshare.gpu_exclusive_rules"
    if not isinstance(rules, list):
        return ["%s must be a list of label mappings (such as [{team: training}]), got %r" % (name, rules)]
    problems = []
    for index, rule in enumerate(rules):
        if not isinstance(rule, dict) or not rule:
            problems.append("%s[%d] must be a non-empty mapping of pod label to value, got %r" % (name, index, rule))
            continue
        wrong = sorted("%s: %r" % (k, v) for k, v in rule.items() if not isinstance(k, str) or not isinstance(v, str))
        if wrong:
            problems.append("%s[%d]: label values must be strings (quote them: 'true', '1'), got %s"
                            % (name, index, ", ".join(wrong)))
    return problems


def action_list(actions):
    """Actions as a list: Volcano's own comma string ("enqueue, allocate, backfill") or a YAML list."""
    if isinstance(actions, str):
        return [a.strip() for a in actions.split(",")]
    return list(actions or [])


def tier_deviceshare(tiers):
    """(structured settings, errors) from deviceshare arguments written inside the tiers, as Volcano's docs do."""
    settings, errors = {}, []
    by_argument = {v: k for k, v in DEVICESHARE_KEYS.items()}
    for tier in tiers or []:
        for plugin in (tier.get("plugins") or []) if isinstance(tier, dict) else []:
            if not isinstance(plugin, dict) or plugin.get("name") != "deviceshare":
                continue
            arguments = plugin.get("arguments") or {}
            if not isinstance(arguments, dict):
                errors.append("volcano_scheduler_tiers: deviceshare's arguments must be a mapping, got %r" % (arguments,))
                continue
            for argument, value in arguments.items():
                key = by_argument.get(argument)
                if key is None:
                    errors.append("volcano_scheduler_tiers: deviceshare argument %r is unknown to Volcano %s; "
                                  "allowed: %s" % (argument, KNOWN_VERSION, ", ".join(sorted(by_argument))))
                    continue
                if key in DEVICESHARE_FLAGS and isinstance(value, str) and value in GO_BOOL_STRINGS:
                    value = GO_BOOL_STRINGS[value]
                settings[key] = value
    return settings, errors


def merged_deviceshare(tiers, deviceshare):
    """(settings, errors): volcano_deviceshare with the deviceshare arguments of the tiers merged in; a key set in
    both places with different values is an error rather than one silently winning."""
    from_tiers, errors = tier_deviceshare(tiers)
    merged = dict(deviceshare or {})
    for key, value in from_tiers.items():
        if key in merged and merged[key] not in (None, "") and merged[key] != value:
            errors.append("deviceshare's %s is %r in volcano_scheduler_tiers but %r in volcano_deviceshare.%s; "
                          "set it in one place (volcano_deviceshare.%s)"
                          % (DEVICESHARE_KEYS[key], value, merged[key], key, key))
            continue
        merged[key] = value
    return merged, errors


def configurations_problems(configurations):
    """What is wrong with the scheduler configuration's ``configurations`` (each action's arguments): a list of
    {name: <action>, arguments: {...}}, one entry per action - Volcano reads the first entry of a name
    (framework.GetArgOfActionFromConf) and ignores the others without a word."""
    if configurations in (None, []):
        return []
    name = "volcano_scheduler_configurations"
    if not isinstance(configurations, list):
        return ["%s must be a list of {name: <action>, arguments: {...}}, got %r" % (name, configurations)]
    problems, seen = [], set()
    for index, entry in enumerate(configurations):
        if not isinstance(entry, dict) or set(entry) - {"name", "arguments"} or "name" not in entry:
            problems.append("%s[%d] must be {name: <action>, arguments: {...}}, got %r" % (name, index, entry))
            continue
        if entry["name"] not in KNOWN_ACTIONS:
            problems.append("%s[%d].name %r is no action of Volcano %s; allowed: %s"
                            % (name, index, entry["name"], KNOWN_VERSION, ", ".join(KNOWN_ACTIONS)))
        elif entry["name"] in seen:
            problems.append("%s: action %r is configured twice (Volcano reads only the first); merge its arguments"
                            % (name, entry["name"]))
        seen.add(entry.get("name"))
        if not isinstance(entry.get("arguments") or {}, dict):
            problems.append("%s[%d].arguments must be a mapping, got %r" % (name, index, entry["arguments"]))
    return problems


def validate(actions, tiers, deviceshare, binpack=None, custom_plugins=()):
    """Messages for a scheduler configuration that Volcano would reject or misread (empty when valid).

    custom_plugins: plugin names loaded from the scheduler's --plugins-dir, accepted besides KNOWN_PLUGINS.
    """
    errors = []
    if not isinstance(actions, (str, list, tuple)):
        errors.append("volcano_scheduler_actions must be a list or a comma-separated string, got %r" % (actions,))
        actions = []
    actions = action_list(actions)
    if not actions:
        errors.append("volcano_scheduler_actions must not be empty; allowed: %s" % ", ".join(KNOWN_ACTIONS))
    for action in actions:
        if action not in KNOWN_ACTIONS:
            errors.append("volcano_scheduler_actions: unknown action %r; Volcano %s knows: %s"
                          % (action, KNOWN_VERSION, ", ".join(KNOWN_ACTIONS)))
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
                if plugin["name"] not in KNOWN_PLUGINS and plugin["name"] not in (custom_plugins or ()):
                    errors.append("volcano_scheduler_tiers[%d]: unknown plugin %r (Volcano %s would leave it out "
                                  "silently); known: %s; list plugins loaded from --plugins-dir in "
                                  "volcano_scheduler_custom_plugins"
                                  % (index, plugin["name"], KNOWN_VERSION, ", ".join(KNOWN_PLUGINS)))
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        errors.append("volcano_scheduler_tiers: plugin(s) listed twice: %s" % ", ".join(duplicates))
    if deviceshare is not None and not isinstance(deviceshare, dict):
        errors.append("volcano_deviceshare must be a mapping, got %r" % (deviceshare,))
        deviceshare = {}
    unknown = sorted(set(deviceshare or {}) - set(DEVICESHARE_KEYS))
    if unknown:
        errors.append("volcano_deviceshare: unknown key(s) %s; allowed: %s"
                      % (", ".join(unknown), ", ".join(sorted(DEVICESHARE_KEYS))))
    ds, merge_errors = merged_deviceshare(tiers, deviceshare)
    errors.extend(merge_errors)
    for flag in DEVICESHARE_FLAGS:
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
    errors.extend(exclusive_rules_problems(ds.get("gpu_exclusive_rules")))
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


def scheduler_conf(actions, tiers, deviceshare, binpack=None, configurations=None):
    """The volcano-scheduler.conf document as a dict (validate() and configurations_problems() first); the
    ``configurations`` section only when it has entries, so that a configuration without it keeps its hash."""
    tiers = copy.deepcopy(tiers)
    ds_args = deviceshare_arguments(merged_deviceshare(tiers, deviceshare)[0])
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
    conf = {"actions": ", ".join(action_list(actions)), "tiers": tiers}
    if configurations:
        conf["configurations"] = [{"name": c["name"], "arguments": dict(c.get("arguments") or {})}
                                  for c in configurations]
    return conf


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


def device_configmap(conf):
    """{namespace, name} of the device ConfigMap the scheduler conf's deviceshare loads once, or None without
    deviceshare. Volcano 1.15.1 (plugins/deviceshare/deviceshare.go enablePredicate) reads
    deviceshare.KnownGeometriesCMName / ...Namespace, default volcano-vgpu-device-config in kube-system, and
    config.InitDevicesConfig keeps the first reading for the process's life (sync.Once)."""
    for tier in conf.get("tiers") or []:
        for plugin in tier.get("plugins") or []:
            if plugin.get("name") == "deviceshare":
                args = plugin.get("arguments") or {}
                return {"namespace": args.get(DEVICESHARE_KEYS["known_geometries_cm_namespace"]) or "kube-system",
                        "name": args.get(DEVICESHARE_KEYS["known_geometries_cm_name"]) or _contract.DEVICE_CONFIGMAP}
    return None


def scheduler_pod_labels(planned, device_configmaps=None):
    """The scheduler pods' labels that roll them through the chart: the conf's hash, and - where deviceshare loads
    its device ConfigMap once - a hash of that ConfigMap's data as the cluster has it (``device_configmaps``:
    k8s_info's resources, empty when it is missing), whoever wrote it."""
    labels = {_contract.SCHEDULER_CONFIG: planned["config_hash"]}
    if planned.get("device_configmap"):
        data = (device_configmaps[0].get("data") or {}) if device_configmaps else None
        labels[_contract.DEVICE_CONFIG] = config_hash(data) if data is not None else "missing"
    return labels


def plan(settings):
    """The volcano role's plan from its settings: {errors} alone when one is invalid, else the scheduler and
    admission configuration, the device ConfigMap deviceshare loads, the webhooks to enable and the configuration
    hash."""
    actions, tiers = settings.get("actions") or [], settings.get("tiers") or []
    deviceshare, binpack = settings.get("deviceshare") or {}, settings.get("binpack") or {}
    namespaces = settings.get("admission_namespaces") or []
    errors = validate(actions, tiers, deviceshare, binpack, settings.get("custom_plugins") or ())
    errors += configurations_problems(settings.get("configurations"))
    admissions = settings.get("enabled_admissions") or []
    for admission in admissions:
        if not isinstance(admission, str) or not admission.startswith("/"):
            errors.append("volcano_enabled_admissions: entries are webhook paths such as /jobs/mutate, got %r"
                          % (admission,))
    for namespace in namespaces:
        if not isinstance(namespace, str) or not namespace:
            errors.append("volcano_admission_namespaces: entries are namespace names, got %r" % (namespace,))
    if errors:
        return {"errors": errors}
    conf = scheduler_conf(actions, tiers, deviceshare, binpack, settings.get("configurations"))
    return {"errors": [], "scheduler_conf": conf, "device_configmap": device_configmap(conf),
            "admission_conf": admission_conf(namespaces, settings.get("scheduler_name") or "volcano"),
            "enabled_admissions": enabled_admissions(admissions, namespaces), "config_hash": config_hash(conf)}


QUEUE_API = "scheduling.volcano.sh/v1beta1"


def queue_definitions(queues, existing=None):
    """The Queue objects of ``volcano_queues`` ({name, weight, reclaimable, capability}) that the cluster lacks or
    holds with another weight, reclaimable or capability (``existing``: k8s_info's Queues). Volcano's scheduler
    writes a Queue's status.allocated at the end of every session that changed it (1.15.1 framework/session.go,
    updateQueueStatus), so as pods start and end; kubernetes.core.k8s compares the whole object before and after
    its apply: applying a Queue that already matches would read as changed whenever that write fell in between.
    What the cluster added beyond these fields (the admission webhook's defaults) is not compared."""
    current = {(q.get("metadata") or {}).get("name"): q.get("spec") or {} for q in existing or []}
    wanted = []
    for queue in queues or []:
        spec = {"weight": queue.get("weight", 1), "reclaimable": queue.get("reclaimable", True)}
        if queue.get("capability") is not None:
            spec["capability"] = queue["capability"]
        have = current.get(queue["name"])
        if have is not None and _same_queue_spec(spec, have):
            continue
        wanted.append({"apiVersion": QUEUE_API, "kind": "Queue", "metadata": {"name": queue["name"]}, "spec": spec})
    return wanted


def _same_queue_spec(spec, have):
    # Quantities compare as the text they are stored as (4 and "4" are one cpu); anything else unequal is applied.
    # A capability the cluster has and the entry no longer sets is applied too: the apply removes what an earlier
    # apply of the role set.
    def text(value):
        return {key: str(item) for key, item in value.items()} if isinstance(value, dict) else value
    return all(text(have.get(key)) == text(spec.get(key)) for key in ("weight", "reclaimable", "capability"))
