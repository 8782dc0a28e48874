"""Seeded, reproducible vGPU work traces and the placement figures of benchmark B2 (pure logic, unit-tested)."""

import math
import random

from ansible_collections.gpufleet.vgpu.plugins.module_utils import _capacity

# vGPU memory a job asks for (MiB) and how often: notebooks and inference mostly, a few large fine-tunes.
MEMORY_MIX = ((2048, 0.20), (4096, 0.30), (6144, 0.15), (8192, 0.20), (12288, 0.10), (16384, 0.05))
GANG_SHARE = 0.2           # jobs that are gangs of 2-5 pods
GANG_MAX_MIB = 8192        # gang members are data-parallel workers: mid-sized


def make_trace(seed, slots, memory_mib, overload=1.5):
    """Jobs in submission order until the demand exceeds the capacity by `overload` in vGPUs or in memory.
    Returns [{"name", "pods": [mib, ...]}]."""
    rng = random.Random(seed)
    sizes, weights = zip(*MEMORY_MIX)
    jobs, pods, memory = [], 0, 0
    while pods < overload * slots and memory < overload * memory_mib:
        if rng.random() < GANG_SHARE:
            count = rng.randint(2, 5)
            mib = rng.choices([s for s in sizes if s <= GANG_MAX_MIB],
                              [w for s, w in MEMORY_MIX if s <= GANG_MAX_MIB])[0]
            job = [mib] * count
        else:
            job = [rng.choices(sizes, weights)[0]]
        jobs.append({"name": "j%03d" % len(jobs), "pods": job})
        pods += len(job)
        memory += sum(job)
    return jobs


def units(mib, factor):
    """volcano.sh/vgpu-memory units a pod requests for `mib` (one unit = gpuMemoryFactor MiB)."""
    return int(math.ceil(mib / float(factor)))


def percentile(values, fraction):
    """Nearest-rank percentile; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, int(math.ceil(fraction * len(ordered))) - 1)]


def placement_figures(jobs, bound_pods, free):
    """What a finished run left: partial gangs, and Pending pods that a GPU could take now (the scheduler missed
    them) or that only the sum of the free capacity could take (fragmentation).
    free: {uuid: {"memory", "slots"}} left on each GPU; bound_pods: {job name:
    number of its pods bound}; jobs as from make_trace with "units" per pod."""
    partial = [job["name"] for job in jobs if 0 < bound_pods.get(job["name"], 0) < len(job["units"])]
    fits_now, fragmented = [], []
    total_memory = sum(f["memory"] for f in free.values())
    total_slots = sum(f["slots"] for f in free.values())
    for job in jobs:
        if bound_pods.get(job["name"], 0):
            continue
        need = job["units"]
        if _capacity.fits(need, free):
            fits_now.append(job["name"])
        elif sum(need) <= total_memory and len(need) <= total_slots:
            fragmented.append(job["name"])
    return {"partial_gangs": partial, "pending_fit_now": fits_now, "pending_fragmented": fragmented}
