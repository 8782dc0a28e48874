"""docs/benchmarks.md from the raw JSON of a `make bench` run.

Every figure of the page comes from the JSON: the tables, and the sentences that state a goal as met or not, the
spread of repeated runs and which configuration placed more. The template (docs/benchmarks.md.in) holds the method
and the reasons, in words without figures, and names what is filled in as {{placeholders}}.
"""

import json
import re
import statistics

from ansible_collections.gpufleet.vgpu.plugins.module_utils import _markdown

B2_GOAL = 0.97          # mean placed / optimum of gpufleet's default, per split
B3_GOAL = 0.5           # vGPU bind rate / plain-pod bind rate
B3_GOAL_NODES = 1000    # the fleet size the B3 goal is stated for
# B1's goals: (hosts, against, bound) - rerun(hosts) <= bound x the median of `against` (rerun on 1 host, or facts
# plus one NVML call on the same hosts).
B1_GOALS = ((8, "rerun_1", 1.5), (16, "rerun_1", 2.0), (8, "facts_nvml", 2.0))
B1_PROFILE_ROWS = 20
DEFAULT = "gpufleet-default"


def _load(out, name):
    path = out / ("%s.json" % name)
    return json.loads(path.read_text()) if path.exists() else None


def _table(header, rows):
    return "\n".join(_markdown.table(header, rows))


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _spread(values, fmt="%.1f"):
    """'median (min-max)' of repeated figures; the single figure when there is one."""
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    if min(values) == max(values):
        return fmt % values[0]
    return "%s (%s-%s)" % (fmt % statistics.median(values), fmt % min(values), fmt % max(values))


def _pct(value):
    return "-" if value is None else "%.1f%%" % (100 * value)


def provenance(name, data):
    """One line: when, on what, from which commit, with which versions, and whether the tree was clean."""
    if not data:
        return "%s: not run." % name
    machine = data["machine"]
    line = "%s: %s, %s CPUs (%s), %.0f GiB" % (
        name, machine["date"], machine["cpus"], machine["cpu_model"], machine["memory_gib"])
    source = data.get("source")
    if source:
        line += ", commit %s" % source["commit"][:12]
        if source["changed_paths"]:
            line += " with uncommitted changes to %s" % ", ".join(source["changed_paths"])
        if source.get("commit_at_write"):
            line += (", HEAD at %s when the figures were written (commits made while it ran, not in the code it ran)"
                     % source["commit_at_write"][:12])
        if not source["dirty"]:
            line += " (clean tree)"
    else:
        line += ", commit %s (whether the tree was clean was not recorded)" % machine.get("commit", "?")
    versions = data.get("versions")
    if versions:
        line += "; Kubernetes %s, Volcano %s, vGPU plugin %s, kwok %s (roles' defaults: Volcano %s, plugin %s)" % (
            versions["kubernetes"], versions["volcano"], versions["vgpu_plugin"], versions["kwok"],
            versions["volcano_image_tag"], versions["device_plugin_version"])
    else:
        line += "; component versions not recorded (a run before they were)"
    return line + "."


# ---------------------------------------------------------------- B1

def _by_size(rows):
    sizes = {}
    for row in rows:
        sizes.setdefault(row["hosts"], []).append(row)
    return sorted(sizes.items())


def _batches(figures):
    """A rerun's batches as read: 'all at once: 8 · rolling: 1, 1' (hosts per batch of each part)."""
    batches = figures.get("batches") or {}
    steady = [len(b) for b in batches.get("steady", []) if b]
    rolling = [len(b) for b in batches.get("rolling", []) if b]
    return "all at once: %s; rolling: %s" % (", ".join(map(str, steady)) or "-", ", ".join(map(str, rolling)) or "-")


def _b1_empty():
    return {"b1": "_not run_", "b1_goal": "B1 was not run.", "b1_profile": "", "b1_repeats": "not run",
            "b1_facts": "", "b1_idempotent": "", "b1_disrupt": ""}


def b1_goals(medians):
    """The goal sentences from {hosts: {"rerun": s, "facts_nvml": s}} medians."""
    lines, met = [], True
    for hosts, against, bound in B1_GOALS:
        base = (medians.get(1) or {}).get("rerun") if against == "rerun_1" else (medians.get(hosts) or {}).get(
            "facts_nvml")
        label = "rerun(1 host)" if against == "rerun_1" else "(facts + one NVML call)(%d hosts)" % hosts
        rerun = (medians.get(hosts) or {}).get("rerun")
        if rerun is None or base is None:
            lines.append("rerun(%d hosts) <= %.1f x %s: not measured" % (hosts, bound, label))
            met = False
            continue
        ratio = rerun / base
        met = met and ratio <= bound
        lines.append("rerun(%d hosts) <= %.1f x %s: %s (%.1f s / %.1f s = %.2f)" % (
            hosts, bound, label, "met" if ratio <= bound else "not met", rerun, base, ratio))
    return "**Goal: %s.**\n\n%s" % ("met" if met else "not met", "\n".join("- " + line for line in lines))


def b1_why(medians, figures, hosts, cpus=None):
    """How the rerun and the baselines grow from one host to the largest size, and where the rerun's time beyond
    the baseline goes (from the median rerun's task profile): the reason a goal is or is not met."""
    one, most = medians.get(1) or {}, medians.get(hosts) or {}
    keys = ("facts", "facts_nvml", "rerun")
    if hosts == 1 or any(one.get(key) is None or most.get(key) is None for key in keys):
        return ""
    growth = {key: most[key] / one[key] for key in keys}
    text = ("How each grows from 1 to %d hosts, on the same hosts: `facts` %.1f×, `facts + NVML` %.1f×, the rerun "
            "%.1f× (one controller%s runs every host's connection)." % (
                hosts, growth["facts"], growth["facts_nvml"], growth["rerun"],
                " with %d CPUs" % cpus if cpus else ""))
    beyond = []
    for size, against, bound in B1_GOALS:
        base = medians.get(size) or {}
        if against == "rerun_1" and base.get("facts_nvml") and base["facts_nvml"] / one["facts_nvml"] > bound:
            beyond.append("at %d hosts `facts + NVML` alone grows %.1f× (goal %.1f×)"
                          % (size, base["facts_nvml"] / one["facts_nvml"], bound))
    if beyond:
        text += (" The goals on the rerun's growth ask for less than the least a rerun that checks the GPUs does on "
                 "this controller: %s." % "; ".join(beyond))
    profile = sorted(figures.get("profile") or [], key=lambda p: -p["seconds"])
    if profile:
        top, rest = profile[:3], profile[3:]
        text += (" The median rerun on %d hosts took %.1f s against %.1f s for `facts + NVML`; by its task profile "
                 "(below), %s, and the other %d tasks %.1f s together." % (
                     hosts, figures["seconds"], most["facts_nvml"],
                     ", ".join("%s %.1f s" % (p["task"].split(" : ")[-1], p["seconds"]) for p in top), len(rest),
                     sum(p["seconds"] for p in rest)))
    return text


def b1_profile(figures, hosts):
    """The top of a rerun's whole task profile, with its counts, and a line that sums it up."""
    profile = figures.get("profile") or []
    if not profile or "ok" not in profile[0]:
        return "_No task profile with per-task counts in this run's JSON._"
    summed = sum(p["seconds"] for p in profile)
    counts = {key: sum(p[key] for p in profile) for key in ("ok", "changed", "skipped", "failed")}
    rows = [[p["play"].split(" - ")[0], p["task"], "%.2f" % p["seconds"], p["ok"], p["changed"], p["skipped"]]
            for p in profile[:B1_PROFILE_ROWS]]
    return ("The %d slowest of the %d tasks of the median rerun on %d host%s (%.1f s wall; the tasks' wall times "
            "add up to %.1f s, as profile_tasks would print them; host results: %d ok, %d changed, %d skipped, %d "
            "failed; the whole profile is in b1-hosts.json):\n\n%s" % (
                min(B1_PROFILE_ROWS, len(profile)), len(profile), hosts, "s" * (hosts > 1), figures["seconds"],
                summed, counts["ok"], counts["changed"], counts["skipped"], counts["failed"],
                _table(["play", "task", "seconds", "ok", "changed", "skipped"], rows)))


def b1(data):
    if not data:
        return _b1_empty()
    groups = _by_size(data["runs"])
    main = _table(
        ["hosts", "runs", "facts (s)", "facts + NVML (s)", "first run, all at once (s)", "rerun (s)",
         "rerun / (facts + NVML)", "rerun / rerun(1)", "rerun changed (max)", "containerd restarts (max)",
         "rerun batches"],
        [[hosts, len(rows), _spread([r["facts_s"] for r in rows]), _spread([r.get("facts_nvml_s") for r in rows]),
          _spread([r.get("first_s") for r in rows]), _spread([r["rerun_fast"]["seconds"] for r in rows]),
          _spread([r["rerun_fast"].get("ratio_to_facts_nvml") for r in rows], "%.2f"),
          "%.2f" % (_median([r["rerun_fast"]["seconds"] for r in rows])
                    / _median([r["rerun_fast"]["seconds"] for r in groups[0][1]])) if groups[0][0] == 1 else "-",
          max(r["rerun_fast"]["changed"] for r in rows),
          max(r["rerun_fast"]["containerd_restarts"] for r in rows),
          _batches(rows[0]["rerun_fast"])] for hosts, rows in groups])
    every = [(hosts, [r for r in rows if "rerun_every_task" in r]) for hosts, rows in groups]
    every_table = _table(
        ["hosts", "runs", "rerun, every task (s)", "changed (max)", "containerd restarts (max)", "batches"],
        [[hosts, len(rows), _spread([r["rerun_every_task"]["seconds"] for r in rows]),
          max(r["rerun_every_task"]["changed"] for r in rows),
          max(r["rerun_every_task"]["containerd_restarts"] for r in rows), _batches(rows[0]["rerun_every_task"])]
         for hosts, rows in every if rows])
    manual = _table(
        ["hosts", "approach", "first run (s)", "rerun (s)", "containerd restarts on rerun (max)",
         "config files rewritten on rerun (max)"],
        [row for hosts, rows in groups for replays in ([r["manual"] for r in rows if "manual" in r],) for row in (
            [hosts, "gpufleet site.yml --tags nodes", _spread([r.get("first_s") for r in rows]),
             _spread([r["rerun_fast"]["seconds"] for r in rows]),
             max(r["rerun_fast"]["containerd_restarts"] for r in rows),
             max(r["rerun_fast"]["config_rewrites"] for r in rows)],
            [hosts, "manual script", _spread([m["first_s"] for m in replays]),
             _spread([m["rerun_s"] for m in replays]),
             max((m["containerd_restarts"] for m in replays), default="-"),
             max((m["config_rewrites"] for m in replays), default="-")])])
    medians = {hosts: {"rerun": _median([r["rerun_fast"]["seconds"] for r in rows]),
                       "facts": _median([r.get("facts_s") for r in rows]),
                       "facts_nvml": _median([r.get("facts_nvml_s") for r in rows])} for hosts, rows in groups}
    disrupted = [r["rerun_disrupt"] for hosts, rows in groups for r in rows if "rerun_disrupt" in r]
    if disrupted:
        rolled = all(all(len(b) <= 1 for b in d["batches"]["rolling"]) and
                     sum(len(b) for b in d["batches"]["rolling"]) == d["disrupted"] for d in disrupted)
        disrupt_text = ("%s\n\n**The disrupted hosts rolled one at a time: %s** (in every run the rolling part's "
                        "batches held one host each, and exactly the disrupted ones)." % (_table(
                            ["hosts", "disrupted", "runs", "rerun (s)", "containerd restarts", "changed (max)",
                             "batches"],
                            [[disrupted[0]["hosts"], disrupted[0]["disrupted"], len(disrupted),
                              _spread([d["seconds"] for d in disrupted]),
                              _spread([d["containerd_restarts"] for d in disrupted], "%d"),
                              max(d["changed"] for d in disrupted), _batches(disrupted[0])]]),
                            "yes" if rolled else "no"))
    else:
        disrupt_text = "_No run with disrupted hosts in this run's JSON._"
    # The task profile of the median rerun at the largest size: where a rerun's time goes as the fleet grows.
    hosts, rows = groups[-1]
    median_row = sorted(rows, key=lambda r: r["rerun_fast"]["seconds"])[len(rows) // 2]
    changed = max(r[key]["changed"] for hosts_, rows_ in groups for r in rows_
                  for key in ("rerun_fast", "rerun_every_task") if key in r)
    restarts = max(r[key]["containerd_restarts"] for hosts_, rows_ in groups for r in rows_
                   for key in ("rerun_fast", "rerun_every_task") if key in r)
    facts = ("`facts` is `ansible -m setup` on the same hosts after the first run, so it includes the local fact the "
             "node roles leave, as a rerun's fact gathering does." if data.get("facts_after_first_run") else
             "`facts` is `ansible -m setup` on the same hosts before the first run (this run's JSON predates the "
             "baseline with the local fact).")
    repeats = data.get("repeats", 1)
    if data.get("fresh_hosts_per_size") == 1:
        # One set of fresh hosts per size: the first run and the manual replay once, the rest `repeats` times.
        how = ("on one set of fresh hosts per size: the first run and the manual replay once, the baselines and the "
               "rerun %s on the same converged hosts" % ("once" if repeats == 1 else "%d times" % repeats))
    else:
        how = "each size %s on fresh hosts" % ("once" if repeats == 1 else "%d times" % repeats)
    return {"b1_facts": facts, "b1_repeats": how,
            "b1": "%s\n\nThe same rerun with every task run (the fast path off):\n\n%s\n\nThe article's manual "
                  "steps as a shell script (fresh hosts of the same image, all at once):\n\n%s" % (
                      main, every_table, manual),
            "b1_goal": "%s\n\n%s" % (b1_goals(medians), b1_why(medians, median_row["rerun_fast"], hosts, (data.get("machine") or {}).get("cpus"))),
            "b1_profile": b1_profile(median_row["rerun_fast"], hosts),
            "b1_disrupt": disrupt_text,
            "b1_idempotent": "**Reruns change nothing: %s** (largest changed count of any rerun of converged hosts: "
                             "%d; containerd restarts: %d)." % ("yes" if changed == 0 and restarts == 0 else "no",
                                                                changed, restarts)}


# ---------------------------------------------------------------- B2

def _groups(rows, *keys):
    found = {}
    for row in rows:
        found.setdefault(tuple(row.get(k, 0) for k in keys), []).append(row)
    return found


def b2_comparisons(rows):
    """Per split and per rival configuration: on how many seeds gpufleet's default placed more, as much, less
    (each seed's mean over its repeats)."""
    per_seed = {key: statistics.mean(r["fraction_of_bound"] for r in group)
                for key, group in _groups(rows, "split", "seed", "config").items()}
    result = {}
    for (split, seed, config), value in sorted(per_seed.items()):
        if config == DEFAULT or (split, seed, DEFAULT) not in per_seed:
            continue
        own = per_seed[(split, seed, DEFAULT)]
        tally = result.setdefault((split, config), {"more": 0, "same": 0, "less": 0})
        tally["more" if own > value + 1e-9 else "less" if own < value - 1e-9 else "same"] += 1
    return result


def _pending(rows, key):
    """How many jobs the runs left in `key` (pending_fit_now, pending_fragmented), with how many of them Volcano's
    enqueue action had not admitted (PodGroup still Pending), where the JSON records the phases."""
    jobs = [(r, job) for r in rows for job in r[key]]
    if not jobs or not all("podgroup_phases" in r for r in rows):
        return len(jobs)
    waiting = sum(1 for r, job in jobs if r["podgroup_phases"].get(job) == "Pending")
    return "%d (%d not enqueued)" % (len(jobs), waiting)


def b2(data):
    if not data:
        return {"b2": "_not run_", "b2_goal": "B2 was not run.", "b2_claims": "", "b2_solver": "",
                "b2_runs": "_not run_", "b2_seeds": "", "b2_online": "", "b2_settle": "-"}
    rows = sorted(data["runs"], key=lambda r: (r["split"], r.get("seed", 0), r.get("repeat", 0), r["config"]))
    runs = _table(
        ["split", "seed", "repeat", "configuration", "jobs (gangs)", "pods bound", "placed / optimum",
         "vGPUs used", "memory used", "pending that fit now", "pending, fragmented", "partial gangs", "p50 bind (s)",
         "p99 bind (s)"],
        [[r["split"], r.get("seed", 0), r.get("repeat", 0), r["config"], "%d (%d)" % (r["jobs"], r["gangs"]),
          "%d / %d" % (r["pods_bound"], r["pods"]), _pct(r["fraction_of_bound"]),
          "%.0f%%" % (100 * r["vgpus_used"]), "%.0f%%" % (100 * r["memory_used"]),
          _pending([r], "pending_fit_now"), _pending([r], "pending_fragmented"), len(r["partial_gangs"]),
          r["latency_p50_s"], r["latency_p99_s"]] for r in rows])
    summary = _groups(rows, "split", "config")
    means = _table(
        ["split", "configuration", "runs", "placed / optimum, mean", "stdev", "min", "max", "partial gangs, total",
         "pending that fit now, total"],
        [[split, config, len(group), _pct(statistics.mean(r["fraction_of_bound"] for r in group)),
          "%.1f pt" % (100 * statistics.pstdev([r["fraction_of_bound"] for r in group])),
          _pct(min(r["fraction_of_bound"] for r in group)), _pct(max(r["fraction_of_bound"] for r in group)),
          sum(len(r["partial_gangs"]) for r in group),
          _pending(group, "pending_fit_now")]
         for (split, config), group in sorted(summary.items())])
    seeds = _table(
        ["split", "seed", "optimum (units)", "proven", "gap"] + sorted({r["config"] for r in rows}),
        [[split, seed, group[0]["bound_units"], "yes" if group[0]["bound_optimal"] else "no",
          "%.4f%%" % (100 * group[0].get("bound_gap", 0.0))]
         + [_spread([r["fraction_of_bound"] * 100 for r in group if r["config"] == config], "%.1f%%")
            for config in sorted({r["config"] for r in rows})]
         for (split, seed), group in sorted(_groups(rows, "split", "seed").items())])
    goal_parts, met = [], True
    for (split, config), group in sorted(summary.items()):
        if config != DEFAULT:
            continue
        mean = statistics.mean(r["fraction_of_bound"] for r in group)
        partial = sum(len(r["partial_gangs"]) for r in group)
        ok = mean >= B2_GOAL and partial == 0
        met = met and ok
        goal_parts.append("split %d: mean %s over %d run%s, %d partial gang%s - %s" % (
            split, _pct(mean), len(group), "s" * (len(group) != 1), partial, "s" * (partial != 1),
            "met" if ok else "not met"))
    goal = "**Goal: gpufleet's default places a mean >= %.0f%% of the optimum with 0 partial gangs: %s** (%s)." % (
        100 * B2_GOAL, "met" if met and goal_parts else "not met", "; ".join(goal_parts))
    claims = []
    for (split, config), tally in sorted(b2_comparisons(rows).items()):
        total = sum(tally.values())
        if tally["more"] == total:
            verdict = "better on every seed"
        elif tally["less"] == total:
            verdict = "worse on every seed"
        elif tally["same"] == total:
            verdict = "equal on every seed"
        else:
            verdict = "no claim: the seeds disagree"
        claims.append("- split %d, against %s: more on %d seed%s, as much on %d, less on %d - %s." % (
            split, config, tally["more"], "s" * (tally["more"] != 1), tally["same"], tally["less"], verdict))
    bounds = data.get("bounds") or []
    solver = data.get("solver")
    if solver:
        proven = sum(1 for b in bounds if b["optimal"])
        solver_text = ("Optimum: %s, %d worker, random seed %d, deterministic time limit %.0f (work units, the same "
                       "on any machine), %s. %d of %d traces proven optimal%s." % (
                           solver["solver"], solver["workers"], solver["random_seed"],
                           solver["max_deterministic_time"], solver["symmetry_breaking"], proven, len(bounds),
                           "" if proven == len(bounds) else "; for the others the proven upper bound is used and "
                           "the gap is in the table"))
    else:
        solver_text = ("The solver settings were not recorded in this run's JSON (a run before they were): its "
                       "bounds were taken under a wall-clock limit and are not reproducible.")
    return {"b2": "Per configuration, over all seeds and repeats:\n\n%s" % means, "b2_goal": goal,
            "b2_claims": "\n".join(claims) or "- no comparison: one configuration only.", "b2_solver": solver_text,
            "b2_seeds": "Per trace (seed): the optimum, and each configuration's placed / optimum, median of its "
                        "repeats (min-max):\n\n%s" % seeds,
            "b2_runs": runs, "b2_online": b2_online(rows, bounds), "b2_settle": "%d s" % data.get("settle_s", 30)}


def b2_online(rows, bounds):
    """The online model (packing.online_placement) beside each trace's optimum and what gpufleet's default placed:
    placed / online is the scheduler's quality, online / optimum the headroom of the submission policy; with the
    two largest-first orders."""
    modelled = [b for b in bounds if "online" in b]
    if not modelled:
        return ("_This run's JSON has no online model (a run before B2 recorded it): placed / online model is not "
                "available._")
    placed = {key: statistics.mean(r["placed_units"] for r in group)
              for key, group in _groups([r for r in rows if r["config"] == DEFAULT], "split", "seed").items()}
    body, gaps = [], {}
    for b in sorted(modelled, key=lambda b: (b["split"], b["seed"])):
        mine = placed.get((b["split"], b["seed"]))
        if mine is None:
            continue
        gaps.setdefault(b["split"], []).append(abs(mine - b["online"]) / float(b["bound"]))
        body.append([b["split"], b["seed"], b["bound"], b["online"], _pct(b["online"] / float(b["bound"])),
                     "%.0f" % mine, _pct(mine / float(b["online"])) if b["online"] else "-",
                     _pct(b["online_singles_largest_first"] / float(b["bound"])),
                     _pct(b["online_largest_first"] / float(b["bound"]))])
    if not body:
        return "_No run of gpufleet's default in this run's JSON to compare with the online model._"
    table = _table(["split", "seed", "optimum (units)", "online model (units)", "online / optimum",
                    "gpufleet-default placed (units, mean)", "placed / online", "singles largest first / optimum",
                    "every job largest first / optimum"], body)
    agree = "; ".join("split %d: within %.1f points of the optimum on every seed (largest difference)" % (
        split, 100 * max(values)) for split, values in sorted(gaps.items()))
    return "%s\n\nHow closely the model reproduces what gpufleet's default placed: %s." % (table, agree)


# ---------------------------------------------------------------- B3

B3_STOCK, B3_FIXED = "stock", "fixed"


def _b3_variants(row):
    """A size's variant runs; the JSON of runs before B3 had variants held one, the stock images'."""
    if "variants" in row:
        return row["variants"]
    return [{"variant": B3_STOCK, "label": "stock images, the role's settings", "throughput": row["throughput"],
             "vgpu_to_plain": row.get("vgpu_to_plain")}]


def _all_bound(run):
    return run.get("all_bound", run["bound"] >= run["pods"])


def _seconds(value):
    """A binding window in seconds: whole ones, but a tenth under one, where "in 0 s" would read as no time."""
    return ("%.1f" if value < 1 else "%.0f") % value


def _bound(run):
    return "%d in %s s" % (run["bound"], _seconds(run["bind_seconds"]))


def _updates(throughput):
    updates = throughput.get("node_updates")
    if not updates or updates.get("per_s") is None:
        return "-"
    counts = updates["by_change"]
    return "%.1f (%s)" % (updates["per_s"], ", ".join("%s %d" % (kind, counts[kind]) for kind in counts
                                                      if counts[kind]) or "none")


def _cores(throughput):
    value = throughput.get("scheduler_cpu_per_s")
    return "-" if value is None else "%.2f" % value


def _machine(throughput):
    """The machine's busy cores while the pods bound, with those neither the lab nor the benchmark took."""
    cpu = throughput.get("cpu") if throughput else None
    if not cpu:
        return "-"
    return "%.2f (%.2f)" % (cpu["machine_cores"], cpu["other_cores"])


def _ms(value):
    return "-" if value is None else "%.1f" % value


def _ratio(run):
    return "%.2f" % run["vgpu_to_plain"] if run.get("vgpu_to_plain") is not None else "-"


def _packing(row, run):
    """Nodes holding the bound vGPU pods, and the fewest that could (each node has row's vGPUs / nodes)."""
    used = run["throughput"].get("nodes_used")
    if used is None:
        return "-"
    per_node = row["vgpus"] // row["nodes"]
    return "%d (%d)" % (used, -(-run["throughput"]["bound"] // per_node))


def _sampling(run):
    """The share of the nodes the scheduler looked for per pod, from the arguments its Deployment gave it."""
    for arg in (run.get("lab") or {}).get("scheduler_args") or []:
        if arg.startswith("--percentage-nodes-to-find="):
            value = int(arg.split("=", 1)[1])
            if value > 0:
                return "%d%%" % value
    return "adaptive"


def _changed(count, tasks):
    """A changed count with the tasks that changed (the JSON of runs before it kept them says only how many)."""
    if not count:
        return count
    return "%s (%s)" % (count, "; ".join(tasks) if tasks else "which tasks, this run's JSON does not say")


def b3_variant_table(rows, settings=False):
    """One row per variant run. settings: columns with the patches its scheduler was built with and the share of the
    nodes it looked for per pod (the settings sweeps, where a variant's name is relative to the build and the role's
    defaults of the day)."""
    runs = [(r, v) for r in rows for v in _b3_variants(r)]
    # Runs before the nodes (or the machine's CPU) were counted leave the column out rather than fill it with dashes.
    packing = any("nodes_used" in v["throughput"] for _r, v in runs)
    machine = any("cpu" in v["throughput"] for _r, v in runs)
    busy = ["busy cores (not the lab's or the benchmark's)"] if machine else []
    return _table(
        ["nodes", "variant"] + (["patches", "nodes found per pod"] if settings else [])
        + ["vGPU pods bound", "vGPU binds/s", "vGPU / plain", "Node updates/s while binding "
           "(by what changed)", "scheduler CPU (cores)"] + busy
        + (["nodes holding them (fewest possible)"] if packing else []) + ["applied in (s)"],
        [[r["nodes"], v["variant"]] + ([_patch_label(_patches(v)), _sampling(v)] if settings else [])
         + [_bound(v["throughput"]), v["throughput"]["pods_per_s"], _ratio(v),
            _updates(v["throughput"]), _cores(v["throughput"])] + ([_machine(v["throughput"])] if machine else [])
         + ([_packing(r, v)] if packing else []) + [v.get("apply_s", "-")] for r, v in runs])


def _bound_during(profile, deadline):
    # Runs before the profiles were kept inside the deadline took one that ended after it, when the counter of bound
    # pods had stopped: its two counts are the same whatever the scheduler did.
    if deadline and profile["at_s"] + profile["duration_s"] > deadline:
        return "not counted (after the run's end at %d s)" % deadline
    return "%d -> %d" % (profile["bound_at_start"], profile["bound_at_end"])


def b3_profiles(rows, deadline=None):
    """Where the scheduler's CPU went on the largest fleet, per variant and profile (PROFILE_FOCUS shares)."""
    largest = max(rows, key=lambda r: r["nodes"])
    header, body = None, []
    for run in _b3_variants(largest):
        for profile in run["throughput"].get("profiles") or []:
            if "focus" not in profile:
                continue
            if header is None:
                header = ["variant", "profile (s after the release)", "bound during it", "CPU samples / s"] + list(
                    profile["focus"])
            body.append([run["variant"], "%d-%d" % (profile["at_s"], profile["at_s"] + profile["duration_s"]),
                         _bound_during(profile, deadline),
                         "%.2f" % (profile["samples_s"] / profile["duration_s"])]
                        + ["%.0f%%" % share for share in profile["focus"].values()])
    if not body:
        return "_No CPU profile in this run's JSON (every run of the largest fleet ended before the first one)._"
    return ("CPU profiles of the scheduler on %d nodes (share of its samples under each function, cumulative; a "
            "function called from another counts in both):\n\n%s" % (largest["nodes"], _table(header, body)))


def _find(rows, nodes, name):
    row = next((r for r in rows if r["nodes"] == nodes), None)
    return next((v for v in _b3_variants(row) if v["variant"] == name), None) if row else None


def _plain_share(run):
    return run.get("vgpu_to_plain") or 0


def _rounds(rows, nodes, name):
    """[(plain, variant run)] of every round of a size that bound `name`: the first round (every variant after one
    plain baseline), then the repeats (each after plain pods of its own)."""
    row = next((r for r in rows if r["nodes"] == nodes), None)
    first = _find(rows, nodes, name)
    if first is None:
        return []
    found = [(row.get("plain"), first)]
    for repeat in row.get("repeats") or []:
        found += [(repeat.get("plain"), run) for run in repeat["variants"] if run["variant"] == name]
    return found


def _rounds_text(rounds):
    """'10000 in 89 s bound, 73%' for one round; '3 rounds: median 62% (45%-76%), every pod bound in each' for
    more."""
    shares = [100 * _plain_share(run) for dummy, run in rounds]
    if len(rounds) == 1:
        return "%s bound, %.0f%%" % (_bound(rounds[0][1]["throughput"]), shares[0])
    short = [_bound(run["throughput"]) for dummy, run in rounds if not _all_bound(run["throughput"])]
    return "%d rounds: median %s, %s" % (
        len(rounds), _spread(shares, "%.0f%%"),
        "every pod bound in each" if not short else "not every pod bound in %s" % ", ".join(short))


def b3_rounds(data):
    """The table of every round of the variants B3 bound more than once, or a line saying it bound each once."""
    rows = data["runs"]
    repeated = [(row["nodes"], name, _rounds(rows, row["nodes"], name)) for row in rows
                for name in data.get("repeat_variants") or []]
    repeated = [item for item in repeated if len(item[2]) > 1]
    if not repeated:
        return "Each variant bound once per fleet size in this run."
    machine = any("cpu" in run["throughput"] for dummy, dummy2, rounds in repeated for dummy3, run in rounds)
    busy = (["busy cores, plain / vGPU (not the lab's or the benchmark's)", "scheduler CPU per pod (ms), plain / vGPU"]
            if machine else [])
    lines = [[nodes, name, len(rounds),
              ", ".join("%s" % plain["pods_per_s"] if plain else "-" for plain, dummy in rounds),
              ", ".join("%s" % run["throughput"]["pods_per_s"] for dummy, run in rounds),
              ", ".join("%.2f" % _plain_share(run) for dummy, run in rounds),
              _spread([_plain_share(run) for dummy, run in rounds], "%.2f")]
             + ([", ".join("%s / %s" % (_machine(plain), _machine(run["throughput"])) for plain, run in rounds),
                 ", ".join("%s / %s" % (_ms(_cpu_per_pod(plain or {})), _ms(_cpu_per_pod(run["throughput"])))
                           for plain, run in rounds)] if machine else []) for nodes, name, rounds in repeated]
    return ("The variant %s bound again in rounds of its own, each after plain pods of its own on the same lab "
            "(`bench.py --b3-rounds %d`). Per round, round 1 first:\n\n%s" % (
                " and ".join("**%s**" % name for name in sorted({name for dummy, name, dummy2 in repeated})),
                data["rounds"], _table(["nodes", "variant", "rounds", "plain binds/s", "vGPU binds/s", "vGPU / plain",
                                        "median (range)"] + busy, lines)))


def b3_goals(data):
    rows = data["runs"]
    deadline = data.get("bind_deadline_s")
    sentences = []
    stock = _find(rows, B3_GOAL_NODES, B3_STOCK)
    if stock is None:
        sentences.append("**Goal, stock images with the role's settings on %d nodes: not measured** (no such run in "
                         "this JSON)." % B3_GOAL_NODES)
    else:
        t = stock["throughput"]
        sentences.append("**Goal, stock images with the role's settings: every one of %d vGPU pods bound on %d nodes%s: "
                         "%s** (%d bound in %s s, %.2f binds/s, %.0f%% of the plain-pod rate)." % (
                             t["pods"], B3_GOAL_NODES, " within %d s" % deadline if deadline else "",
                             "met" if _all_bound(t) else "not met", t["bound"], _seconds(t["bind_seconds"]),
                             t["pods_per_s"],
                             100 * (stock.get("vgpu_to_plain") or 0)))
        course = pace(t.get("timeline") or [])
        if course:
            sentences.append("They bound at %.1f/s in the first minute after the release and at %.1f/s in the last "
                             "minute, with %d bound." % course)
    fixed = [(nodes, _rounds(rows, nodes, B3_FIXED)) for nodes in (100, B3_GOAL_NODES)]
    if any(not rounds for dummy, rounds in fixed):
        sentences.append("**Goal, the patched scheduler at >= %.0f%% of the plain-pod rate on 100 and %d nodes: not "
                         "measured** (a size or the variant is missing from this JSON)."
                         % (100 * B3_GOAL, B3_GOAL_NODES))
    else:
        # More than one round: the median round's ratio, every round binding every pod.
        met = all(all(_all_bound(run["throughput"]) for dummy, run in rounds)
                  and statistics.median(_plain_share(run) for dummy, run in rounds) >= B3_GOAL
                  for dummy, rounds in fixed)
        each = "; ".join("%d nodes: %s" % (nodes, _rounds_text(rounds)) for nodes, rounds in fixed)
        sentences.append("**Goal, the patched scheduler at >= %.0f%% of the plain-pod rate on 100 and %d nodes: %s** "
                         "(%s)." % (100 * B3_GOAL, B3_GOAL_NODES, "met" if met else "not met", each))
    return " ".join(sentences)


def b3(data):
    if not data:
        return {"b3": "_not run_", "b3_goal": "B3 was not run.", "b3_clock": "", "b3_counting": "",
                "b3_variants": "", "b3_profiles": "", "b3_rounds": ""}
    rows = data["runs"]
    # How this JSON's run timed and counted the binds, for the method's sentences.
    method = {"b3_clock": "", "b3_counting": (
        "Bound pods are counted from a watch: listing 10,000 pods every few seconds would take a core of the machine "
        "from the scheduler it measures.")}
    if data.get("bind_deadline_s"):
        method["b3_clock"] = " or stops %d s after it" % data["bind_deadline_s"]
    elif data.get("bind_cap_s"):  # the JSON of runs before the deadline, which counted by listing
        method = {"b3_clock": " or until none has bound for %d s" % data["bind_cap_s"], "b3_counting": (
            "This run's JSON counted the bound pods by listing every pod every 2 s: its times run late by up to that "
            "step and the list's own time (the 10-node rates most), and decoding the list took CPU from the "
            "scheduler.")}
    table = _table(
        ["nodes", "vGPUs", "converge (s)", "rerun (s)", "rerun changed", "all registered (s)", "plain pods bound",
         "plain binds/s", "peak RSS (MiB)"],
        [[r["nodes"], r["vgpus"], r["converge_s"], r["rerun_s"],
          _changed(r["rerun_changed"], r.get("rerun_changed_tasks")), r["registered_s"],
          _bound(r["plain"]) if r.get("plain") else "not measured",
          r["plain"]["pods_per_s"] if r.get("plain") else "-", r["peak_rss_mib"]] for r in rows])
    variants = data.get("variants") or {B3_STOCK: "stock images, the role's settings"}
    legend = "\n".join("- **%s**: %s" % item for item in variants.items())
    return dict(method, b3=table, b3_goal=b3_goals(data), b3_variants="%s\n\n%s" % (legend, b3_variant_table(rows)),
                b3_profiles=b3_profiles(rows, data.get("bind_deadline_s")), b3_rounds=b3_rounds(data))


def _bound_at(timeline, seconds):
    """Pods bound `seconds` after the release, from [[seconds, bound], ...] (the last point at or before it)."""
    return max([bound for at, bound in timeline if at <= seconds] or [0])


def _shares(run, focus):
    """(lowest, highest) share of the CPU samples under `focus` over a run's profiles, or None without one."""
    shares = [profile["focus"][focus] for profile in run["throughput"].get("profiles") or []
              if focus in profile.get("focus", {})]
    return (min(shares), max(shares)) if shares else None


def _span(pair, form="%.0f%%"):
    """(low, high) as one figure when both read the same in `form` (shares in whole percent by default), else a
    range."""
    low, high = (form % value for value in pair)
    return low if low == high else "%s to %s" % (low, high)


def _sweep_logging(sweeps):
    """(lowest, highest) share of logging at -v 3 and the highest at -v 2, over the first profile of each run of the
    largest settings sweep; None without one."""
    if not sweeps:
        return None
    data = max(sweeps, key=lambda d: max(r["nodes"] for r in d["runs"]))
    level = {2: [], 3: []}
    for row in data["runs"]:
        for run in _b3_variants(row):
            profiles = [p for p in run["throughput"].get("profiles") or [] if "logging" in p.get("focus", {})]
            found = re.search(r"-v(\d)$", run["variant"])
            if profiles and found and int(found.group(1)) in level:
                level[int(found.group(1))].append(min(profiles, key=lambda p: p["at_s"])["focus"]["logging"])
    if not level[2] or not level[3]:
        return None
    return data.get("_file", "the settings sweep"), (min(level[3]), max(level[3])), max(level[2])


# How the page names the lab's processes in a sentence; others go by the name the lab gives them.
PROCESS_NAMES = {"vc-scheduler": "Volcano's scheduler", "kube-apiserver": "the API server"}
SATURATED = 0.95  # a share of the machine's cores busy that counts as all of them (sampling leaves a little idle)


def _cpu_per_pod(throughput, process="vc-scheduler"):
    """Milliseconds of a process's CPU per bound pod over a binding window, or None where it was not measured."""
    cpu = throughput.get("cpu") or {}
    cores = (cpu.get("lab_cores") or {}).get(process)
    if cores is None or not throughput.get("bound"):
        return None
    return 1000.0 * cores * cpu["seconds"] / throughput["bound"]


def _machine_split(cpu, top=4):
    parts = sorted(cpu["lab_cores"].items(), key=lambda item: (-item[1], item[0]))[:top]
    return "%.2f busy (%s; %.2f neither the lab's nor the benchmark's)" % (
        cpu["machine_cores"], ", ".join("%s %.2f" % (PROCESS_NAMES.get(name, name), cores) for name, cores in parts),
        cpu["other_cores"])


def b3_machine(fixed, plain, nodes, cpus):
    """Where the machine's cores went while the patched scheduler's vGPU pods and the plain pods bound on `nodes`,
    and the scheduler's CPU per pod of each against the measured ratio: a sentence, or None for a run that did not
    measure them. Only a machine busy on (nearly) every core in both windows caps the scheduler's share, so that
    its CPU per pod is expected to set the ratio; the sentence says which case the run was."""
    f = fixed["throughput"] if fixed else {}
    mine, theirs = _cpu_per_pod(f), _cpu_per_pod(plain or {})
    if mine is None or theirs is None or fixed.get("vgpu_to_plain") is None:
        return None
    full = min(f["cpu"]["machine_cores"], plain["cpu"]["machine_cores"]) >= SATURATED * cpus
    return ("While the patched scheduler's pods bound on %d nodes, the machine's %d cores were %s; while the plain pods "
            "bound, %s. Volcano's scheduler spent %.1f ms of CPU per vGPU pod and %.1f ms per plain pod, a ratio of "
            "%.2f against the %.2f measured: %s." % (
                nodes, cpus, _machine_split(f["cpu"]), _machine_split(plain["cpu"]), mine, theirs, theirs / mine,
                fixed["vgpu_to_plain"],
                "with every core busy in both, the scheduler had %.2f and %.2f cores, so its CPU per pod is what "
                "remains between the two rates" % (f["cpu"]["lab_cores"]["vc-scheduler"],
                                                   plain["cpu"]["lab_cores"]["vc-scheduler"]) if full else
                "the machine had idle time in a window, so the scheduler's CPU is not all that set the rates"))


def b3_causes(data, sweeps=None, waits=None):
    """Where the vGPU pods' time went, read from this run's variants and profiles on its largest fleet (and the
    settings sweep for the log level): the sentences of the page's cause section, every figure from the JSON."""
    if not data:
        return "_B3 was not run._"
    rows, deadline = data["runs"], data.get("bind_deadline_s")
    largest = max(rows, key=lambda r: r["nodes"])
    nodes = largest["nodes"]
    stock, fixed, quiet = (_find(rows, nodes, name) for name in (B3_STOCK, B3_FIXED, "quiet-plugin"))
    if stock is None:
        return "_No run of the stock images on %d nodes in this JSON._" % nodes
    bullets = []
    t = stock["throughput"]
    updates = t.get("node_updates") or {}
    if updates.get("per_s") is not None:
        counts = updates["by_change"]
        text = ("The Node updates the scheduler received while the stock scheduler's pods bound on %d nodes: %.1f a "
                "second, %d of %d of them a change of the plugin's handshake annotation only, which the plugin %s "
                "rewrites with the current time every 30 s (`pkg/plugin/server.go`)." % (
                    nodes, updates["per_s"], counts.get("handshake", 0), sum(counts.values()),
                    data.get("versions", {}).get("vgpu_plugin", "")))
        if quiet and (quiet["throughput"].get("node_updates") or {}).get("per_s") is not None:
            text += " With the plugin writing its Node only when its registration changed: %.1f a second." % (
                quiet["throughput"]["node_updates"]["per_s"])
        bullets.append(text)
    profiles = [p for p in t.get("profiles") or [] if "node updates" in p.get("focus", {})]
    course = pace(t.get("timeline") or [])
    if profiles:
        each = "; ".join(
            "%.0f%% with %d to %d pods bound (%d-%d s after the release; the metric reset alone %.0f%%)" % (
                p["focus"]["node updates"], p["bound_at_start"], p["bound_at_end"], p["at_s"],
                p["at_s"] + p["duration_s"], p["focus"].get("vGPU metrics reset", 0))
            for p in profiles)
        text = ("Each update rebuilds the node's vGPU devices six times under the scheduler cache's mutex "
                "(`NodeInfo.SetNode`: a dry-run clone, then the clone and the node, each through "
                "`setNodeOthersResource`), and each build resets the per-pod metric series of every GPU with "
                "`DeletePartialMatch`, which walks every series of the vector: one per vGPU pod bound in the "
                "cluster. The stock scheduler's node updates took, of its CPU samples: %s." % each)
        if course:
            text += (" A bind takes the same mutex: the stock scheduler bound %.1f pods a second in the first minute "
                     "and %.1f in the last (%d of %d in %s s)."
                     % (course[0], course[1], t["bound"], t["pods"], _seconds(t["bind_seconds"])))
        bullets.append(text)
    logging = _sweep_logging(sweeps)
    if logging:
        name, (low, high), quiet_level = logging
        bullets.append("At log level 3 the vGPU predicate's log lines, one per GPU of every node it tries, took %s of "
                       "the samples in the first profile of each run of the settings sweep (`%s`, below); at level 2 "
                       "%s (the role's default is level 2)." % (
                           _span((low, high)), name,
                           "none" if round(quiet_level) == 0 else "at most %.0f%%" % quiet_level))
    if fixed:
        f = fixed["throughput"]
        text = "With %s of `tools/upstream/volcano`" % _patch_words(_patches(fixed))
        reset, node = _shares(fixed, "vGPU metrics reset"), _shares(fixed, "node updates")
        if reset and node:
            text += (" the metric reset took %s of the samples and the node updates %s"
                     % (_span(reset), _span(node)))
        fixed_course = pace(f.get("timeline") or [])
        text += ("; the patched scheduler bound %d of %d in %s s"
                 % (f["bound"], f["pods"], _seconds(f["bind_seconds"])))
        if fixed_course:
            text += ", %.1f a second in the first minute and %.1f in the last" % fixed_course[:2]
        if t.get("timeline"):
            text += (", where the stock scheduler had bound %d in the same %s s"
                     % (_bound_at(t["timeline"], f["bind_seconds"]), _seconds(f["bind_seconds"])))
        text += "."
        if quiet:
            q = quiet["throughput"]
            both = _all_bound(q) and _all_bound(f)
            text += (" The stock scheduler with a plugin that writes its Node only when its registration changed bound "
                     "%s%s." % (_bound(q), (
                         ": removing the updates at their source helps %s the patches do"
                         % ("at least as much as" if q["bind_seconds"] <= f["bind_seconds"] else "less than"))
                         if both else ""))
        bullets.append(text)
        samples = [p["samples_s"] / p["duration_s"] for p in f.get("profiles") or [] if p.get("duration_s")]
        predicates, collect = _shares(fixed, "allocate: predicates"), _shares(fixed, "garbage collection")
        if samples and predicates and collect:
            text = ("In %s the patched scheduler used %s of a core, of the machine's %d (allocate's predicates %s "
                    "of the samples, Go's garbage collection %s)." % (
                        "its profiles" if len(samples) > 1 else "its profile",
                        _span((min(samples), max(samples)), "%.2f"), data["machine"]["cpus"],
                        _span(predicates), _span(collect)))
            small = [(r["nodes"], _find(rows, r["nodes"], B3_STOCK), _find(rows, r["nodes"], B3_FIXED), r.get("plain"))
                     for r in rows if r["nodes"] < nodes]
            small = [entry for entry in small if entry[1] and entry[2] and entry[3]]
            if small:
                size, small_stock, small_fixed, plain = max(small, key=lambda entry: entry[0])
                text += (" On %d nodes stock and patched bound %.0f and "
                         "%.0f pods a second against %.0f plain pods." % (
                             size, small_stock["throughput"]["pods_per_s"], small_fixed["throughput"]["pods_per_s"],
                             plain["pods_per_s"]))
            carried = _carried(f)
            if carried:
                text += " %s" % carried
            else:
                text += (" What only vGPU pods wait for, one after another within a session, is the API round trip "
                         "that `GPUDevices.Allocate` makes for every one of them (it PATCHes the pod's device "
                         "annotations before the bind); a CPU profile does not show time spent waiting.")
                measured = _patch_waits(waits, _patches(fixed))
                text += (" %s" % measured if measured else " This is read from the code, not measured here.")
            bullets.append(text)
        machine = b3_machine(fixed, largest.get("plain"), nodes, data["machine"]["cpus"])
        if machine:
            bullets.append(machine)
    return "\n".join("- %s" % bullet for bullet in bullets)


def b3_settings(runs):
    """The sweeps of the scheduler's settings (bench.py --only b3-settings), one table per JSON file (each sweep is
    one run of its own: its own provenance)."""
    runs = [data for data in runs or [] if data]
    if not runs:
        return {"b3_settings": "_The settings sweep (`bench.py --only b3-settings`) has no JSON here._"}
    return {"b3_settings": "\n\n".join("%s\n\n%s\n\nEach run stopped %d s after the release." % (
        "- %s" % provenance("Settings sweep (%s)" % data["_file"] if "_file" in data else "Settings sweep", data),
        b3_variant_table(data["runs"], settings=True), data["bind_deadline_s"]) for data in runs)}


WAIT_LABELS = ("sessions", "allocate action", "PATCH requests", "POST requests")


def _wait(entry):
    if not entry:
        return "-"
    mean = "" if entry.get("mean_ms") is None else ", %.1f ms each" % entry["mean_ms"]
    return "%d: %.1f s (%.0f%%%s)" % (entry["count"], entry["seconds"], 100 * (entry.get("share") or 0), mean)


def _patches(variant):
    """The tools/upstream/volcano patches the variant's scheduler was built with (() for the stock build)."""
    lab = (variant or {}).get("lab") or {}
    if lab.get("scheduler_build") != "volcano-fix":
        return ()
    return tuple((lab.get("volcano_fix") or {}).get("patches") or ())


def _patch_words(patches):
    """How the page names a build's patches: "the patches 0001 to 0003", "the patch 0001", "the patches"."""
    if not patches:
        return "the patches"
    return "the patch%s %s" % ("es" * (len(patches) > 1), _patch_label(patches))


def _carried(throughput):
    """When the patched scheduler sent (almost) no pod PATCH while its vGPU pods bound - the allocation's annotations
    went with the binds - what its own histograms show instead; "" otherwise or when not recorded."""
    waits = throughput.get("scheduler_waits") or {}
    patch, allocate, post = (waits.get(label) or {} for label in ("PATCH requests", "allocate action",
                                                                  "POST requests"))
    if not patch or not allocate.get("count") or patch.get("count", 0) >= 0.01 * throughput["bound"]:
        return ""
    text = ("Its scheduler sent %d pod PATCH requests while its %d vGPU pods bound: the allocation's annotations went "
            "with the binds. Its allocate action ran %.0f%% of the binding window" % (
                patch["count"], throughput["bound"], 100 * (allocate.get("share") or 0)))
    if post.get("count"):
        text += ("; its POST requests (the binds and their events, sent apart from the session) were %d, %.1f ms each "
                 "on average, overlapping" % (post["count"], post.get("mean_ms") or 0))
    text += "."
    if (allocate.get("share") or 0) >= 0.9:
        text += (" With no request left to wait for inside the session, what limits the rate that remains is the "
                 "allocate action's own work, which the profiles above show: the predicates it runs over the nodes "
                 "for each pod and the garbage collection of what they allocate, on a machine whose CPUs it shares "
                 "with the API server, etcd and kwok.")
    return text


def _patch_label(patches):
    """The patches by number: "none", "0001", "0001 and 0002", "0001 to 0003"."""
    numbers = [name[:4] for name in patches]
    if len(numbers) > 2:
        return "%s to %s" % (numbers[0], numbers[-1])
    return " and ".join(numbers) or "none"


def _patch_waits(runs, patches=None):
    """The measured sentence on the patched scheduler's PATCH waits, from the largest fleet that recorded them (runs
    of the scheduler with `patches`, when given: the build the page's B3 table measured)."""
    found = [(r["nodes"], data.get("_file", ""), v) for data in runs or [] for r in data["runs"]
             for v in _b3_variants(r) if v["variant"] == B3_FIXED and v["throughput"].get("scheduler_waits")
             and (patches is None or _patches(v) == patches)]
    if not found:
        return ""
    nodes, name, run = max(found, key=lambda entry: entry[0])
    t, w = run["throughput"], run["throughput"]["scheduler_waits"]
    patch, allocate = w.get("PATCH requests") or {}, w.get("allocate action") or {}
    if not patch.get("count") or not allocate.get("count"):
        return ""
    return ("Measured on %d nodes, in a run of its own (`%s`; its machine and commit below), from the scheduler's own "
            "histograms: while it bound %d pods in %s s, "
            "its allocate action ran %.0f%% of that time, and its %d PATCH requests took %.1f s, %.0f%% of it, "
            "%.1f ms each." % (nodes, name, t["bound"], _seconds(t["bind_seconds"]), 100 * (allocate.get("share") or 0),
                               patch["count"], patch["seconds"], 100 * (patch.get("share") or 0),
                               patch.get("mean_ms") or 0))


def b3_waits(runs):
    """Where the scheduler's time went while the vGPU pods bound, from its own histograms (b3_scale.WAITS): one table
    per JSON of B3 runs that recorded them (make bench's b3-scale.json, and b3-waits-<nodes>.json kept beside it)."""
    parts = []
    for data in runs or []:
        rows = [[r["nodes"], v["variant"], _patch_label(_patches(v)), _bound(v["throughput"]), _ratio(v)]
                + [_wait(v["throughput"]["scheduler_waits"].get(label)) for label in WAIT_LABELS]
                for r in data["runs"] for v in _b3_variants(r) if v["throughput"].get("scheduler_waits")]
        if rows:
            parts.append("- %s\n\n%s" % (
                provenance("Scheduler waits (%s)" % data["_file"] if "_file" in data else "Scheduler waits", data),
                _table(["nodes", "variant", "patches", "vGPU pods bound", "vGPU / plain",
                        "sessions: count, seconds (share of the window)", "allocate action", "PATCH requests",
                        "POST requests"], rows)))
    if not parts:
        return {"b3_waits": "_No B3 run here recorded the scheduler's own histograms._"}
    return {"b3_waits": "\n\n".join(parts)}


def pace(timeline, window=60.0):
    """(binds/s over the first `window` seconds, binds/s over the last, pods bound at the end) from [[seconds,
    bound], ...]; None when the run is shorter than two windows (nothing to compare)."""
    if len(timeline) < 2 or timeline[-1][0] < 2 * window:
        return None
    first = next(point for point in timeline if point[0] >= window)
    end = timeline[-1]
    before = [point for point in timeline if point[0] <= end[0] - window][-1]
    return (first[1] / first[0], (end[1] - before[1]) / (end[0] - before[0]), end[1])


# ---------------------------------------------------------------- the page

# What `make bench` finds cached at its start (Makefile, .bench-start.json): what a cold start lacks.
CACHES = (("debian_packages", "the Debian packages of `make deps` to install"),
          ("lab_binaries_cached", "no lab binaries"), ("virtualenv", "no virtualenv"),
          ("image_debian12", "no Debian 12 test-host image"), ("image_el9", "no EL9-like test-host image"),
          ("go_module_cache", "an empty Go module cache"), ("go_build_cache", "an empty Go build cache"))


def _start(make):
    missing = [what for key, what in CACHES if make.get(key) is False]
    text = "from a cold start: %s" % ", ".join(missing) if missing else "with the caches it uses already built"
    if missing and "debian_packages" not in make:  # runs before the packages were recorded
        text += " (whether the Debian packages of `make deps` were installed was not recorded)"
    return text


def timings(run, cold=None):
    if not run:
        text = ("The duration of this run was not recorded: there is no run.json (a run before it was written, or "
                "one stopped before its end).")
    else:
        parts = ", ".join("%s %.1f min" % (name.upper(), seconds / 60.0) for name, seconds in run["seconds"].items())
        text = "The benchmarks took %.1f min (%s), options `%s`." % (
            run["total_s"] / 60.0, parts, " ".join(run["argv"]) or "(defaults)")
        make = run.get("make")
        if make:
            text += (" `make bench` as a whole took %.1f min, %.1f min of it before the benchmarks (packages, "
                     "virtualenv, lab binaries, images), %s." % (
                         make["total_s"] / 60.0, make["before_benchmarks_s"] / 60.0, _start(make)))
        if run.get("failed"):
            text += " Failed: %s." % ", ".join(run["failed"])
    if cold and cold.get("make"):
        # A cold start timed on its own (docs/benchmarks/cold/): the builds do not depend on the benchmarks chosen.
        make = cold["make"]
        text += (" A cold `make bench` (on %s, commit %s, options `%s`) spent %.1f min before its benchmarks, %s." % (
            cold["machine"]["date"], cold["machine"]["commit"], " ".join(cold["argv"]) or "(defaults)",
            make["before_benchmarks_s"] / 60.0, _start(make)))
    return text


def caveats(data, current=None):
    """A warning above everything when the JSON is not one clean run of the versions the roles deploy now."""
    runs = {name: data[key] for name, key in (("B1", "b1-hosts"), ("B2", "b2-scheduling"), ("B3", "b3-scale"))
            if data[key]}
    problems = []
    old = sorted(name for name, d in runs.items() if not d.get("versions"))
    if old:
        problems.append("%s predate%s the recorded provenance: measured on the lab of %s date, not necessarily on "
                        "the versions and lab this page describes"
                        % (" and ".join(old), "s" * (len(old) == 1), "its" if len(old) == 1 else "their"))
    if current:
        moved = sorted(name for name, d in runs.items() if d.get("versions") and any(
            d["versions"].get(k) != v for k, v in current.items()))
        if moved:
            problems.append("%s ran other component versions than the roles deploy now" % " and ".join(moved))
    commits = {(d.get("source") or {}).get("commit", d["machine"].get("commit", ""))[:7] for d in runs.values()}
    if len(commits) > 1:
        problems.append("the benchmarks come from different commits (%s)" % ", ".join(sorted(commits)))
    dirty = sorted(name for name, d in runs.items() if (d.get("source") or {}).get("dirty"))
    if dirty:
        problems.append("%s ran with uncommitted changes" % " and ".join(dirty))
    if not problems:
        return ""
    text = "; ".join(problems)
    return "> **Caveat.** %s%s. Rerun `make bench` for figures of this code.\n" % (text[0].upper(), text[1:])


def _kept(out, pattern):
    """JSON files of runs of their own kept beside make bench's (each with its name, for its provenance line)."""
    return [dict(json.loads(path.read_text()), _file=path.name) for path in sorted(out.glob(pattern))]


def figures(out, current=None):
    data = {name: _load(out, name) for name in ("b1-hosts", "b2-scheduling", "b3-scale", "run")}
    # The settings sweeps: b3-settings.json as bench.py writes it, and any kept beside it (b3-settings-<what>.json).
    data["b3-settings"] = _kept(out, "b3-settings*.json")
    values = {"provenance": "\n".join("- %s" % provenance(name, data[key]) for name, key in (
        ("B1", "b1-hosts"), ("B2", "b2-scheduling"), ("B3", "b3-scale"))),
        "timings": timings(data["run"], _load(out / "cold", "run")),
        "caveats": caveats(data, current)}
    values.update(b1(data["b1-hosts"]))
    values.update(b2(data["b2-scheduling"]))
    values.update(b3(data["b3-scale"]))
    values.update(b3_settings(data["b3-settings"]))
    waits = [dict(data["b3-scale"], _file="b3-scale.json")] if data["b3-scale"] else []
    waits += _kept(out, "b3-waits*.json")
    values["b3_causes"] = b3_causes(data["b3-scale"], data["b3-settings"], waits)
    values.update(b3_waits(waits))
    fixed = [v for r in (data["b3-scale"] or {}).get("runs", []) for v in _b3_variants(r) if _patches(v)]
    values["b3_fix_patches"] = ("Volcano v1.15.1 with %s of" % _patch_words(_patches(fixed[0])) if fixed
                                else "Volcano v1.15.1 with the commits of")
    return values


def render(out, doc, template, current=None):
    """The page from the JSON in `out`; `current`: the versions the roles deploy now (common.versions()), to warn
    when the JSON ran others."""
    values = figures(out, current)
    text = template.read_text()
    wanted = set(re.findall(r"\{\{(\w+)\}\}", text))
    unknown = sorted(wanted - set(values))
    if unknown:
        raise KeyError("docs/benchmarks.md.in names %s, which the report does not fill" % ", ".join(unknown))
    doc.write_text(re.sub(r"\{\{(\w+)\}\}", lambda m: values[m.group(1)], text))
