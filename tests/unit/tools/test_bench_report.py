"""The benchmark page's sentences come from the JSON (tools/bench/report.py): goals met or not, claims only where
every seed agrees, a caveat for JSON that is not one clean run of the versions deployed now."""

import json
import pathlib

import pytest

import b3_scale  # tools/bench, through the virtualenv's paths (make bootstrap)
import report

MACHINE = {"date": "2026-12-03 10:00 UTC", "cpus": 2, "cpu_model": "x", "memory_gib": 24.0, "commit": "abc1234"}
VERSIONS = {"kubernetes": "v1.35.3", "volcano": "v1.15.1", "vgpu_plugin": "v1.12.0", "kwok": "v0.8.0",
            "volcano_image_tag": "v1.15.1", "device_plugin_version": "v1.12.0"}
SOURCE = {"commit": "abc1234" + "0" * 33, "dirty": False, "changed_paths": []}


def b2_row(split, seed, config, fraction, repeat=0, partial=0):
    return {"split": split, "seed": seed, "repeat": repeat, "config": config, "fraction_of_bound": fraction,
            "partial_gangs": ["j"] * partial, "pending_fit_now": [], "pending_fragmented": [], "jobs": 10, "gangs": 2,
            "pods": 20, "pods_bound": 18, "vgpus_used": 0.9, "memory_used": 0.9, "latency_p50_s": 1,
            "latency_p99_s": 2, "bound_units": 100, "bound_optimal": True, "bound_gap": 0.0}


def b2_data(rows):
    return {"runs": rows, "machine": MACHINE, "versions": VERSIONS, "source": SOURCE, "bounds": [],
            "solver": {"solver": "CP-SAT", "workers": 1, "random_seed": 1, "max_deterministic_time": 600.0,
                       "symmetry_breaking": "s"}}


@pytest.mark.parametrize("rows, verdict", [
    # Every seed above 97 %, no partial gang.
    ([b2_row(4, s, "gpufleet-default", 0.98) for s in range(5)], "met"),
    # The mean is what counts: one seed below, the mean above.
    ([b2_row(4, s, "gpufleet-default", f) for s, f in enumerate((0.99, 0.99, 0.99, 0.99, 0.95))], "met"),
    ([b2_row(4, s, "gpufleet-default", 0.96) for s in range(5)], "not met"),
    # A split gang fails the goal whatever the placement.
    ([b2_row(4, 0, "gpufleet-default", 0.99, partial=1)], "not met"),
    # Both splits must meet it.
    ([b2_row(4, 0, "gpufleet-default", 0.99), b2_row(2, 0, "gpufleet-default", 0.80)], "not met"),
])
def test_b2_goal_is_read_from_the_runs(rows, verdict):
    goal = report.b2(b2_data(rows))["b2_goal"]
    assert goal.startswith("**Goal") and goal.split("0 partial gangs: ")[1].startswith(verdict + "**"), goal


@pytest.mark.parametrize("ours, theirs, claim", [
    ((0.98, 0.97, 0.99), (0.90, 0.91, 0.92), "more on 3 seeds, as much on 0, less on 0 - better on every seed"),
    ((0.98, 0.90, 0.99), (0.90, 0.91, 0.92), "more on 2 seeds, as much on 0, less on 1 - no claim: the seeds disagree"),
    ((0.90, 0.90), (0.90, 0.90), "equal on every seed"),
    ((0.80, 0.80), (0.90, 0.90), "worse on every seed"),
])
def test_a_claim_stands_only_where_every_seed_agrees(ours, theirs, claim):
    rows = [b2_row(4, s, "gpufleet-default", f) for s, f in enumerate(ours)]
    rows += [b2_row(4, s, "article", f) for s, f in enumerate(theirs)]
    assert claim in report.b2(b2_data(rows))["b2_claims"]


def test_repeats_of_a_seed_are_averaged_before_the_seeds_are_compared():
    rows = [b2_row(4, 0, "gpufleet-default", f, repeat=r) for r, f in enumerate((0.99, 0.89))]   # mean 0.94
    rows += [b2_row(4, 0, "article", f, repeat=r) for r, f in enumerate((0.93, 0.93))]
    assert "more on 1 seed," in report.b2(b2_data(rows))["b2_claims"]
    assert "| 4 | gpufleet-default | 2 | 94.0% | 5.0 pt | 89.0% | 99.0% |" in report.b2(b2_data(rows))["b2"]


def b3_variant(name, bound, vgpu_rate, plain_rate, pods=10000):
    return {"variant": name, "label": name, "apply_s": 10, "vgpu_to_plain": round(vgpu_rate / plain_rate, 3),
            "throughput": {"pods": pods, "bound": bound, "all_bound": bound >= pods, "bind_seconds": 100,
                           "pods_per_s": vgpu_rate,
                           "node_updates": {"by_change": {"handshake": 3300, "other": 10}, "per_s": 33.1},
                           "scheduler_cpu_per_s": 0.91}}


def b3_row(nodes, *variants):
    return {"nodes": nodes, "vgpus": 16 * nodes, "converge_s": 1, "rerun_s": 1, "rerun_changed": 0,
            "registered_s": 1, "peak_rss_mib": 1,
            "plain": {"pods": 10 * nodes, "bound": 10 * nodes, "bind_seconds": 50, "pods_per_s": 100.0},
            "variants": list(variants)}


def b3_data(bound, vgpu_rate, plain_rate, fixed=(10000, 60.0)):
    rows = [b3_row(100, b3_variant("stock", 1000, 20.0, plain_rate, 1000),
                   b3_variant("fixed", 1000, 60.0, plain_rate, 1000)),
            b3_row(1000, b3_variant("stock", bound, vgpu_rate, plain_rate),
                   b3_variant("fixed", fixed[0], fixed[1], plain_rate))]
    return {"runs": rows, "machine": MACHINE, "bind_deadline_s": 900,
            "variants": {"stock": "stock images, the role's settings", "fixed": "patched"}}


@pytest.mark.parametrize("bound, verdict", [(10000, "met"), (9999, "not met")])
def test_b3_goal_of_the_stock_images_is_every_pod_bound(bound, verdict):
    goal = report.b3(b3_data(bound, 40.0, 100.0))["b3_goal"]
    assert ("within 900 s: %s**" % verdict) in goal, goal


@pytest.mark.parametrize("fixed, verdict", [
    ((10000, 60.0), "met"),
    ((10000, 40.0), "not met"),     # all bound, too slow
    ((9999, 99.0), "not met"),      # fast, one left
])
def test_b3_goal_of_the_patched_scheduler_is_half_the_plain_rate(fixed, verdict):
    goal = report.b3(b3_data(10000, 40.0, 100.0, fixed))["b3_goal"]
    assert ("on 100 and 1000 nodes: %s**" % verdict) in goal, goal


def with_rounds(data, nodes, rounds):
    """data with more rounds of the fixed variant on `nodes`: rounds is [(plain binds/s, vGPU binds/s, bound)]."""
    row = next(r for r in data["runs"] if r["nodes"] == nodes)
    pods = row["plain"]["pods"]
    row["repeats"] = [{"round": number, "plain": {"pods": pods, "bound": pods, "bind_seconds": 1, "pods_per_s": plain},
                       "variants": [b3_variant("fixed", bound, vgpu, plain, pods)]}
                      for number, (plain, vgpu, bound) in enumerate(rounds, start=2)]
    return dict(data, rounds=len(rounds) + 1, repeat_variants=["fixed"])


@pytest.mark.parametrize("first, rounds, verdict, shown", [
    # The median round decides: one slow round of three does not fail the goal, nor does one fast round pass it.
    (60.0, [(100.0, 40.0, 10000), (50.0, 30.0, 10000)], "met", "3 rounds: median 60% (40%-60%), every pod bound"),
    (40.0, [(100.0, 45.0, 10000), (50.0, 40.0, 10000)], "not met", "3 rounds: median 45% (40%-80%)"),
    # Every round must bind every pod, whatever the median.
    (60.0, [(100.0, 90.0, 10000), (100.0, 90.0, 9000)], "not met", "not every pod bound in 9000 in 100 s"),
])
def test_b3_goal_of_the_patched_scheduler_reads_the_median_round(first, rounds, verdict, shown):
    data = with_rounds(b3_data(10000, 40.0, 100.0, (10000, first)), 1000, rounds)
    values = report.b3(data)
    assert ("on 100 and 1000 nodes: %s**" % verdict) in values["b3_goal"], values["b3_goal"]
    assert shown in values["b3_goal"].split("; 1000 nodes: ")[1], values["b3_goal"]
    # The 100-node size bound once: its share is that round's.
    assert "(100 nodes: 1000 in 100 s bound, 60%;" in values["b3_goal"], values["b3_goal"]


def test_b3_rounds_table_gives_each_round_in_order():
    data = with_rounds(b3_data(10000, 40.0, 100.0, (10000, 60.0)), 1000, [(100.0, 40.0, 10000), (50.0, 30.0, 10000)])
    table = report.b3(data)["b3_rounds"]
    assert "`bench.py --b3-rounds 3`" in table
    assert "| 1000 | fixed | 3 | 100.0, 100.0, 50.0 | 60.0, 40.0, 30.0 | 0.60, 0.40, 0.60 | 0.60 (0.40-0.60) |" \
        in table, table
    assert "| 100 | fixed |" not in table
    assert report.b3(b3_data(10000, 40.0, 100.0))["b3_rounds"] == "Each variant bound once per fleet size in this run."


def test_b3_goal_is_not_judged_on_a_smaller_fleet():
    data = b3_data(10000, 60.0, 100.0)
    data["runs"] = data["runs"][:1]
    goal = report.b3(data)["b3_goal"]
    assert "stock images with the role's settings on 1000 nodes: not measured**" in goal
    assert "on 100 and 1000 nodes: not measured**" in goal


def test_b3_variants_table_names_what_the_scheduler_received():
    table = report.b3(b3_data(10000, 40.0, 100.0))["b3_variants"]
    assert "| 1000 | stock | 10000 in 100 s | 40.0 | 0.40 | 33.1 (handshake 3300, other 10) | 0.91 | 10 |" in table
    assert "- **fixed**: patched" in table


@pytest.mark.parametrize("seconds, shown", [
    (0.44, "100 in 0.4 s"),
    (0.96, "100 in 1.0 s"),
    (1.4, "100 in 1 s"),
    (53.0, "100 in 53 s"),
])
def test_b3_bound_shows_a_tenth_only_under_a_second(seconds, shown):
    assert report._bound({"bound": 100, "bind_seconds": seconds}) == shown


def test_b3_goal_sentence_shows_the_same_seconds_as_the_table():
    data = b3_data(10000, 40.0, 100.0)
    data["runs"][1]["variants"][0]["throughput"]["bind_seconds"] = 0.44
    assert "(10000 bound in 0.4 s," in report.b3(data)["b3_goal"]


def test_b3_variants_table_counts_the_nodes_holding_the_pods_when_the_run_did():
    data = b3_data(10000, 40.0, 100.0)
    data["runs"][1]["variants"][0]["throughput"]["nodes_used"] = 700
    table = report.b3(data)["b3_variants"]
    # 10000 pods of one vGPU each on nodes of 16 vGPUs: 625 nodes at the fewest.
    assert "| 1000 | stock | 10000 in 100 s | 40.0 | 0.40 | 33.1 (handshake 3300, other 10) | 0.91 | 700 (625) | 10 |" in table
    assert "| 1000 | fixed | 10000 in 100 s | 60.0 | 0.60 | 33.1 (handshake 3300, other 10) | 0.91 | - | 10 |" in table
    assert "nodes holding them (fewest possible)" not in report.b3(b3_data(10000, 40.0, 100.0))["b3_variants"]


def test_b3_profiles_show_the_focus_shares():
    data = b3_data(10000, 40.0, 100.0)
    data["runs"][1]["variants"][0]["throughput"]["profiles"] = [{
        "at_s": 30, "duration_s": 30.0, "samples_s": 19.4, "bound_at_start": 440, "bound_at_end": 1000,
        "focus": {"node updates": 23.0, "vGPU metrics reset": 20.9}}]
    text = report.b3(data)["b3_profiles"]
    assert "| stock | 30-60 | 440 -> 1000 | 0.65 | 23% | 21% |" in text, text


@pytest.mark.parametrize("timeline, expected", [
    # Slowing down: 30/s in the first minute, 2/s in the last, 2000 bound.
    ([[0, 0], [30, 900], [60, 1800], [600, 1880], [1140, 1880], [1200, 2000]], (30.0, 2.0, 2000)),
    # The first point past a minute and the last one a minute or more before the end are the ones compared.
    ([[0, 0], [70, 700], [130, 1000], [200, 1200]], (10.0, 200 / 70.0, 1200)),
    # Too short to compare a first and a last minute.
    ([[0, 0], [60, 100], [110, 150]], None),
    ([], None),
])
def test_pace_compares_the_first_and_the_last_minute(timeline, expected):
    assert report.pace(timeline) == (pytest.approx(expected) if expected else None)


def test_b3_goal_says_how_the_rate_went():
    data = b3_data(2000, 2.0, 100.0)
    timeline = [[0, 0], [60, 1800], [840, 1880], [900, 2000]]
    data["runs"][1]["variants"][0]["throughput"].update(bind_seconds=900, timeline=timeline)
    values = report.b3(data)
    assert "not met** (2000 bound in 900 s," in values["b3_goal"], values["b3_goal"]
    assert values["b3_clock"] == " or stops 900 s after it"
    assert values["b3_counting"].startswith("Bound pods are counted from a watch")
    assert "bound at 30.0/s in the first minute after the release and at 2.0/s in the last minute" in values["b3_goal"]


def test_b3_json_of_runs_before_variants_reads_as_the_stock_images():
    row = {"nodes": 1000, "vgpus": 16000, "converge_s": 1, "rerun_s": 1, "rerun_changed": 0, "registered_s": 1,
           "peak_rss_mib": 1, "throughput": {"pods": 10000, "bound": 4528, "bind_seconds": 900, "pods_per_s": 5.03},
           "plain": {"pods": 10000, "bound": 10000, "bind_seconds": 100, "pods_per_s": 99.57},
           "vgpu_to_plain": 0.05}
    values = report.b3({"runs": [row], "machine": MACHINE, "bind_deadline_s": 900})
    assert "| 1000 | stock | 4528 in 900 s | 5.03 | 0.05 |" in values["b3_variants"]
    assert "within 900 s: not met**" in values["b3_goal"]


def test_b3_rerun_that_changed_names_the_tasks_when_the_json_has_them():
    data = b3_data(10000, 60.0, 100.0)
    data["runs"][1].update(rerun_changed=1, rerun_changed_tasks=["control: volcano : Mark the vGPU nodes"])
    data["runs"][0].update(rerun_changed=2)  # a run's JSON from before the tasks were kept: the count alone
    table = report.b3(data)["b3"]
    assert "| 1000 | 16000 | 1 | 1 | 1 (control: volcano : Mark the vGPU nodes) | 1 |" in table
    assert "| 100 | 1600 | 1 | 1 | 2 (which tasks, this run's JSON does not say) | 1 |" in table


def test_b3_method_of_a_run_that_counted_by_listing_says_so():
    data = dict(b3_data(10000, 60.0, 100.0), bind_cap_s=1800)
    del data["bind_deadline_s"]
    assert report.b3(data)["b3_clock"] == " or until none has bound for 1800 s"
    assert report.b3(data)["b3_counting"].startswith("This run's JSON counted the bound pods by listing")


def test_b2_online_model_says_how_closely_it_reproduces_the_runs():
    rows = [dict(b2_row(2, 0, "gpufleet-default", 0.8), placed_units=800),
            dict(b2_row(2, 0, "gpufleet-default", 0.8, repeat=1), placed_units=820)]
    bounds = [{"split": 2, "seed": 0, "bound": 1000, "online": 800, "online_largest_first": 1000,
               "online_singles_largest_first": 800, "optimal": True, "gap": 0}]
    text = report.b2_online(rows, bounds)
    assert "| 2 | 0 | 1000 | 800 | 80.0% | 810 | 101.2% | 80.0% | 100.0% |" in text, text
    assert "split 2: within 1.0 points of the optimum on every seed" in text
    assert "no online model" in report.b2_online(rows, [dict(bounds[0], online=None) for dummy in ()] or [{}])


def b1_row(hosts, repeat, rerun, facts_nvml, disrupt=False):
    profile = [{"play": "GPU nodes the run does not disrupt - all at once", "task": "t%d" % i, "seconds": 1.0 / (i + 1),
                "ok": hosts, "changed": 0, "skipped": 0, "failed": 0} for i in range(30)]
    figures = {"seconds": rerun, "ratio_to_facts_nvml": round(rerun / facts_nvml, 2), "changed": 0,
               "containerd_restarts": 0, "config_rewrites": 0, "profile": profile,
               "batches": {"steady": [["h%02d" % i for i in range(hosts)]], "rolling": [[]]}}
    row = {"hosts": hosts, "repeat": repeat, "facts_s": facts_nvml / 2, "facts_nvml_s": facts_nvml, "one_task_s": 1,
           "first_s": 10, "rerun_fast": figures,
           "manual": {"first_s": 1, "rerun_s": 1, "containerd_restarts": 1, "config_rewrites": 2}}
    if hosts == 1:
        row["rerun_every_task"] = dict(figures, seconds=rerun * 5,
                                       batches={"steady": [[]], "rolling": [["h00"]]})
    if disrupt:
        row["rerun_disrupt"] = dict(figures, hosts=hosts, disrupted=2, containerd_restarts=2, changed=4,
                                    batches={"steady": [["h02", "h03"]], "rolling": [["h00"], ["h01"]]})
    return row


def test_b1_reports_the_medians_the_goals_and_the_rolling_part():
    runs = [b1_row(1, r, rerun, 4.0) for r, rerun in enumerate((6.0, 4.0, 5.0))]
    runs += [b1_row(4, r, rerun, 4.0, disrupt=True) for r, rerun in enumerate((7.0, 8.0, 9.0))]
    data = {"runs": runs, "repeats": 3, "machine": MACHINE, "facts_after_first_run": True}
    values = report.b1(data)
    assert "| 1 | 3 | 2.0 | 4.0 | 10.0 | 5.0 (4.0-6.0) | 1.25 (1.00-1.50) | 1.00 | 0 | 0 | all at once: 1; rolling: - |" \
        in values["b1"], values["b1"]
    assert "| 4 | 3 | 2.0 | 4.0 | 10.0 | 8.0 (7.0-9.0) | 2.00 (1.75-2.25) | 1.60 |" in values["b1"]
    assert "| 1 | 3 | 25.0 (20.0-30.0) | 0 | 0 | all at once: -; rolling: 1 |" in values["b1"]
    # No 8- or 16-host runs here: those goals are not measured, so the whole is not met.
    assert values["b1_goal"].startswith("**Goal: not met.**")
    assert "rerun(8 hosts) <= 1.5 x rerun(1 host): not measured" in values["b1_goal"]
    assert "| 4 | 2 | 3 | 8.0 (7.0-9.0) | 2 | 4 | all at once: 2; rolling: 1, 1 |" in values["b1_disrupt"]
    assert "rolled one at a time: yes" in values["b1_disrupt"]
    # The profile of the median rerun at the largest size: its top rows, and all 30 tasks summed up.
    assert "The 20 slowest of the 30 tasks of the median rerun on 4 hosts (8.0 s wall" in values["b1_profile"]
    assert "host results: 120 ok, 0 changed, 0 skipped, 0 failed" in values["b1_profile"]
    assert values["b1_profile"].count("| GPU nodes the run does not disrupt |") == 20
    assert values["b1_repeats"] == "each size 3 times on fresh hosts" and "after the first run" in values["b1_facts"]


def test_b1_with_one_set_of_hosts_per_size_reads_the_first_run_and_the_replay_from_its_first_row():
    # As b1_hosts.one_size writes them: the first run and the manual replay in the first row only, the rerun with
    # every task and the disrupted rerun in the last.
    runs = []
    for hosts, reruns in ((1, (6.0, 4.0, 5.0)), (4, (7.0, 8.0, 9.0))):
        for repeat, rerun in enumerate(reruns):
            row = b1_row(hosts, repeat, rerun, 4.0, disrupt=hosts == 4 and repeat == 2)
            if repeat:
                del row["first_s"], row["manual"]
            else:
                row["first_s"] = 10.0 * hosts
                row["manual"]["first_s"] = hosts
            if repeat != 2:
                row.pop("rerun_every_task", None)
            runs.append(row)
    data = {"runs": runs, "repeats": 3, "fresh_hosts_per_size": 1, "machine": MACHINE, "facts_after_first_run": True}
    values = report.b1(data)
    assert "| 4 | 3 | 2.0 | 4.0 | 40.0 | 8.0 (7.0-9.0) | 2.00 (1.75-2.25) | 1.60 |" in values["b1"], values["b1"]
    assert "| 4 | manual script | 4.0 | 1.0 | 1 | 2 |" in values["b1"]
    assert "| 1 | 1 | 25.0 | 0 | 0 | all at once: -; rolling: 1 |" in values["b1"]
    assert "| 4 | 2 | 1 | 9.0 | 2 | 4 | all at once: 2; rolling: 1, 1 |" in values["b1_disrupt"]
    assert values["b1_repeats"] == ("on one set of fresh hosts per size: the first run and the manual replay once, "
                                    "the baselines and the rerun 3 times on the same converged hosts")


@pytest.mark.parametrize("medians, expected", [
    ({1: {"rerun": 10.0}, 8: {"rerun": 15.0, "facts_nvml": 7.5}, 16: {"rerun": 20.0}}, "**Goal: met.**"),
    ({1: {"rerun": 10.0}, 8: {"rerun": 15.1, "facts_nvml": 7.5}, 16: {"rerun": 20.0}},
     "rerun(8 hosts) <= 1.5 x rerun(1 host): not met (15.1 s / 10.0 s = 1.51)"),
    ({1: {"rerun": 10.0}, 8: {"rerun": 15.0, "facts_nvml": 7.0}, 16: {"rerun": 20.0}},
     "rerun(8 hosts) <= 2.0 x (facts + one NVML call)(8 hosts): not met (15.0 s / 7.0 s = 2.14)"),
    ({1: {"rerun": 10.0}, 8: {"rerun": 15.0, "facts_nvml": 7.5}, 16: {"rerun": 20.5}},
     "rerun(16 hosts) <= 2.0 x rerun(1 host): not met"),
])
def test_b1_goals_hold_at_their_bounds_and_fail_past_them(medians, expected):
    text = report.b1_goals(medians)
    assert expected in text, text
    assert text.startswith("**Goal: met.**") == (expected == "**Goal: met.**")


@pytest.mark.parametrize("change, caveat", [
    ({}, ""),
    ({"versions": None}, "B3 predates the recorded provenance"),
    ({"source": dict(SOURCE, dirty=True, changed_paths=["roles/x.yml"])}, "ran with uncommitted changes"),
    ({"source": dict(SOURCE, commit="def5678" + "0" * 33)}, "different commits (abc1234, def5678)"),
    ({"versions": dict(VERSIONS, volcano="v1.15.0")}, "other component versions than the roles deploy now"),
])
def test_caveat_names_what_makes_the_json_not_one_clean_run(change, caveat):
    data = {"run": None}
    for name in ("b1-hosts", "b2-scheduling", "b3-scale"):
        data[name] = {"machine": MACHINE, "versions": VERSIONS, "source": SOURCE}
    data["b3-scale"] = dict(data["b3-scale"], **change)
    text = report.caveats(data, current=VERSIONS)
    assert (caveat in text) if caveat else text == ""


def test_the_template_names_only_what_the_report_fills(tmp_path):
    template = tmp_path / "page.md.in"
    template.write_text("{{b2_goal}} {{no_such_figure}}")
    with pytest.raises(KeyError, match="no_such_figure"):
        report.render(tmp_path, tmp_path / "page.md", template)


def test_the_shipped_template_renders_from_no_json(tmp_path):
    report.render(tmp_path, tmp_path / "page.md", pathlib.Path(report.__file__).resolve().parents[2]
                  / "docs" / "benchmarks.md.in")
    text = (tmp_path / "page.md").read_text()
    assert "{{" not in text and "B2 was not run." in text


def run_json(**make):
    return {"argv": [], "seconds": {"b1": 600, "b3": 60}, "total_s": 660, "failed": [],
            "machine": MACHINE, "make": dict({"total_s": 700, "before_benchmarks_s": 40}, **make)}


@pytest.mark.parametrize("make, expected", [
    ({"lab_binaries_cached": True, "virtualenv": True, "image_debian12": True, "image_el9": True,
      "go_module_cache": True, "go_build_cache": True}, "with the caches it uses already built"),
    # Only what it found missing is named; the start file of older runs has no image or Go keys.
    ({"lab_binaries_cached": False, "virtualenv": True},
     "from a cold start: no lab binaries (whether the Debian packages of `make deps` were installed was not "
     "recorded)."),
    ({"debian_packages": False, "lab_binaries_cached": True, "virtualenv": True},
     "from a cold start: the Debian packages of `make deps` to install."),
    ({"debian_packages": True, "lab_binaries_cached": False, "virtualenv": False, "image_debian12": True,
      "image_el9": False, "go_module_cache": False, "go_build_cache": False},
     "from a cold start: no lab binaries, no virtualenv, no EL9-like test-host image, an empty Go module cache, an "
     "empty Go build cache."),
])
def test_timings_name_what_the_start_lacked(make, expected):
    assert expected in report.timings(run_json(**make))


def test_timings_add_a_cold_start_timed_apart():
    cold = dict(run_json(lab_binaries_cached=False, virtualenv=False), argv=["--only", "b3", "--b3-sizes", "10"])
    cold["make"]["before_benchmarks_s"] = 1800
    text = report.timings(run_json(lab_binaries_cached=True, virtualenv=True), cold)
    assert ("A cold `make bench` (on 2026-12-03 10:00 UTC, commit abc1234, options `--only b3 --b3-sizes 10`) spent "
            "30.0 min before its benchmarks, from a cold start: no lab binaries, no virtualenv (whether the Debian "
            "packages of `make deps` were installed was not recorded).") in text
    assert report.timings(None, cold).startswith("The duration of this run was not recorded")


@pytest.mark.parametrize("phases, expected", [
    # Runs before the phases were recorded: the count alone.
    (None, 2),
    ({"j1": "Pending", "j2": "Inqueue"}, "2 (1 not enqueued)"),
    ({"j1": "Inqueue", "j2": "Inqueue"}, "2 (0 not enqueued)"),
])
def test_pending_jobs_say_how_many_the_enqueue_action_held_back(phases, expected):
    row = b2_row(4, 0, "gpufleet-default", 0.9)
    row["pending_fit_now"] = ["j1", "j2"]
    if phases is not None:
        row["podgroup_phases"] = phases
    assert report._pending([row], "pending_fit_now") == expected  # pylint: disable=protected-access
    assert "| %s |" % expected in report.b2(b2_data([row]))["b2_runs"]


def test_pending_totals_read_each_runs_own_phases():
    rows = [b2_row(4, 0, "gpufleet-default", 0.9, repeat=r) for r in range(2)]
    rows[0].update(pending_fit_now=["j1"], podgroup_phases={"j1": "Pending"})
    rows[1].update(pending_fit_now=["j1"], podgroup_phases={"j1": "Inqueue"})
    assert report._pending(rows, "pending_fit_now") == "2 (1 not enqueued)"  # pylint: disable=protected-access
    assert report._pending(rows, "pending_fragmented") == 0  # pylint: disable=protected-access


def test_settings_sweeps_render_one_table_each_with_their_own_provenance(tmp_path):
    for name, nodes in (("b3-settings-100.json", 100), ("b3-settings-1000.json", 1000)):
        variant = b3_variant("w1-v2", 10 * nodes, 30.0, 100.0, 10 * nodes)
        data = dict(b3_data(10000, 40.0, 100.0), runs=[b3_row(nodes, variant)], bind_deadline_s=300)
        (tmp_path / name).write_text(json.dumps(data))
    text = report.figures(tmp_path)["b3_settings"]
    assert text.count("Each run stopped 300 s after the release.") == 2
    assert text.index("Settings sweep (b3-settings-100.json)") < text.index("Settings sweep (b3-settings-1000.json)")
    assert "| 1000 | w1-v2 | none | adaptive | 10000 in 100 s | 30.0 |" in text, text
    assert "has no JSON here" in report.b3_settings([])["b3_settings"]


@pytest.mark.parametrize("args, shown", [
    (["--logtostderr", "--percentage-nodes-to-find=10", "-v=2"], "10%"),
    (["--percentage-nodes-to-find=0"], "adaptive"),     # 0: Volcano computes it from the fleet's size
    (["--logtostderr"], "adaptive"),                    # not passed: the flag's default, 0
    (None, "adaptive"),                                 # runs before the arguments were recorded
])
def test_settings_sweeps_name_the_share_of_nodes_from_the_schedulers_arguments(args, shown):
    variant = b3_variant("stock", 10000, 30.0, 100.0)
    if args is not None:
        variant["lab"] = {"scheduler_args": args}
    text = report.b3_settings([dict(b3_data(10000, 40.0, 100.0), runs=[b3_row(1000, variant)])])["b3_settings"]
    assert "| 1000 | stock | none | %s | 10000 in 100 s |" % shown in text, text


@pytest.mark.parametrize("patches, shown", [
    (["0001-a.patch", "0002-b.patch", "0003-c.patch"], "0001 to 0003"),
    (["0001-a.patch", "0002-b.patch", "0003-c.patch", "0004-d.patch"], "0001 to 0004"),
])
def test_settings_sweeps_name_the_patches_of_each_schedulers_build(patches, shown):
    # Two sweeps' "fixed" are different builds when the folder gained a patch between them.
    variant = b3_variant("fixed+p10", 10000, 30.0, 100.0)
    variant["lab"] = {"scheduler_build": "volcano-fix", "volcano_fix": {"patches": patches},
                      "scheduler_args": ["--percentage-nodes-to-find=10"]}
    text = report.b3_settings([dict(b3_data(10000, 40.0, 100.0), runs=[b3_row(1000, variant)])])["b3_settings"]
    assert "| 1000 | fixed+p10 | %s | 10%% | 10000 in 100 s |" % shown in text, text


def test_b3_profile_past_the_runs_end_says_its_counts_mean_nothing():
    # A run of 300 s whose second profile ran from 300 to 330 s: the counter of bound pods had stopped.
    data = b3_data(10000, 40.0, 100.0)
    data["bind_deadline_s"] = 300
    data["runs"][1]["variants"][0]["throughput"]["profiles"] = [
        {"at_s": at, "duration_s": 30.0, "samples_s": 19.5, "bound_at_start": start, "bound_at_end": end,
         "focus": {"node updates": 23.0}} for at, start, end in ((30, 440, 1000), (300, 3400, 3400))]
    text = report.b3(data)["b3_profiles"]
    assert "| stock | 30-60 | 440 -> 1000 | 0.65 | 23% |" in text, text
    assert "| stock | 300-330 | not counted (after the run's end at 300 s) | 0.65 | 23% |" in text, text


@pytest.mark.parametrize("deadline, starts", [
    (900, (30, 300)),    # make bench: both inside the run
    (300, (30, 270)),    # the settings sweep: the late one ends at the deadline
    (50, (20,)),         # a short run: one profile, ending at the deadline
    (10, (0,)),
])
def test_b3_profiles_end_by_the_deadline(deadline, starts):
    assert b3_scale.profile_starts(deadline) == starts
    assert all(at + b3_scale.PROFILE_S <= max(deadline, b3_scale.PROFILE_S) for at in starts)


def b3_profile(at, focus, bound=(100, 200)):
    return {"at_s": at, "duration_s": 30.0, "samples_s": 16.5, "bound_at_start": bound[0], "bound_at_end": bound[1],
            "focus": focus}


def test_b3_causes_read_every_figure_from_the_run():
    data = b3_data(4000, 4.4, 100.0)
    data["versions"] = VERSIONS
    stock, fixed = data["runs"][1]["variants"]
    stock["throughput"].update(bind_seconds=900, timeline=[[0, 0], [60, 1500], [100, 2000], [840, 3960], [900, 4000]],
                               profiles=[b3_profile(30, {"node updates": 30.4, "vGPU metrics reset": 29.1}),
                                         b3_profile(300, {"node updates": 86.0, "vGPU metrics reset": 85.2})])
    fixed["throughput"].update(bind_seconds=100, profiles=[
        b3_profile(30, {"node updates": 1.0, "vGPU metrics reset": 0.2, "allocate: predicates": 37.0,
                        "garbage collection": 28.0})])
    quiet = b3_variant("quiet-plugin", 10000, 120.0, 100.0)
    quiet["throughput"].update(bind_seconds=80, node_updates={"by_change": {}, "per_s": 0.0})
    data["runs"][1]["variants"].append(quiet)
    sweep = {"_file": "b3-settings-1000.json", "runs": [b3_row(1000, *[
        dict(b3_variant(name, 2000, 7.0, 100.0), throughput=dict(
            b3_variant(name, 2000, 7.0, 100.0)["throughput"], profiles=[b3_profile(300, {"logging": 1.0}),
                                                                        b3_profile(30, {"logging": share})]))
        for name, share in (("w20-v3", 16.9), ("w1-v3", 19.1), ("w1-v2", 0.0))])]}
    text = report.b3_causes(data, [sweep])
    assert "33.1 a second, 3300 of 3310 of them a change of the plugin's handshake annotation only" in text
    assert "the plugin v1.12.0 rewrites" in text
    assert "only when its registration changed: 0.0 a second" in text
    assert ("30% with 100 to 200 pods bound (30-60 s after the release; the metric reset alone 29%); 86% with 100 to "
            "200 pods bound (300-330 s after the release; the metric reset alone 85%)") in text
    assert "bound 25.0 pods a second in the first minute and 0.7 in the last (4000 of 10000 in 900 s)" in text
    # The sweep's first profile of each run, not the later one.
    assert "took 17% to 19% of the samples in the first profile of each run of the settings sweep" in text
    assert "`b3-settings-1000.json`, below); at level 2 none" in text
    assert "the metric reset took 0% of the samples and the node updates 1%" in text
    assert "where the stock scheduler had bound 2000 in the same 100 s" in text
    assert "bound 10000 in 80 s: removing the updates at their source helps at least as much as the patches do" in text
    assert "In its profile the patched scheduler used 0.55 of a core, of the machine's 2 (allocate's " \
           "predicates 37%" in text
    assert "On 100 nodes stock and patched bound 20 and 60 pods a second against 100 plain pods" in text
    # No histograms recorded: the PATCH round trip is read from the code and says so.
    assert "`GPUDevices.Allocate` makes for every one of them" in text and "not measured here" in text

    # A patched build that sent the annotations with the binds: its own histograms say so, not the round trip.
    fixed["lab"] = {"scheduler_build": "volcano-fix", "volcano_fix": {"patches": PATCHES}}
    waits = _waits(patches=1, patch_s=0.01, window=100.0)
    waits["PATCH requests"]["count"] = 0
    waits["POST requests"] = {"count": 10020, "seconds": 900.0, "mean_ms": 89.8, "share": 9.0}
    profile = dict(fixed["throughput"]["profiles"][0], samples_s=27.0)
    fixed["throughput"].update(scheduler_waits=waits, profiles=[profile])
    text = report.b3_causes(data, [sweep])
    assert "With the patches 0001 to 0003 of `tools/upstream/volcano` the metric reset" in text
    assert "In its profile the patched scheduler used 0.90 of a core" in text
    fixed["throughput"]["profiles"].append(dict(profile, samples_s=18.0))
    assert "In its profiles the patched scheduler used 0.60 to 0.90 of a core" in report.b3_causes(data, [sweep])
    assert ("Its scheduler sent 0 pod PATCH requests while its 10000 vGPU pods bound: the allocation's annotations "
            "went with the binds. Its allocate action ran 90% of the binding window; its POST requests (the binds "
            "and their events, sent apart from the session) were 10020, 89.8 ms each on average, overlapping. With "
            "no request left to wait for inside the session, what limits the rate that remains is the allocate "
            "action's own work") in text
    assert "`GPUDevices.Allocate` makes for every one of them" not in text


def test_b3_causes_claim_nothing_the_run_lacks():
    data = b3_data(4000, 4.4, 100.0)
    data["runs"][1]["variants"] = data["runs"][1]["variants"][:1]     # the stock images only, no profile
    text = report.b3_causes(data)
    assert "33.1 a second" in text
    assert "patches" not in text and "level 3" not in text and "What remains" not in text
    assert report.b3_causes({}) == "_B3 was not run._"


@pytest.mark.parametrize("facts_nvml_16, expected", [
    # The baseline itself grows past the goals' bounds: the page says so.
    (19.3, "at 16 hosts `facts + NVML` alone grows 6.9× (goal 2.0×)"),
    # A baseline inside the bounds: no such excuse.
    (5.0, None),
])
def test_b1_why_compares_the_rerun_with_the_baselines_growth(facts_nvml_16, expected):
    medians = {1: {"facts": 1.9, "facts_nvml": 2.8, "rerun": 7.4}, 8: {"facts": 5.1, "facts_nvml": 4.0, "rerun": 22.4},
               16: {"facts": 10.3, "facts_nvml": facts_nvml_16, "rerun": 46.7}}
    figures = {"seconds": 46.7, "profile": [
        {"task": "Gather facts", "seconds": 10.5}, {"task": "gpufleet.vgpu.gpu_verify : Inventory", "seconds": 9.2},
        {"task": "x", "seconds": 1.0}, {"task": "y", "seconds": 0.5}, {"task": "z", "seconds": 0.25}]}
    text = report.b1_why(medians, figures, 16, 2)
    assert "from 1 to 16 hosts, on the same hosts: `facts` 5.4×" in text
    assert "the rerun 6.3× (one controller with 2 CPUs" in text
    assert "Gather facts 10.5 s, Inventory 9.2 s, x 1.0 s, and the other 2 tasks 0.8 s together" in text
    if expected:
        assert expected in text
    else:
        assert "ask for less" not in text
    assert report.b1_why({1: medians[1]}, figures, 1) == ""


def _waits(patches=1000, patch_s=24.0, allocate_share=0.9, window=30.0):
    return {"sessions": {"count": 30, "seconds": window, "mean_ms": 1000.0, "share": 1.0},
            "allocate action": {"count": 30, "seconds": allocate_share * window, "mean_ms": 900.0,
                                "share": allocate_share},
            "PATCH requests": {"count": patches, "seconds": patch_s, "mean_ms": 1000 * patch_s / patches,
                               "share": patch_s / window},
            "POST requests": {"count": 0, "seconds": 0.0, "mean_ms": None, "share": 0.0}}


PATCHES = ["0001-vgpu-index.patch", "0002-api-clone.patch", "0003-vgpu-binding.patch"]


def _kept_fixed(nodes, patches, bound, seconds, ratio, patch_count):
    """A kept run's JSON of the fixed variant alone on `nodes` nodes, built with `patches`."""
    waits = _waits(patches=max(patch_count, 1), patch_s=0.1, window=seconds)
    waits["PATCH requests"]["count"] = patch_count
    variant = {"variant": "fixed", "label": "patched", "vgpu_to_plain": ratio,
               "lab": {"scheduler_build": "volcano-fix", "volcano_fix": {"patches": list(patches)}},
               "throughput": {"pods": bound, "bound": bound, "bind_seconds": seconds, "pods_per_s": bound / seconds,
                              "scheduler_waits": waits}}
    return {"runs": [{"nodes": nodes, "variants": [variant]}], "_file": "b3-waits-binding-%d.json" % nodes,
            "versions": VERSIONS, "source": SOURCE, "machine": b3_data(10000, 40.0, 100.0)["machine"]}


def test_b3_patch_waits_come_from_the_tables_build_only():
    """A kept run of another patch set does not stand for the page's B3 build's PATCH waits; the waits table names
    each run's patches."""
    older = _kept_fixed(1000, PATCHES[:2], 10000, 449.0, 0.28, 10000)
    newer = [_kept_fixed(100, PATCHES, 1000, 8.0, 0.61, 0), _kept_fixed(1000, PATCHES, 10000, 150.0, 0.45, 0)]
    sentence = report._patch_waits([older] + newer, tuple(PATCHES[:2]))  # pylint: disable=protected-access
    assert "while it bound 10000 pods in 449 s" in sentence and "10000 PATCH requests" in sentence
    assert report._patch_waits(newer, tuple(PATCHES[:2])) == ""  # pylint: disable=protected-access
    table = report.b3_waits(newer)["b3_waits"]
    assert "| 100 | fixed | 0001 to 0003 | 1000 in 8 s | 0.61 |" in table


def test_b3_waits_table_and_the_measured_patch_sentence():
    data = b3_data(10000, 40.0, 100.0)
    fixed = data["runs"][0]["variants"][1]          # 100 nodes
    fixed["throughput"].update(bind_seconds=30.0, scheduler_waits=_waits())
    fixed["lab"] = {"scheduler_build": "volcano-fix", "volcano_fix": {"patches": PATCHES[:2]}}
    data.update(versions=VERSIONS, source=SOURCE, _file="b3-waits-100.json")
    table = report.b3_waits([data])["b3_waits"]
    assert "Scheduler waits (b3-waits-100.json): 2026-12-03 10:00 UTC" in table
    assert "| 100 | fixed | 0001 and 0002 | 1000 in 30 s | %.2f | 30: 30.0 s (100%%, 1000.0 ms each) | " \
           "30: 27.0 s (90%%, 900.0 ms each) | 1000: 24.0 s (80%%, 24.0 ms each) | 0: 0.0 s (0%%) |" \
           % fixed["vgpu_to_plain"] in table
    # The stock run recorded none: no row.
    assert "| 100 | stock |" not in table
    sentence = report._patch_waits([data])  # pylint: disable=protected-access
    assert sentence == ("Measured on 100 nodes, in a run of its own (`b3-waits-100.json`; its machine and commit "
                        "below), from the scheduler's own histograms: while it bound 1000 pods in 30 s, its "
                        "allocate action ran 90% of that time, and its 1000 PATCH requests took 24.0 s, 80% of it, "
                        "24.0 ms each.")
    assert report.b3_waits([b3_data(10000, 40.0, 100.0)])["b3_waits"].startswith("_No B3 run here recorded")
    assert report._patch_waits([b3_data(10000, 40.0, 100.0)]) == ""  # pylint: disable=protected-access


def with_cpu(throughput, machine, other):
    throughput["cpu"] = {"seconds": 10.0, "machine_cores": machine, "bench_cores": 0.1, "lab_cores": {},
                         "other_cores": other}
    return throughput


def test_b3_tables_give_the_machines_cores_where_the_run_measured_them():
    data = with_rounds(b3_data(10000, 40.0, 100.0, (10000, 60.0)), 1000, [(100.0, 40.0, 10000)])
    assert "busy cores" not in report.b3(data)["b3_rounds"] + report.b3(data)["b3_variants"]
    row = data["runs"][1]
    with_cpu(row["plain"], 1.9, 0.0)
    with_cpu(row["variants"][1]["throughput"], 1.95, 0.02)
    with_cpu(row["repeats"][0]["variants"][0]["throughput"], 2.0, 0.85)   # another load on the machine
    values = report.b3(data)
    # No scheduler CPU in with_cpu's figures: the CPU per pod shows as a dash, not as 0.
    assert "| 0.60, 0.40 | 0.50 (0.40-0.60) | 1.90 (0.00) / 1.95 (0.02), - / 2.00 (0.85) | - / -, - / - |" \
        in values["b3_rounds"], values["b3_rounds"]
    row["repeats"][0]["variants"][0]["throughput"]["cpu"]["lab_cores"]["vc-scheduler"] = 0.8   # 0.8 x 10 s / 10000
    assert "| - / -, - / 0.8 |" in report.b3(data)["b3_rounds"]
    assert "busy cores (not the lab's or the benchmark's)" in values["b3_variants"]
    assert "| 0.91 | 1.95 (0.02) |" in values["b3_variants"] and "| 0.91 | - |" in values["b3_variants"]


def timed(bound, seconds, machine, scheduler, other=0.0):
    return {"bound": bound, "pods": bound, "cpu": {
        "seconds": seconds, "machine_cores": machine, "bench_cores": 0.05, "other_cores": other,
        "lab_cores": {"vc-scheduler": scheduler, "kube-apiserver": 0.7, "kwok": 0.2, "etcd": 0.1,
                      "lab-controller": 0.01}}}


@pytest.mark.parametrize("vgpu, plain, ratio, needles", [
    # Saturated in both windows: 0.7 cores for 60 s over 10,000 pods is 4.2 ms a pod; 0.7 for 40 s, 2.8 ms.
    (timed(10000, 60.0, 2.0, 0.7), timed(10000, 40.0, 1.96, 0.7), 0.67,
     ["2 cores were 2.00 busy (the API server 0.70, Volcano's scheduler 0.70, kwok 0.20, etcd 0.10; 0.00 neither",
      "4.2 ms of CPU per vGPU pod and 2.8 ms per plain pod, a ratio of 0.67 against the 0.67 measured",
      "the scheduler had 0.70 and 0.70 cores, so its CPU per pod is what remains"]),
    # Idle time in a window: the sentence does not claim the CPU per pod explains the ratio.
    (timed(1000, 4.0, 1.85, 0.5), timed(1000, 3.6, 1.69, 0.48), 0.85,
     ["while the plain pods bound, 1.69 busy", "a ratio of 0.86 against the 0.85 measured",
      "the machine had idle time in a window"]),
])
def test_b3_machine_reads_the_schedulers_cpu_per_pod(vgpu, plain, ratio, needles):
    text = report.b3_machine({"throughput": vgpu, "vgpu_to_plain": ratio}, plain, 1000, 2)
    for needle in needles:
        assert needle in text, text


@pytest.mark.parametrize("vgpu, plain", [
    ({"bound": 10, "pods": 10}, timed(10, 1.0, 2.0, 0.5)),    # a JSON from before the machine's CPU was read
    (timed(10, 1.0, 2.0, 0.5), None),                          # no plain baseline
    (timed(0, 1.0, 2.0, 0.5), timed(10, 1.0, 2.0, 0.5)),       # nothing bound: no CPU per pod
])
def test_b3_machine_says_nothing_without_the_figures(vgpu, plain):
    assert report.b3_machine({"throughput": vgpu, "vgpu_to_plain": 0.5}, plain, 1000, 2) is None


def test_b3_causes_end_with_the_machine_where_the_run_measured_it():
    data = b3_data(10000, 40.0, 100.0)
    row = data["runs"][1]
    row["plain"].update(timed(10000, 40.0, 2.0, 0.7))
    row["variants"][1]["throughput"].update(timed(10000, 60.0, 2.0, 0.7))
    causes = report.b3_causes(data)
    assert causes.splitlines()[-1].startswith("- While the patched scheduler's pods bound on 1000 nodes"), causes
    assert "While the patched" not in report.b3_causes(b3_data(10000, 40.0, 100.0))


@pytest.mark.parametrize("source, shown", [
    ({"commit": "a" * 40, "dirty": False, "changed_paths": []}, "commit aaaaaaaaaaaa (clean tree);"),
    ({"commit": "a" * 40, "dirty": True, "changed_paths": ["roles/x.yml"]},
     "commit aaaaaaaaaaaa with uncommitted changes to roles/x.yml;"),
    # HEAD moved while it ran: the code it ran is the first commit's, and no path is listed as changed.
    ({"commit": "a" * 40, "dirty": True, "changed_paths": [], "commit_at_write": "b" * 40},
     "commit aaaaaaaaaaaa, HEAD at bbbbbbbbbbbb when the figures were written (commits made while it ran"),
    ({"commit": "a" * 40, "dirty": True, "changed_paths": ["x"], "commit_at_write": "b" * 40},
     "with uncommitted changes to x, HEAD at bbbbbbbbbbbb when"),
])
def test_provenance_says_what_the_run_ran(source, shown):
    line = report.provenance("b3", {"machine": MACHINE, "source": source})
    assert shown in line, line
    assert "changes to ," not in line and "changes to ;" not in line
