"""The offline packing bound of benchmark B2: the most vGPU memory any placement of a trace could hold.

Pure logic (no cluster): GPUs are {memory, slots}; a trace is a list of jobs, each a list of pod memory requests
(one vGPU each, all-or-nothing when the job has more than one pod, as a gang). CP-SAT maximises the placed memory.

Reproducible: one search worker and a limit in CP-SAT's deterministic time (work units, not seconds), so the same
trace gives the same answer on any machine and under any load. When the limit stops the search before the optimum
is proven, the solver's proven upper bound is used and the gap is reported, so a fraction never flatters.
"""

from ortools.sat.python import cp_model

# What the B2 JSON records as its solver settings. Every B2 trace of the pinned OR-Tools is proven optimal within
# about a tenth of this limit (seeds 0-4, splits 2 and 4).
SETTINGS = {"solver": "OR-Tools CP-SAT", "workers": 1, "random_seed": 1, "max_deterministic_time": 600.0,
            "symmetry_breaking": "identical GPUs ordered by load"}


def packing_bound(gpus, jobs, max_deterministic_time=SETTINGS["max_deterministic_time"]):
    """Returns {bound, best, optimal, status, gap, deterministic_time}: bound = proven upper bound of placeable
    memory, best = the best placement found (lower bound), gap = (bound - best) / bound.
    gpus: [{"memory": int, "slots": int}], jobs: [[memory, ...], ...]."""
    model = cp_model.CpModel()
    placed = {}
    take = []
    for j, pods in enumerate(jobs):
        job_on = model.NewBoolVar("job%d" % j)
        take.append(job_on)
        for p, memory in enumerate(pods):
            row = []
            for g, gpu in enumerate(gpus):
                if memory <= gpu["memory"] and gpu["slots"] > 0:
                    var = model.NewBoolVar("x%d_%d_%d" % (j, p, g))
                    placed[j, p, g] = var
                    row.append(var)
            # A pod sits on exactly one GPU when its job runs, on none otherwise (gangs: all or nothing).
            model.Add(sum(row) == job_on)
    loads = []
    for g, gpu in enumerate(gpus):
        on_gpu = [(jobs[j][p], var) for (j, p, gg), var in placed.items() if gg == g]
        loads.append(sum(m * v for m, v in on_gpu) if on_gpu else 0)
        if on_gpu:
            model.Add(loads[g] <= gpu["memory"])
            model.Add(sum(var for dummy, var in on_gpu) <= gpu["slots"])
    # Identical GPUs are interchangeable: of the placements that differ only by swapping them, keep the one whose
    # loads fall along the list. The optimum is unchanged; the proof no longer visits every permutation.
    for g in range(len(gpus) - 1):
        if gpus[g] == gpus[g + 1] and not isinstance(loads[g], int):
            model.Add(loads[g] >= loads[g + 1])
    model.Maximize(sum(sum(pods) * take[j] for j, pods in enumerate(jobs)))
    solver = cp_model.CpSolver()
    solver.parameters.max_deterministic_time = max_deterministic_time
    solver.parameters.num_search_workers = SETTINGS["workers"]
    solver.parameters.random_seed = SETTINGS["random_seed"]
    status = solver.Solve(model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        raise RuntimeError("CP-SAT found no placement (status %s)" % solver.StatusName(status))
    bound, best = int(round(solver.BestObjectiveBound())), int(round(solver.ObjectiveValue()))
    return {"bound": bound, "best": best, "optimal": status == cp_model.OPTIMAL, "status": solver.StatusName(status),
            "gap": round((bound - best) / float(bound), 6) if bound else 0.0,
            "deterministic_time": round(solver.deterministic_time, 2)}


def online_placement(gpus, jobs, order=None):
    """Memory an online gang scheduler places when it takes the jobs one by one and keeps what it placed: the
    singles first, in submission order, then the gangs (Volcano's job controller creates a gang's pods only after
    its PodGroup was enqueued, so the singles' pods are there first), each pod on the GPU with the least free memory
    that holds it (binpack), a gang all or nothing. `order`, when given, is the job order to use instead (a policy
    to study). gpus: [{"memory", "slots"}]; jobs: [[memory, ...], ...]. Returns the placed memory."""
    free = [dict(gpu) for gpu in gpus]
    if order is None:
        order = [j for j, pods in enumerate(jobs) if len(pods) == 1] + [j for j, pods in enumerate(jobs)
                                                                        if len(pods) > 1]
    placed = 0
    for j in order:
        taken = []
        for memory in jobs[j]:
            fits = [g for g, gpu in enumerate(free) if gpu["slots"] > 0 and gpu["memory"] >= memory]
            if not fits:
                break
            g = min(fits, key=lambda i: (free[i]["memory"], i))
            free[g]["memory"] -= memory
            free[g]["slots"] -= 1
            taken.append((g, memory))
        if len(taken) == len(jobs[j]):
            placed += sum(jobs[j])
        else:
            for g, memory in taken:  # a gang that does not fit whole gives back what it took
                free[g]["memory"] += memory
                free[g]["slots"] += 1
    return placed


def largest_first(jobs, singles_only=False):
    """A job order by memory per vGPU, largest first (stable), for online_placement: every job, or only the singles
    (the gangs after them in submission order, as Volcano's job controller releases their pods later)."""
    if singles_only:
        singles = sorted((j for j, pods in enumerate(jobs) if len(pods) == 1), key=lambda j: -jobs[j][0])
        return singles + [j for j, pods in enumerate(jobs) if len(pods) > 1]
    return sorted(range(len(jobs)), key=lambda j: -max(jobs[j]))
