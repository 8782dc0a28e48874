# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ValidatingAdmissionPolicy that refuses vGPU memory no card of the fleet has (controller only).

volcano.sh/vgpu-memory counts units of gpuMemoryFactor MiB, not MiB: with factor 3, `vgpu-memory: 8188` asks for
24564 MiB. A request above the largest card's units can never be placed; without this policy such a pod stays
Pending with a scheduler message that does not mention the unit. The policy is plain CEL, evaluated by the API
server (admissionregistration.k8s.io/v1, GA in Kubernetes 1.30).
"""

from __future__ import annotations

POLICY_API = "admissionregistration.k8s.io/v1"


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
               "vGPU can have more than %d units; ask for at most %d (or for volcano.sh/vgpu-memory-percentage)"
               % (memory_resource, factor, factor, factor, largest["model"], largest["node"], largest["memory_mib"],
                  limit, limit, limit))
    over = "variables.memory.filter(m, quantity(m).compareTo(quantity('%d')) > 0)" % limit
    policy_doc = {
        "apiVersion": POLICY_API, "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "gpufleet.vgpu.device_plugin"}},
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
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "gpufleet.vgpu.device_plugin"}},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
    return [policy_doc, binding]
