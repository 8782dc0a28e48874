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
