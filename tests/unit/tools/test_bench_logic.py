"""Table tests for the pure parts of the benchmarks: the packing bound (CP-SAT), traces, placement figures."""

import json
import os
import re
import subprocess
import sys

import pytest

import b3_scale  # tools/bench, through the virtualenv's paths (make bootstrap)
import common
import packing
import workload as tr

TWO = [{"memory": 10, "slots": 2}, {"memory": 10, "slots": 2}]


@pytest.mark.parametrize("gpus, jobs, bound", [
    (TWO, [[6], [6], [5], [4, 4]], 20),                   # 6+4 and 6+4: the gang splits over both cards
    (TWO, [[6], [6], [6]], 12),                           # memory: one 6 per card
    ([{"memory": 10, "slots": 1}], [[3], [3], [3]], 3),   # slots: one pod per card
    ([{"memory": 10, "slots": 1}], [[3, 3]], 0),          # a gang that cannot fit entirely places nothing
    ([{"memory": 10, "slots": 4}], [[11], [2, 2, 2]], 6),  # a request larger than every card
    ([{"memory": 16, "slots": 2}, {"memory": 24, "slots": 2}], [[12], [12], [12], [8]], 36),
    ([], [[1]], 0),
])
def test_packing_bound(gpus, jobs, bound):
    result = packing.packing_bound(gpus, jobs)
    assert result["optimal"] and result["gap"] == 0
    assert result["bound"] == result["best"] == bound


# The article's cluster at split 2 as B2 registers it (gpuMemoryFactor 3): 5 x 4090, 5 x 4070 Super.
ARTICLE_SPLIT_2 = [{"memory": 24564 // 3, "slots": 2}] * 5 + [{"memory": 16376 // 3, "slots": 2}] * 5


def test_packing_bound_of_a_b2_trace_is_proven_and_reproducible():
    """B2's first trace at split 2: the optimum is proven, and a second solve gives the same figures to the last
    work unit (one worker, a deterministic limit: nothing depends on the machine's speed or load)."""
    jobs = [[tr.units(mib, 3) for mib in job["pods"]] for job in tr.make_trace(20261129 + 2, 20, 5 * 24564 + 5 * 16376)]
    first = packing.packing_bound(ARTICLE_SPLIT_2, jobs)
    assert first["status"] == "OPTIMAL" and first["bound"] == first["best"] == 43696
    assert packing.packing_bound(ARTICLE_SPLIT_2, jobs) == first


def test_a_limit_too_small_reports_the_gap_not_a_flattering_bound():
    """B2's third trace at split 4 stopped at 0.05 work units: a placement and a proven bound above it (the optimum
    is 61459), with the gap between them; the same figures on every machine."""
    trace = tr.make_trace(20261129 + 4 + 2000, 40, 5 * 24564 + 5 * 16376)
    jobs = [[tr.units(mib, 3) for mib in job["pods"]] for job in trace]
    cut = packing.packing_bound([dict(g, slots=4) for g in ARTICLE_SPLIT_2], jobs, max_deterministic_time=0.05)
    assert cut["status"] == "FEASIBLE" and not cut["optimal"]
    assert cut["best"] <= 61459 < cut["bound"]
    assert cut["gap"] == round((cut["bound"] - cut["best"]) / float(cut["bound"]), 6) > 0
    assert packing.packing_bound([dict(g, slots=4) for g in ARTICLE_SPLIT_2], jobs, max_deterministic_time=0.05) == cut


@pytest.mark.parametrize("gpus, jobs, order, placed", [
    # best fit: the 4 goes beside the 6 (least free memory that holds it), leaving a whole card for the 9
    (TWO, [[6], [4], [9]], None, 19),
    # singles before gangs, whatever the submission order: the 6s take both cards' room before the gang comes
    (TWO, [[5, 5], [6], [6]], None, 12),
    # ...which a largest-first order over every job changes: 6 + 6, and the gang of 5s no longer fits either
    (TWO, [[5, 5], [6], [6]], "largest", 12),
    # a gang that does not fit whole gives back what it took, and the later single still fits
    ([{"memory": 10, "slots": 2}], [[6, 6], [4]], None, 4),
    # slots bound too
    ([{"memory": 10, "slots": 1}], [[3], [3]], None, 3),
    # best fit stacks the two 4s on one card (its slots end there), and the second 6 finds no room...
    (TWO, [[4], [4], [6], [6]], None, 14),
    # ...which largest first avoids
    (TWO, [[4], [4], [6], [6]], "largest", 20),
    (TWO, [[3], [3], [3], [7], [7]], None, 16),
    (TWO, [[3], [3], [3], [7], [7]], "largest", 20),
    (TWO, [[3], [3], [3], [7], [7]], "largest-singles", 20),
])
def test_online_placement(gpus, jobs, order, placed):
    chosen = {None: None, "largest": packing.largest_first(jobs),
              "largest-singles": packing.largest_first(jobs, singles_only=True)}[order]
    assert packing.online_placement(gpus, jobs, chosen) == placed
    assert placed <= packing.packing_bound(gpus, jobs)["bound"]


def test_largest_first_orders():
    jobs = [[2], [4, 4], [8], [3], [6, 6]]
    assert packing.largest_first(jobs) == [2, 4, 1, 3, 0]
    assert packing.largest_first(jobs, singles_only=True) == [2, 3, 0, 1, 4]


def test_trace_is_seeded_and_overloads_the_capacity():
    first = tr.make_trace(7, slots=20, memory_mib=204700)
    assert first == tr.make_trace(7, slots=20, memory_mib=204700)
    assert first != tr.make_trace(8, slots=20, memory_mib=204700)
    pods = sum(len(job["pods"]) for job in first)
    memory = sum(sum(job["pods"]) for job in first)
    assert pods >= 1.5 * 20 or memory >= 1.5 * 204700
    sizes = {mib for mib, dummy in tr.MEMORY_MIX}
    for job in first:
        assert 1 <= len(job["pods"]) <= 5 and set(job["pods"]) <= sizes
        if len(job["pods"]) > 1:
            assert len(set(job["pods"])) == 1 and job["pods"][0] <= tr.GANG_MAX_MIB


@pytest.mark.parametrize("mib, factor, units", [(4096, 1, 4096), (4096, 3, 1366), (6000, 3, 2000), (1, 5, 1)])
def test_units(mib, factor, units):
    assert tr.units(mib, factor) == units


@pytest.mark.parametrize("values, fraction, expected", [
    ([], 0.5, None), ([3.0], 0.99, 3.0), ([1, 2, 3, 4], 0.5, 2), ([1, 2, 3, 4], 0.99, 4), (list(range(1, 101)), 0.99, 99),
])
def test_percentile(values, fraction, expected):
    assert tr.percentile(values, fraction) == expected


def test_placement_figures():
    jobs = [{"name": "single", "units": [4]}, {"name": "gang", "units": [3, 3, 3]},
            {"name": "fits", "units": [2]}, {"name": "frag", "units": [5]}, {"name": "half", "units": [1, 1]}]
    free = {"a": {"slots": 1, "memory": 3}, "b": {"slots": 1, "memory": 3}}
    figures = tr.placement_figures(jobs, {"single": 1, "gang": 3, "half": 1}, free)
    assert figures == {"partial_gangs": ["half"], "pending_fit_now": ["fits"], "pending_fragmented": ["frag"]}


def _callback_json():
    """The json callback's output of a run with a serial play in two batches, as ansible-playbook prints it."""
    def task(name, start, end, hosts):
        return {"task": {"name": name, "duration": {"start": "2026-12-04T10:00:%02d.000000Z" % start,
                                                    "end": "2026-12-04T10:00:%02d.500000Z" % end}},
                "hosts": hosts}
    plays = [
        {"play": {"name": "GPU nodes the run does not disrupt - all at once"},
         "tasks": [task("Fast path", 0, 1, {"h01": {"changed": False}, "h02": {"skipped": True}})]},
        {"play": {"name": "GPU nodes the run disrupts - gpufleet_node_serial at a time"},
         "tasks": [task("Converge", 2, 4, {"h03": {"changed": True}})]},
        {"play": {"name": "GPU nodes the run disrupts - gpufleet_node_serial at a time"},
         "tasks": [task("Converge", 5, 6, {"h04": {"failed": True}})]},
    ]
    return "warning text before the JSON\n" + json.dumps({"plays": plays, "stats": {}})


def test_task_profile_sums_batches_and_counts_results():
    import common  # tools/bench  pylint: disable=import-outside-toplevel
    profile = common.task_profile(_callback_json())
    assert profile == [
        {"play": "GPU nodes the run disrupts - gpufleet_node_serial at a time", "task": "Converge", "seconds": 4.0,
         "ok": 0, "changed": 1, "skipped": 0, "failed": 1},
        {"play": "GPU nodes the run does not disrupt - all at once", "task": "Fast path", "seconds": 1.5,
         "ok": 1, "changed": 0, "skipped": 1, "failed": 0}]
    assert common.play_batches(_callback_json(), "GPU nodes the run disrupts") == [["h03"], ["h04"]]
    assert common.play_batches(_callback_json(), "No such play") == []
    assert common.task_profile("not json") == []


def test_recap_names_the_tasks_that_changed_and_failed():
    import common  # tools/bench  pylint: disable=import-outside-toplevel
    stdout = _callback_json().replace('"stats": {}', '"stats": {"h03": {"changed": 1, "ok": 1}, '
                                                     '"h04": {"failures": 1}}')
    summary = common.recap(stdout)
    assert summary["changed"] == 1 and summary["failed"] == 1
    assert summary["changed_tasks"] == ["h03: Converge"]
    assert summary["failures"] == ["h04: Converge: "]
    assert "error" in common.recap("no JSON here", "and an error")


# The scheduler's /metrics as Volcano v1.15 serves them (its histograms, and client-go's, per host).
SCHEDULER_METRICS = """# HELP volcano_e2e_scheduling_latency_milliseconds Duration of a single scheduling session.
# TYPE volcano_e2e_scheduling_latency_milliseconds histogram
volcano_e2e_scheduling_latency_milliseconds_bucket{le="+Inf"} %(sessions)d
volcano_e2e_scheduling_latency_milliseconds_sum %(session_ms)f
volcano_e2e_scheduling_latency_milliseconds_count %(sessions)d
# HELP volcano_action_scheduling_latency_milliseconds Action scheduling latency in milliseconds
# TYPE volcano_action_scheduling_latency_milliseconds histogram
volcano_action_scheduling_latency_milliseconds_sum{action="allocate"} %(allocate_ms)f
volcano_action_scheduling_latency_milliseconds_count{action="allocate"} %(sessions)d
volcano_action_scheduling_latency_milliseconds_sum{action="enqueue"} 999999
volcano_action_scheduling_latency_milliseconds_count{action="enqueue"} 7
# HELP rest_client_request_duration_seconds [ALPHA] Request latency in seconds. Broken down by verb, and host.
# TYPE rest_client_request_duration_seconds histogram
rest_client_request_duration_seconds_sum{host="127.0.0.1:6443",verb="PATCH"} %(patch_s)f
rest_client_request_duration_seconds_count{host="127.0.0.1:6443",verb="PATCH"} %(patches)d
rest_client_request_duration_seconds_sum{host="[::1]:6443",verb="PATCH"} 1.0
rest_client_request_duration_seconds_count{host="[::1]:6443",verb="PATCH"} 10
rest_client_request_duration_seconds_sum{host="127.0.0.1:6443",verb="POST"} 2.0
rest_client_request_duration_seconds_count{host="127.0.0.1:6443",verb="POST"} 100
"""


def test_scheduler_waits_are_what_its_histograms_added_during_the_window():
    before = b3_scale.histogram_totals(SCHEDULER_METRICS % {"sessions": 10, "session_ms": 5000, "allocate_ms": 4000,
                                                            "patch_s": 3.0, "patches": 100})
    after = b3_scale.histogram_totals(SCHEDULER_METRICS % {"sessions": 40, "session_ms": 35000, "allocate_ms": 31000,
                                                           "patch_s": 27.0, "patches": 1100})
    # Series of every host summed; other actions left out; milliseconds as seconds.
    assert before["PATCH requests"] == (110, 4.0)
    assert before["allocate action"] == (10, 4.0)
    found = b3_scale.waits(before, after, 30.0)
    assert found["sessions"] == {"count": 30, "seconds": 30.0, "mean_ms": 1000.0, "share": 1.0}
    assert found["allocate action"] == {"count": 30, "seconds": 27.0, "mean_ms": 900.0, "share": 0.9}
    assert found["PATCH requests"] == {"count": 1000, "seconds": 24.0, "mean_ms": 24.0, "share": 0.8}
    assert found["POST requests"] == {"count": 0, "seconds": 0.0, "mean_ms": None, "share": 0.0}


@pytest.mark.parametrize("name, label, settings", [
    ("stock", "stock images, the role's settings", {}),
    ("w1-v2", "stock images, 1 node worker thread, log level 2",
     {"volcano_scheduler_node_worker_threads": 1, "volcano_scheduler_log_level": 2}),
    ("p10", "stock images, 10% of the nodes found per pod", {"volcano_scheduler_percentage_nodes_to_find": 10}),
    ("fixed+p10", "scheduler with tools/upstream/volcano's patches, 10% of the nodes found per pod",
     {"volcano_scheduler_percentage_nodes_to_find": 10, "volcano_scheduler_image_tag": b3_scale.FIX_TAG}),
    ("fixed+p0", "scheduler with tools/upstream/volcano's patches, Volcano's adaptive share of the nodes found per pod",
     {"volcano_scheduler_image_tag": b3_scale.FIX_TAG}),
    ("quiet-plugin+w20", "stock images, the plugin writing its Node only when its registration changed, 20 node "
     "worker threads", {"volcano_scheduler_node_worker_threads": 20}),
])
def test_b3_variant_names_compose_a_build_and_settings(name, label, settings):
    found = b3_scale.variant(name)
    assert found["label"] == label
    assert {k: v for k, v in found["vars"].items() if v and k != "volcano_chart_values"} == settings
    assert found["vars"]["volcano_chart_values"] == b3_scale.PPROF
    assert found["plugin_register"] == ("on-change" if name.startswith("quiet-plugin") else "periodic")
    if name.endswith("p0"):  # 0 is set, over the role's default
        assert found["vars"]["volcano_scheduler_percentage_nodes_to_find"] == 0


@pytest.mark.parametrize("name, needle", [
    ("patched", "unknown B3 variant 'patched': 'patched' is no setting (allowed: stock, fixed, quiet-plugin; "),
    ("patched+p10", "unknown B3 variant 'patched+p10' (allowed: stock, fixed, quiet-plugin; "),
    ("fixed+", "unknown B3 variant 'fixed+' (allowed: "),
    ("fixed+x3", "unknown B3 variant 'fixed+x3': 'x3' is no setting"),
    ("w20-v", "unknown B3 variant 'w20-v': 'v' is no setting"),
])
def test_b3_variant_names_refused_name_what_is_allowed(name, needle):
    with pytest.raises(SystemExit, match=re.escape(needle)):
        b3_scale.variant(name)


@pytest.mark.parametrize("options, needle", [
    ({"rounds": 0}, "B3 rounds must be >= 1, got 0"),
    ({"rounds": 3, "repeat_variants": ("fixd",)}, "unknown B3 variant 'fixd'"),
])
def test_b3_rounds_refused_before_any_lab_starts(tmp_path, options, needle):
    with pytest.raises(SystemExit, match=re.escape(needle)):
        b3_scale.run(tmp_path, sizes=(10,), **options)
    assert not list(tmp_path.iterdir())


class DroppingCore:
    """A CoreV1Api stand-in whose first collection delete loses its connection, as a busy API server's does."""

    def __init__(self, error):
        self.error, self.calls = error, []

    def delete_collection_namespaced_pod(self, namespace, grace_period_seconds):
        self.calls.append(("delete pods", namespace, grace_period_seconds))
        if len(self.calls) == 1:
            raise self.error

    def delete_namespace(self, namespace):
        self.calls.append(("delete namespace", namespace))

    def read_namespace(self, namespace):
        raise b3_scale.client.exceptions.ApiException(status=404)


@pytest.mark.parametrize("error", [
    b3_scale.urllib3.exceptions.ProtocolError("Connection aborted.", ConnectionResetError()),
    b3_scale.client.exceptions.ApiException(status=504),
])
def test_b3_clear_asks_again_when_the_api_server_gives_up_on_a_large_delete(monkeypatch, error):
    monkeypatch.setattr(b3_scale.time, "sleep", lambda seconds: None)
    core = DroppingCore(error)
    b3_scale.clear(core, "bench-b3-plain")
    assert core.calls == [("delete pods", "bench-b3-plain", 0)] * 2 + [("delete namespace", "bench-b3-plain")]


def test_b3_clear_does_not_retry_what_a_retry_cannot_fix():
    core = DroppingCore(b3_scale.client.exceptions.ApiException(status=403))
    with pytest.raises(b3_scale.client.exceptions.ApiException):
        b3_scale.clear(core, "bench-b3-plain")


def sample(at, busy, idle, bench, **groups):
    """A cpu_sample as /proc would give it: busy and idle ticks of the whole machine."""
    return {"at": at, "machine": (busy, busy + idle), "bench": bench, "groups": groups}


@pytest.mark.parametrize("before, after, cpus, expected", [
    # 2 cores saturated for 4 s: the API server 1.5, the scheduler 0.25, the benchmark 0.2, the rest unaccounted.
    (sample(100.0, 1000, 1000, 3.0, apiserver=50.0, scheduler=10.0),
     sample(104.0, 1800, 1000, 3.8, apiserver=56.0, scheduler=11.0), 2,
     {"seconds": 4.0, "machine_cores": 2.0, "bench_cores": 0.2, "lab_cores": {"apiserver": 1.5, "scheduler": 0.25},
      "other_cores": 0.05}),
    # Half the machine idle, all of it the lab's: nothing other; rounding below zero shows as 0.
    (sample(0.0, 0, 0, 0.0, etcd=1.0), sample(2.0, 200, 200, 0.0, etcd=3.02), 2,
     {"seconds": 2.0, "machine_cores": 1.0, "bench_cores": 0.0, "lab_cores": {"etcd": 1.01}, "other_cores": 0.0}),
    # Another load: the lab and the benchmark took half of what was busy.
    (sample(0.0, 0, 0, 0.0, kwok=0.0), sample(10.0, 400, 0, 2.0, kwok=8.0), 2,
     {"seconds": 10.0, "machine_cores": 2.0, "bench_cores": 0.2, "lab_cores": {"kwok": 0.8}, "other_cores": 1.0}),
    # A group that restarted in the window (None at either end) has no figure rather than a wrong one.
    (sample(0.0, 0, 100, 0.0, scheduler=None, etcd=0.0), sample(1.0, 100, 200, 0.0, scheduler=5.0, etcd=0.5), 2,
     {"seconds": 1.0, "machine_cores": 1.0, "bench_cores": 0.0, "lab_cores": {"etcd": 0.5}, "other_cores": 0.5}),
    (sample(0.0, 0, 100, 0.0, etcd=0.0), sample(1.0, 100, 200, 0.0, etcd=None), 2,
     {"seconds": 1.0, "machine_cores": 1.0, "bench_cores": 0.0, "lab_cores": {}, "other_cores": 1.0}),
])
def test_cpu_use_splits_the_machines_busy_cores(before, after, cpus, expected):
    assert b3_scale.cpu_use(before, after, cpus) == expected


@pytest.mark.parametrize("lab_cores, expected", [
    ({"vc-scheduler": 0.68, "kube-apiserver": 0.7}, {"scheduler_cpu_s": 40.1, "scheduler_cpu_per_s": 0.68}),
    ({"kube-apiserver": 0.7}, {"scheduler_cpu_s": None, "scheduler_cpu_per_s": None}),   # restarted in the window
])
def test_scheduler_cpu_is_the_windows_figure_for_volcanos_scheduler(lab_cores, expected):
    window = {"seconds": 59.0, "machine_cores": 2.0, "bench_cores": 0.05, "lab_cores": lab_cores, "other_cores": 0.0}
    assert b3_scale.scheduler_cpu(window) == expected


def test_cpu_use_refuses_a_window_that_does_not_move_forward():
    with pytest.raises(ValueError, match="must end after it starts"):
        b3_scale.cpu_use(sample(5.0, 0, 0, 0.0), sample(5.0, 10, 10, 0.0), 2)


def test_cpu_sample_reads_this_machine_and_marks_a_gone_process():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    found = b3_scale.cpu_sample({"me": [os.getpid()], "gone": [os.getpid(), proc.pid]})
    busy, total = found["machine"]
    assert 0 <= busy <= total
    assert found["groups"]["me"] > 0 and found["groups"]["gone"] is None
    assert found["bench"] > 0


def test_lab_processes_name_the_control_plane_volcano_and_the_nodes_processes(tmp_path):
    (tmp_path / "state.json").write_text(json.dumps({"pids": {"etcd": 1, "kube-apiserver": 2}}))
    plugin = {"containers": {"vgpu": {"pid": 12, "started": 0}, "monitor": {"pid": None}}}
    (tmp_path / "children.json").write_text(json.dumps({
        "vc-scheduler": {"pid": 10, "build": "stock"}, "vc-webhook-manager": {"pid": 0},
        "nodes": {"n1": {"devicemanager": {"pid": 11}, "pods": {"p": plugin}},
                  "n2": {"devicemanager": {"pid": 13}, "pods": {"p": {"containers": {"vgpu": {"pid": 14}}}}},
                  "n3": {}},
        "plugin_monitors": {"n1": {"pid": 99}}}))
    lab = common.Lab("unit")
    lab.dir = tmp_path
    assert lab.processes() == {"etcd": [1], "kube-apiserver": [2], "vc-scheduler": [10],
                               "node devicemanager": [11, 13], "node vgpu": [12, 14]}
