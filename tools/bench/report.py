"""docs/benchmarks.md from the raw JSON of a `make bench` run (tables; the prose around them is in the template)."""

import json

from ansible_collections.gpufleet.vgpu.plugins.module_utils import _markdown


def _load(out, name):
    path = out / ("%s.json" % name)
    return json.loads(path.read_text()) if path.exists() else None


def _table(header, rows):
    return "\n".join(_markdown.table(header, rows))


def b1_tables(data):
    if not data:
        return "_not run_"
    rows = data["runs"]
    base = rows[0]
    main = _table(
        ["hosts", "facts (s)", "one task (s)", "first run (s)", "rerun (s)", "rerun / facts", "rerun changed",
         "containerd restarts", "rerun, every task (s)", "every task / facts", "every task, changed",
         "first run vs 1 host", "rerun vs 1 host"],
        [[r["hosts"], r["facts_s"], r["one_task_s"], r["first_s"], r["rerun_fast"]["seconds"],
          r["rerun_fast"]["ratio_to_facts"], r["rerun_fast"]["changed"], r["rerun_fast"]["containerd_restarts"],
          r["rerun_every_task"]["seconds"], r["rerun_every_task"]["ratio_to_facts"], r["rerun_every_task"]["changed"],
          "%.2f" % (r["first_s"] / base["first_s"]),
          "%.2f" % (r["rerun_fast"]["seconds"] / base["rerun_fast"]["seconds"])] for r in rows])
    manual = _table(
        ["hosts", "approach", "first run (s)", "rerun (s)", "containerd restarts on rerun",
         "config files rewritten on rerun"],
        [row for r in rows for row in (
            [r["hosts"], "gpufleet site.yml --tags nodes", r["first_s"], r["rerun_fast"]["seconds"],
             r["rerun_fast"]["containerd_restarts"], r["rerun_fast"]["config_rewrites"]],
            [r["hosts"], "gpufleet, every task", "", r["rerun_every_task"]["seconds"],
             r["rerun_every_task"]["containerd_restarts"], r["rerun_every_task"]["config_rewrites"]],
            [r["hosts"], "manual script", r["manual"]["first_s"], r["manual"]["rerun_s"],
             r["manual"]["containerd_restarts"], r["manual"]["config_rewrites"]])])
    return "%s\n\nThe article's manual steps as a shell script (fresh hosts of the same image, all at once):\n\n%s" % (
        main, manual)


def b2_tables(data):
    if not data:
        return "_not run_"
    rows = sorted(data["runs"], key=lambda r: (r["split"], r.get("seed", 0)))
    runs = _table(
        ["split", "seed", "configuration", "jobs (gangs)", "pods bound", "placed / bound", "bound proven optimal",
         "vGPUs used", "memory used", "pending that fit now", "pending, fragmented", "partial gangs", "p50 bind (s)",
         "p99 bind (s)"],
        [[r["split"], r.get("seed", 0), r["config"], "%d (%d)" % (r["jobs"], r["gangs"]),
          "%d / %d" % (r["pods_bound"], r["pods"]), "%.1f%%" % (100 * r["fraction_of_bound"]),
          "yes" if r["bound_optimal"] else "no (upper bound used)",
          "%.0f%%" % (100 * r["vgpus_used"]), "%.0f%%" % (100 * r["memory_used"]),
          len(r["pending_fit_now"]), len(r["pending_fragmented"]), len(r["partial_gangs"]),
          r["latency_p50_s"], r["latency_p99_s"]] for r in rows])
    summary = {}
    for r in rows:
        summary.setdefault((r["split"], r["config"]), []).append(r)
    means = _table(
        ["split", "configuration", "traces", "placed / bound, mean", "min", "max", "partial gangs, total",
         "pending that fit now, total"],
        [[split, config, len(group), "%.1f%%" % (100 * sum(r["fraction_of_bound"] for r in group) / len(group)),
          "%.1f%%" % (100 * min(r["fraction_of_bound"] for r in group)),
          "%.1f%%" % (100 * max(r["fraction_of_bound"] for r in group)),
          sum(len(r["partial_gangs"]) for r in group), sum(len(r["pending_fit_now"]) for r in group)]
         for (split, config), group in sorted(summary.items())])
    note = "\n\n_%s._" % data["note"] if data.get("note") else ""
    return "%s\n\nPer configuration, over the traces:\n\n%s%s" % (runs, means, note)


def b3_tables(data):
    if not data:
        return "_not run_"
    rows = data["runs"]
    base = rows[0]

    def growth(row, key):
        return "%.1fx" % (row[key] / base[key]) if row.get(key) and base.get(key) else ""
    table = _table(
        ["nodes", "vGPUs", "device_plugin converge (s)", "rerun (s)", "rerun changed", "all registered (s)",
         "pods created (s)", "pods bound in window", "bound/s", "handshake leaves", "peak RSS (MiB)",
         "nodes growth", "converge growth", "rerun growth", "RSS growth"],
        [[r["nodes"], r["vgpus"], r["converge_s"], r["rerun_s"], r["rerun_changed"], r["registered_s"],
          r["throughput"]["create_seconds"], "%d / %d" % (r["throughput"]["bound"], r["throughput"]["pods"]),
          r["throughput"]["pods_per_s"], r.get("handshake_leaves"), r["peak_rss_mib"],
          "%dx" % (r["nodes"] // base["nodes"]), growth(r, "converge_s"), growth(r, "rerun_s"),
          growth(r, "peak_rss_mib")] for r in rows])
    return table + ("\n\n_%s._" % data["note"] if data.get("note") else "")


def render(out, doc, template):
    template = template.read_text()
    machine = next((d["machine"] for d in (_load(out, n) for n in ("b1-hosts", "b2-scheduling", "b3-scale")) if d),
                   None)
    where = "no run yet" if machine is None else "%s, %s CPUs (%s), %.0f GiB, kernel %s, commit %s" % (
        machine["date"], machine["cpus"], machine["cpu_model"], machine["memory_gib"], machine["kernel"],
        machine["commit"])
    text = template.replace("{{machine}}", where)
    text = text.replace("{{b1}}", b1_tables(_load(out, "b1-hosts")))
    text = text.replace("{{b2}}", b2_tables(_load(out, "b2-scheduling")))
    text = text.replace("{{b3}}", b3_tables(_load(out, "b3-scale")))
    doc.write_text(text)
