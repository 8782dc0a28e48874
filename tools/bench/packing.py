"""The offline packing bound of benchmark B2: the most vGPU memory any placement of a trace could hold.

Pure logic (no cluster): GPUs are {id, memory, slots}; a trace is a list of jobs, each a list of pod memory requests
(one vGPU each, all-or-nothing when the job has more than one pod, as a gang). CP-SAT maximises the placed memory;
when it stops at its time limit the solver's proven upper bound is used, so the reported fraction never flatters.
"""

from ortools.sat.python import cp_model


def packing_bound(gpus, jobs, time_limit=30.0, workers=2):
    """Returns {bound, best, optimal, status}: bound = proven upper bound of placeable memory, best = a placement
    found (lower bound). gpus: [{"memory": int, "slots": int}], jobs: [[memory, ...], ...]."""
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
    for g, gpu in enumerate(gpus):
        on_gpu = [(jobs[j][p], var) for (j, p, gg), var in placed.items() if gg == g]
        if on_gpu:
            model.Add(sum(m * v for m, v in on_gpu) <= gpu["memory"])
            model.Add(sum(var for dummy, var in on_gpu) <= gpu["slots"])
    model.Maximize(sum(sum(pods) * take[j] for j, pods in enumerate(jobs)))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit
    solver.parameters.num_search_workers = workers
    solver.parameters.random_seed = 1
    status = solver.Solve(model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        raise RuntimeError("CP-SAT found no placement (status %s)" % solver.StatusName(status))
    return {"bound": int(round(solver.BestObjectiveBound())), "best": int(round(solver.ObjectiveValue())),
            "optimal": status == cp_model.OPTIMAL, "status": solver.StatusName(status)}
