# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The fleet's vGPU capacity: per node and GPU, from the plugin's node registration and the pods' allocations.

Pure functions, no Ansible. Input are Node and Pod objects as plain dicts (what kubernetes.core.k8s_info returns).
"""

from __future__ import annotations

from ansible_collections.gpufleet.vgpu.plugins.module_utils import _markdown

REGISTER = "volcano.sh/node-vgpu-register"
POD_DEVICES = "volcano.sh/vgpu-ids-new"
RESOURCES = ("volcano.sh/vgpu-number", "volcano.sh/vgpu-memory", "volcano.sh/vgpu-cores")


def parse_register(value):
    """'uuid,split,mem,NVIDIA-type,health[,mode]:...' -> [{uuid, split, memory_units, model, healthy, mode}]."""
    cards = []
    for entry in (value or "").split(":"):
        items = entry.split(",")
        if len(items) < 5:
            continue
        model = items[3][len("NVIDIA-"):] if items[3].startswith("NVIDIA-") else items[3]
        cards.append({"uuid": items[0], "split": int(items[1]), "memory_units": int(items[2]), "model": model,
                      "healthy": items[4] == "true", "mode": items[5] if len(items) > 5 else "hami-core"})
    return cards


def parse_pod_devices(value):
    """'uuid,NVIDIA,mem,cores:...;...' (one group per container) -> [{uuid, memory_units, cores}]."""
    devices = []
    for container in (value or "").split(";"):
        for entry in container.split(":"):
            items = entry.split(",")
            if len(items) >= 4 and items[0]:
                devices.append({"uuid": items[0], "memory_units": int(items[2]), "cores": int(items[3])})
    return devices


def free_by_gpu(registers, allocations):
    """What each GPU has left: registers are node-vgpu-register annotation values, allocations the vgpu-ids-new
    values of the pods that hold devices. -> {uuid: {"slots": vGPUs left, "memory": memory units left}}."""
    free = {}
    for value in registers:
        for card in parse_register(value):
            if card["healthy"]:
                free[card["uuid"]] = {"slots": card["split"], "memory": card["memory_units"]}
    for value in allocations:
        for device in parse_pod_devices(value):
            if device["uuid"] in free:
                free[device["uuid"]]["slots"] -= 1
                free[device["uuid"]]["memory"] -= device["memory_units"]
    return free


def fits(requests, free):
    """Whether one vGPU each of `requests` (memory units) fits `free` together: first fit, largest request first
    onto the fullest GPU that takes it. A heuristic: False can be wrong for a few tight mixes, True never is."""
    left = {uuid: dict(card) for uuid, card in free.items()}
    for memory in sorted(requests, reverse=True):
        spot = next((uuid for uuid, card in sorted(left.items(), key=lambda kv: (kv[1]["memory"], kv[0]))
                     if card["slots"] >= 1 and card["memory"] >= memory), None)
        if spot is None:
            return False
        left[spot]["slots"] -= 1
        left[spot]["memory"] -= memory
    return True


def _live(pod):
    status = (pod.get("status") or {}).get("phase")
    return status in ("Pending", "Running") and (pod.get("spec") or {}).get("nodeName")


WHOLE_CARD = "whole-card"


def report(nodes, pods, memory_factor=1, default_memory=""):
    """Per node and GPU: model, memory, split, vGPUs, memory per vGPU, allocated; and fleet totals.

    default_memory: what a vGPU request without memory gets, as the device_plugin role recorded it ("whole-card" or
    "<units> units = <MiB> MiB: ..."); empty is read as whole-card, Volcano's own rule."""
    used = {}
    for pod in pods or []:
        if not _live(pod):
            continue
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        for device in parse_pod_devices(annotations.get(POD_DEVICES)):
            card = used.setdefault(device["uuid"], {"vgpus": 0, "memory_units": 0, "cores": 0})
            card["vgpus"] += 1
            card["memory_units"] += device["memory_units"]
            card["cores"] += device["cores"]
    rows, totals = [], {"gpus": 0, "vgpus": 0, "vgpus_allocated": 0, "memory_mib": 0, "memory_mib_allocated": 0}
    for node in sorted(nodes or [], key=lambda n: n["metadata"]["name"]):
        annotations = node["metadata"].get("annotations") or {}
        cards = parse_register(annotations.get(REGISTER))
        if not cards:
            continue
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        gpus = []
        for card in cards:
            taken = used.get(card["uuid"], {"vgpus": 0, "memory_units": 0, "cores": 0})
            per_vgpu = card["memory_units"] // max(card["split"], 1)
            gpus.append({
                "uuid": card["uuid"], "model": card["model"], "healthy": card["healthy"], "mode": card["mode"],
                "memory_mib": card["memory_units"] * memory_factor, "split": card["split"], "vgpus": card["split"],
                # What a pod can request when the card is shared evenly: the NVML total (less than nominal) / split.
                "memory_per_vgpu_units": per_vgpu, "memory_per_vgpu_mib": per_vgpu * memory_factor,
                "vgpus_allocated": taken["vgpus"], "memory_units_allocated": taken["memory_units"],
                "memory_mib_allocated": taken["memory_units"] * memory_factor,
            })
        row = {"node": node["metadata"]["name"], "gpus": gpus,
               "allocatable": {r: allocatable.get(r) for r in RESOURCES},
               "vgpus": sum(g["vgpus"] for g in gpus), "vgpus_allocated": sum(g["vgpus_allocated"] for g in gpus),
               "memory_mib": sum(g["memory_mib"] for g in gpus),
               "memory_mib_allocated": sum(g["memory_mib_allocated"] for g in gpus)}
        rows.append(row)
        totals["gpus"] += len(gpus)
        for key in ("vgpus", "vgpus_allocated", "memory_mib", "memory_mib_allocated"):
            totals[key] += row[key]
    return {"memory_factor": memory_factor, "default_memory": default_memory or WHOLE_CARD, "nodes": rows,
            "totals": totals}


def _default_memory_sentence(default_memory):
    if default_memory == WHOLE_CARD:
        return ("A vGPU request **without** `volcano.sh/vgpu-memory` gets **the whole card's memory** (Volcano's "
                "rule), so no other vGPU fits beside it; \"memory per vGPU\" below is what an even split leaves each "
                "vGPU, not a default. Ask for memory, or set `device_plugin_default_memory: even-share`.")
    return ("A vGPU request **without** `volcano.sh/vgpu-memory` gets %s (`device_plugin_default_memory: even-share`, "
            "added at admission), so every card holds its split of them." % default_memory)


def markdown(capacity):
    """The capacity report as a Markdown section."""
    factor = capacity["memory_factor"]
    lines = ["## vGPU capacity", "",
             "One `volcano.sh/vgpu-memory` unit = %d MiB (gpuMemoryFactor). Memory is what NVML reports, less than "
             "the nominal size; HAMi-core also counts the CUDA context against a vGPU's limit." % factor, "",
             _default_memory_sentence(capacity["default_memory"]), ""]
    rows = []
    for row in capacity["nodes"]:
        for index, gpu in enumerate(row["gpus"]):
            rows.append((row["node"], index, gpu["model"], gpu["memory_mib"], gpu["split"],
                         "%d / %d" % (gpu["memory_per_vgpu_units"], gpu["memory_per_vgpu_mib"]),
                         "%d of %d" % (gpu["vgpus_allocated"], gpu["vgpus"]), gpu["memory_mib_allocated"]))
        alloc = row["allocatable"]
        rows.append(("**%s**" % row["node"], "all", "", row["memory_mib"], "", "",
                     "%d of %d" % (row["vgpus_allocated"], row["vgpus"]), row["memory_mib_allocated"]))
        rows.append(("", "allocatable", "", "vgpu-memory %s" % alloc["volcano.sh/vgpu-memory"], "", "",
                     "vgpu-number %s" % alloc["volcano.sh/vgpu-number"],
                     "vgpu-cores %s" % alloc["volcano.sh/vgpu-cores"]))
    lines += _markdown.table(("node", "GPU", "model", "memory MiB", "split", "memory per vGPU (units / MiB)",
                              "vGPUs allocated", "memory allocated MiB"), rows, right=(3, 4, 5, 6, 7))
    totals = capacity["totals"]
    lines += ["", "Fleet: %d GPUs, %d vGPUs (%d allocated), %d MiB of GPU memory (%d MiB allocated)." % (
        totals["gpus"], totals["vgpus"], totals["vgpus_allocated"], totals["memory_mib"],
        totals["memory_mib_allocated"])]
    return "\n".join(lines) + "\n"


def full_report(nodes, pods, memory_factor=1, default_memory=""):
    """report() with its Markdown table and one line per node."""
    capacity = report(nodes, pods, int(memory_factor), default_memory)
    capacity["markdown"] = markdown(capacity)
    capacity["lines"] = ["%s: %d GPUs, %d of %d vGPUs allocated, %d of %d MiB allocated" % (
        row["node"], len(row["gpus"]), row["vgpus_allocated"], row["vgpus"], row["memory_mib_allocated"],
        row["memory_mib"]) for row in capacity["nodes"]]
    return capacity
