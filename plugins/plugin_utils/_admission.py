# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The admission policies of the device_plugin role (controller only).

- A ValidatingAdmissionPolicy that refuses vGPU memory no card of the fleet has.
- Optionally, a MutatingAdmissionPolicy that gives a vGPU request without memory an even share of a card.

volcano.sh/vgpu-memory counts units of gpuMemoryFactor MiB, not MiB: with factor 3, `vgpu-memory: 8188` asks for
24564 MiB. A request above the largest card's units can never be placed; without this policy such a pod stays
Pending with a scheduler message that does not mention the unit. The policy is plain CEL, evaluated by the API
server (admissionregistration.k8s.io/v1, GA in Kubernetes 1.30).

A container that asks for vgpu-number without vgpu-memory gets 100 % of the card's memory (Volcano 1.15.1
pkg/scheduler/api/devices/util.go ExtractResourceRequest); the device config's defaultMemory is read but used by
neither Volcano nor plugin v1.12.0. The only place left to give such a request a share is admission: a
MutatingAdmissionPolicy (admissionregistration.k8s.io/v1 from Kubernetes 1.36; v1beta1 behind the
MutatingAdmissionPolicy feature gate in 1.34 and 1.35) adds the share to the container's limits and requests.

The same ValidatingAdmissionPolicy refuses the pod shapes that cannot run on this stack, each with the field and what
to write instead (request_policies_for_plan()); what each refusal prevents, from the pinned code:
- vGPUs in more than one container, or in an init container: Volcano 1.15.1 assigns vGPUs to spec.containers only
  (ExtractResourceRequest), and plugin v1.12.0's Allocate looks the pod up by its total vGPU count
  (pkg/util/util.go GetPendingPod: the count of all containers must equal the one container's request), so the
  kubelet fails such a pod with UnexpectedAdmissionError "cannot get valid pod".
- vGPUs in a pod another scheduler places: nothing writes the assignment the plugin reads; the same kubelet error.
- volcano.sh/vgpu-memory-percentage: Volcano reads it, but no node offers it as a resource, so the pod stays Pending.
- more vgpu-number in one container than a node has GPUs: each vGPU of a container is on a different card.
- nvidia.com/gpu where no node offers it: the pod stays Pending with gang messages that never name the resource.
A second policy, bound with the Warn action, answers a vgpu-memory written in whole GiB of MiB (1024, 8192) where a
unit is more than 1 MiB with what it means on this fleet.
"""

from __future__ import annotations

from ansible_collections.gpufleet.vgpu.plugins.module_utils import _contract

POLICY_API = "admissionregistration.k8s.io/v1"
# Served in this order of preference; the role asks the cluster which one it has.
MUTATING_POLICY_APIS = ("admissionregistration.k8s.io/v1", "admissionregistration.k8s.io/v1beta1")
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpufleet.vgpu.device_plugin"}


def largest_gpu(nodes_gpus, factor):
    """{node, model, memory_mib, units} of the card with the most memory units, or None without GPUs."""
    best = None
    for node in sorted(nodes_gpus):
        for gpu in nodes_gpus[node]:
            units = gpu["memory_mib"] // factor
            if best is None or units > best["units"]:
                best = {"node": node, "model": gpu.get("model") or "unknown", "memory_mib": gpu["memory_mib"],
                        "units": units}
    return best


def _quantities(resource):
    """CEL: the resource's value in every container and init container (limits first, then requests; '0' if none)."""
    pick = ("(has(c.resources) && has(c.resources.limits) && '{r}' in c.resources.limits ? "
            "string(c.resources.limits['{r}']) : has(c.resources) && has(c.resources.requests) && "
            "'{r}' in c.resources.requests ? string(c.resources.requests['{r}']) : '0')").format(r=resource)
    return ("object.spec.containers.map(c, {p}) + (has(object.spec.initContainers) ? "
            "object.spec.initContainers.map(c, {p}) : [])").format(p=pick)


def policy(name, largest, factor, memory_resource="volcano.sh/vgpu-memory"):
    """[ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding] for the fleet's largest card."""
    limit = largest["units"]
    explain = ("%s counts units of %d MiB on this fleet (gpuMemoryFactor %d, role gpufleet.vgpu.device_plugin), "
               "not MiB: N units = N x %d MiB per vGPU. The largest card is %s on %s with %d MiB = %d units, so no "
               "vGPU can have more than %d units; ask for at most %d"
               % (memory_resource, factor, factor, factor, largest["model"], largest["node"], largest["memory_mib"],
                  limit, limit, limit))
    over = "variables.memory.filter(m, quantity(m).compareTo(quantity('%d')) > 0)" % limit
    policy_doc = {
        "apiVersion": POLICY_API, "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "labels": dict(MANAGED_BY)},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                    "operations": ["CREATE"], "resources": ["pods"]}]},
            "variables": [{"name": "memory", "expression": _quantities(memory_resource)}],
            "validations": [{
                "expression": "variables.memory.all(m, !isQuantity(m) || quantity(m).compareTo(quantity('%d')) <= 0)"
                              % limit,
                # As a whole number: the API server writes 9000 as the canonical quantity "9k".
                "messageExpression": "'%s asks for ' + string(quantity(%s[0]).asInteger()) + ' units. ' + '%s'"
                                     % (memory_resource, over, explain.replace("'", "")),
                "reason": "Invalid",
            }],
        },
    }
    binding = {
        "apiVersion": POLICY_API, "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name, "labels": dict(MANAGED_BY)},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
    return [policy_doc, binding]


WHOLE_GPU = "nvidia.com/gpu"
NAMES = {"number": "volcano.sh/vgpu-number", "memory": "volcano.sh/vgpu-memory",
         "percentage": "volcano.sh/vgpu-memory-percentage", "cores": "volcano.sh/vgpu-cores"}
# The plugin's device-config field of each resource name (a site may rename them).
NAME_FIELDS = {"number": "resourceCountName", "memory": "resourceMemoryName",
               "percentage": "resourceMemoryPercentageName", "cores": "resourceCoreName"}


def _lit(text):
    """A CEL string literal of `text` (any quote in it escaped, so a message cannot end early)."""
    return '"%s"' % text.replace("\\", "\\\\").replace('"', '\\"')


def _names_in(resources):
    """CEL: container `c` names any of `resources` in its limits or requests."""
    listed = "[%s]" % ", ".join(_lit(r) for r in resources)
    return ("has(c.resources) && (has(c.resources.limits) && c.resources.limits.exists(k, k in {l}) || "
            "has(c.resources.requests) && c.resources.requests.exists(k, k in {l}))").format(l=listed)


def _names_of(containers, condition):
    return "%s.filter(c, %s).map(c, c.name)" % (containers, condition)


INIT = "(has(object.spec.initContainers) ? object.spec.initContainers : [])"


def shape_rules(names, largest, max_gpus, scheduler_names, refuse_whole_gpu):
    """(variables, validations) of the pod shapes this stack cannot run (see the module's docstring), each
    validation's message naming the field and what to write instead."""
    vgpu = _names_in([names["number"], names["memory"], names["cores"]])
    variables = [
        {"name": "vgpuContainers", "expression": _names_of("object.spec.containers", vgpu)},
        {"name": "vgpuInitContainers", "expression": _names_of(INIT, vgpu)},
        {"name": "percentage",
         "expression": _names_of("(object.spec.containers + %s)" % INIT, _names_in([names["percentage"]]))},
        # "name asks for N" of each container whose vgpu-number is above the most GPUs a node has (an extended resource
        # always has a limit; requests equal it).
        {"name": "overNumber", "expression": (
            "(object.spec.containers + {init}).filter(c, has(c.resources) && has(c.resources.limits) && {n} in "
            "c.resources.limits && isQuantity(string(c.resources.limits[{n}])) && "
            "quantity(string(c.resources.limits[{n}])).compareTo(quantity('{most}')) > 0).map(c, c.name + {asks} + "
            "string(c.resources.limits[{n}]))").format(init=INIT, n=_lit(names["number"]), most=max_gpus,
                                                       asks=_lit(" asks for "))},
    ]
    schedulers = "[%s]" % ", ".join(_lit(n) for n in scheduler_names)
    example = largest["units"] // 2
    rules = [
        ("variables.percentage.size() == 0",
         "%s + variables.percentage[0] + %s" % (_lit("container "), _lit(
             " asks for %s: Volcano reads it, but no node of this fleet offers it as a resource, so the pod would "
             "stay Pending. Ask for %s instead, in units of %d MiB (gpuMemoryFactor %d): for half of the largest "
             "card (%s, %d units) write %s: %d"
             % (names["percentage"], names["memory"], largest["factor"], largest["factor"], largest["model"],
                largest["units"], names["memory"], example)))),
        ("variables.vgpuInitContainers.size() == 0",
         "%s + variables.vgpuInitContainers[0] + %s" % (_lit("init container "), _lit(
             " asks for vGPUs: Volcano assigns vGPUs to a pod's containers only, so the kubelet finds no assignment "
             "for an init container and fails the pod (UnexpectedAdmissionError). Ask for them in a container"))),
        ("variables.vgpuContainers.size() <= 1",
         "%s + variables.vgpuContainers.join(%s) + %s" % (_lit("containers "), _lit(", "), _lit(
             " ask for vGPUs: the vGPU device plugin (v1.12.0) finds a pod by its total vGPU count, one container at "
             "a time, so the kubelet fails a pod whose vGPUs are in more than one container (UnexpectedAdmissionError: "
             "cannot get valid pod). Put the GPU work in one container, or give each container a pod of its own (a "
             "Volcano Job with one task each keeps them gang-scheduled)"))),
        ("variables.overNumber.size() == 0",
         "%s + variables.overNumber[0] + %s" % (_lit("container "), _lit(
             " %s: each vGPU of one container is on a different GPU, and no node of this fleet has more than %d "
             "GPUs. Ask for at most %d per container, or spread the work over pods"
             % (names["number"], max_gpus, max_gpus)))),
        ("variables.vgpuContainers.size() + variables.vgpuInitContainers.size() == 0 || "
         "has(object.spec.schedulerName) && object.spec.schedulerName in %s" % schedulers,
         "%s + (has(object.spec.schedulerName) ? object.spec.schedulerName : %s) + %s" % (
             _lit("spec.schedulerName is "), _lit("unset"), _lit(
                 ", but a pod that asks for vGPUs must be placed by Volcano (%s), which writes the vGPU assignment the "
                 "device plugin hands to the container; placed by another scheduler the kubelet fails it "
                 "(UnexpectedAdmissionError). Set spec.schedulerName: %s, or create the pod in a namespace for which "
                 "the volcano role sets it (volcano_admission_namespaces)"
                 % (" or ".join(scheduler_names), scheduler_names[0])))),
    ]
    if refuse_whole_gpu:
        whole = _names_of("(object.spec.containers + %s)" % INIT, _names_in([WHOLE_GPU]))
        variables.append({"name": "wholeGpu", "expression": whole})
        rules.append((
            "variables.wholeGpu.size() == 0",
            "%s + variables.wholeGpu[0] + %s" % (_lit("container "), _lit(
                " asks for %s, which no node of this fleet offered when gpufleet last ran (role "
                "gpufleet.vgpu.device_plugin): the pod would stay Pending. GPUs here are shared as vGPUs: ask for "
                "%s: 1 (a share of one card; N for N cards) and %s in units of %d MiB, with schedulerName: %s. If "
                "nodes offer %s now, run the device_plugin role again"
                % (WHOLE_GPU, names["number"], names["memory"], largest["factor"], scheduler_names[0], WHOLE_GPU)))))
    return variables, [{"expression": e, "messageExpression": m, "reason": "Invalid"} for e, m in rules]


def units_warning(name, memory_resource, factor):
    """[ValidatingAdmissionPolicy, binding with the Warn action]: a vgpu-memory of whole GiB written in MiB (a
    multiple of 1024) where a unit is `factor` MiB is admitted with a warning saying what it means here. Under
    factor 1 the number means what it says, and the policy never warns."""
    looks_mib = ("variables.memory.filter(m, isQuantity(m) && quantity(m).isInteger() && quantity(m).asInteger() > 0 "
                 "&& quantity(m).asInteger() % 1024 == 0).map(m, quantity(m).asInteger())")
    first = "variables.mibLike[0]"
    message = ("%s + string(%s) + %s + string(%s * %d) + %s + string(%s) + %s + string(%s / %d)"
               % (_lit(memory_resource + ": "), first,
                  _lit(" counts units of %d MiB on this fleet (gpuMemoryFactor %d), so it means " % (factor, factor)),
                  first, factor, _lit(" MiB per vGPU. If you meant "), first, _lit(" MiB, ask for "), first, factor))
    policy_doc = {
        "apiVersion": POLICY_API, "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "labels": dict(MANAGED_BY)},
        "spec": {
            "failurePolicy": "Ignore",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                    "operations": ["CREATE"], "resources": ["pods"]}]},
            "variables": [{"name": "memory", "expression": _quantities(memory_resource)},
                          {"name": "mibLike", "expression": looks_mib}],
            "validations": [{"expression": "variables.mibLike.size() == 0" if factor > 1 else "true",
                             "messageExpression": message}],
        },
    }
    binding = {
        "apiVersion": POLICY_API, "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name, "labels": dict(MANAGED_BY)},
        "spec": {"policyName": name, "validationActions": ["Warn"]},
    }
    return [policy_doc, binding]


def plan_names(plan):
    """The resource names a device_plugin plan's device config registers (NAMES where it keeps upstream's)."""
    config = plan.get("device_config") or {}
    return {key: config.get(field) or NAMES[key] for key, field in NAME_FIELDS.items()}


def offers(nodes, resource):
    """Whether any of `nodes` (Node objects as dicts) has a non-zero allocatable `resource`."""
    return any(str(((node.get("status") or {}).get("allocatable") or {}).get(resource, "0")) not in ("0", "")
               for node in nodes or [])


def request_policies_for_plan(plan, name="gpufleet-vgpu-memory", scheduler_names=("volcano",), nodes=()):
    """The admission policies of a device_plugin plan: `name` (Deny) refuses vGPU memory no card has and the pod
    shapes shape_rules() names; `name`-units (Warn) answers vgpu-memory written in MiB. nvidia.com/gpu is refused
    only where no node of `nodes` offers it. [] when the plan registers no GPU."""
    gpus = plan.get("gpus") or {}
    factor = plan["memory_factor"]
    largest = largest_gpu(gpus, factor)
    if largest is None:
        return []
    names = plan_names(plan)
    docs = policy(name, largest, factor, names["memory"])
    variables, validations = shape_rules(names, dict(largest, factor=factor), max(len(g) for g in gpus.values()),
                                         list(scheduler_names), not offers(nodes, WHOLE_GPU))
    docs[0]["spec"]["variables"] += variables
    docs[0]["spec"]["validations"] += validations
    return docs + units_warning(name + "-units", names["memory"], factor)


def even_share(nodes_gpus, splits, factor):
    """{node, model, memory_mib, split, units, mib}: the smallest card's memory units / its node's split - a share
    that lets every card of the fleet hold `split` such vGPUs - or None without GPUs."""
    best = None
    for node in sorted(nodes_gpus):
        for gpu in nodes_gpus[node]:
            units = (gpu["memory_mib"] // factor) // int(splits[node])
            if best is None or units < best["units"]:
                best = {"node": node, "model": gpu.get("model") or "unknown", "memory_mib": gpu["memory_mib"],
                        "split": int(splits[node]), "units": units, "mib": units * factor}
    return best


def _memoryless(names):
    """CEL: container `c` asks for vGPUs and names neither vGPU memory nor a memory percentage (limits or requests,
    as Volcano reads them)."""
    def named(resource):
        return ("(has(c.resources.limits) && '{r}' in c.resources.limits || has(c.resources.requests) && "
                "'{r}' in c.resources.requests)").format(r=resource)
    return ("has(c.resources) && has(c.resources.limits) && '{n}' in c.resources.limits && !{m} && !{p}"
            .format(n=names["number"], m=named(names["memory"]), p=named(names["percentage"])))


def default_memory_policy(name, share, api_version, names=None):
    """[MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding]: each container of a new pod that asks for vGPUs
    without memory gets `share['units']` of vgpu-memory in its limits and requests (server-side-apply merge, so the
    container's other resources stay)."""
    names = dict({"number": "volcano.sh/vgpu-number", "memory": "volcano.sh/vgpu-memory",
                  "percentage": "volcano.sh/vgpu-memory-percentage"}, **(names or {}))
    units = "{'%s': '%d'}" % (names["memory"], share["units"])
    condition = _memoryless(names)
    apply = ("Object{spec: Object.spec{containers: object.spec.containers.filter(c, %s).map(c, "
             "Object.spec.containers{name: c.name, resources: Object.spec.containers.resources{"
             "limits: %s, requests: %s}})}}" % (condition, units, units))
    policy_doc = {
        "apiVersion": api_version, "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": name, "labels": dict(MANAGED_BY), "annotations": {
            _contract.DEFAULT_MEMORY: "%d units = %d MiB: %s on %s (%d MiB) / split %d" % (
                share["units"], share["mib"], share["model"], share["node"], share["memory_mib"], share["split"])}},
        "spec": {
            "failurePolicy": "Fail",
            "reinvocationPolicy": "Never",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                    "operations": ["CREATE"], "resources": ["pods"]}]},
            "matchConditions": [{"name": "asks-for-vgpus-without-memory",
                                 "expression": "object.spec.containers.exists(c, %s)" % condition}],
            "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": apply}}],
        },
    }
    binding = {
        "apiVersion": api_version, "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": name, "labels": dict(MANAGED_BY)},
        "spec": {"policyName": name},
    }
    return [policy_doc, binding]


def _plan_share(plan):
    """(the even share of a device_plugin plan's GPUs or None, its resource names)."""
    splits = {node: want["split"] for node, want in (plan.get("expected") or {}).items()}
    config = plan.get("device_config") or {}
    names = {key: config[field] for key, field in (("number", "resourceCountName"), ("memory", "resourceMemoryName"),
                                                   ("percentage", "resourceMemoryPercentageName")) if config.get(field)}
    return even_share(plan.get("gpus") or {}, splits, plan["memory_factor"]), names


def default_memory_policy_for_plan(plan, name="gpufleet-vgpu-default-memory", api_version=MUTATING_POLICY_APIS[0]):
    """default_memory_policy() with the even share of a device_plugin plan's GPUs and its resource names; [] when
    it registers none."""
    share, names = _plan_share(plan)
    if share is None:
        return []
    return default_memory_policy(name, share, api_version, names)


def default_memory_probe_for_plan(plan, namespace, image, scheduler_name="volcano"):
    """What proves the default-memory policy is in effect: {pod, resource, units}, a pod asking for one vGPU without
    memory (for a server-side dry run: the API server starts applying a new policy a moment after storing it, and
    a pod created in that moment gets a whole card) and the vGPU memory the policy gives it; None without GPUs."""
    share, names = _plan_share(plan)
    if share is None:
        return None
    number = names.get("number", "volcano.sh/vgpu-number")
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "gpufleet-default-memory-probe", "namespace": namespace, "labels": dict(MANAGED_BY)},
           # Volcano's: the request policy refuses a vGPU pod for another scheduler (dry run or not).
           "spec": {"schedulerName": scheduler_name,
                    "containers": [{"name": "probe", "image": image, "resources": {"limits": {number: "1"}}}]}}
    return {"pod": pod, "resource": names.get("memory", "volcano.sh/vgpu-memory"), "units": str(share["units"])}
