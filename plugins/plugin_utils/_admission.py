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


def memory_policy_for_plan(plan, name="gpufleet-vgpu-memory"):
    """policy() for the largest card a device_plugin plan registers; [] when it registers none."""
    largest = largest_gpu(plan.get("gpus") or {}, plan["memory_factor"])
    if largest is None:
        return []
    resource = (plan.get("device_config") or {}).get("resourceMemoryName") or "volcano.sh/vgpu-memory"
    return policy(name, largest, plan["memory_factor"], resource)


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


def default_memory_probe_for_plan(plan, namespace, image):
    """What proves the default-memory policy is in effect: {pod, resource, units}, a pod asking for one vGPU without
    memory (for a server-side dry run: the API server starts applying a new policy a moment after storing it, and
    a pod created in that moment gets a whole card) and the vGPU memory the policy gives it; None without GPUs."""
    share, names = _plan_share(plan)
    if share is None:
        return None
    number = names.get("number", "volcano.sh/vgpu-number")
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "gpufleet-default-memory-probe", "namespace": namespace, "labels": dict(MANAGED_BY)},
           "spec": {"containers": [{"name": "probe", "image": image, "resources": {"limits": {number: "1"}}}]}}
    return {"pod": pod, "resource": names.get("memory", "volcano.sh/vgpu-memory"), "units": str(share["units"])}
