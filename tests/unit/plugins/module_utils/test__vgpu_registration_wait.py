"""The registration wait's loop (module vgpu_registration_wait; every converge of the lab tests waits with it): its
listings answered from tables, its clock and sleep simulated."""

import pytest

from ansible_collections.gpufleet.vgpu.plugins.module_utils import _vgpu_registration as reg

EXPECTED = {"rig01": {"host": "rig01", "volcano.sh/vgpu-number": 10, "volcano.sh/vgpu-memory": 40940,
                      "volcano.sh/vgpu-cores": 500, "gpus": 5, "split": 2, "memory_mib": 122820, "source": "nvml",
                      "memory_exact": True}}
REGISTERED = {"metadata": {"name": "rig01"}, "status": {"allocatable": {
    "volcano.sh/vgpu-number": "10", "volcano.sh/vgpu-memory": "40940", "volcano.sh/vgpu-cores": "500"}}}
BARE = {"metadata": {"name": "rig01"}, "status": {"allocatable": {"cpu": "8"}}}
DAEMONSET = {"metadata": {"name": "volcano-device-plugin", "generation": 2},
             "spec": {"selector": {"matchLabels": {"name": "volcano-device-plugin"}}},
             "status": {"observedGeneration": 2, "desiredNumberScheduled": 1, "updatedNumberScheduled": 1}}
ROLLING = dict(DAEMONSET, status=dict(DAEMONSET["status"], updatedNumberScheduled=0))
ROLLOUT = {"daemonsets": ["volcano-device-plugin"], "namespace": "kube-system", "status_period": 10}


def pod(uid, ready_at):
    return {"metadata": {"name": "volcano-device-plugin-" + uid, "uid": uid,
                         "ownerReferences": [{"kind": "DaemonSet", "name": "volcano-device-plugin"}]},
            "spec": {"nodeName": "rig01"},
            "status": {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": ready_at}]}}


def run(answers, **options):
    """wait_for_registration() with each kind's listings answered in turn from answers[kind] (the last one
    repeated), on a clock that only sleeping moves; returns its result and the listings it asked for."""
    clock, calls = {"now": 0.0}, []

    def list_objects(kind, api_version, namespace=None, label_selectors=None):
        calls.append((kind, api_version, namespace, label_selectors))
        listed = answers[kind]
        return listed[min(sum(c[0] == kind for c in calls), len(listed)) - 1]
    result = reg.wait_for_registration(
        list_objects, EXPECTED, monotonic=lambda: clock["now"],
        sleep=lambda seconds: clock.__setitem__("now", clock["now"] + seconds), **options)
    return result, calls


def test_polls_until_every_node_registered():
    result, calls = run({"Node": [{"resources": [BARE]}, {"resources": [BARE]}, {"resources": [REGISTERED]}]},
                        timeout=60, delay=5)
    assert result == {"ok": True, "check": {"ok": True, "problems": []}, "resources": [REGISTERED], "polls": 3,
                      "waited_s": 10}
    assert calls == [("Node", "v1", None, None)] * 3


def test_the_time_up_is_the_callers_to_report():
    result, calls = run({"Node": [{"resources": [BARE]}]}, timeout=12, delay=5)
    assert result["ok"] is False and result["check"]["ok"] is False and "failed" not in result
    assert result["check"]["problems"][0].startswith("node rig01: volcano.sh/vgpu-number is missing, expected 10")
    # Polls at 0, 5 and 10 s; a fourth would end after the 12 s.
    assert (len(calls), result["polls"], result["waited_s"]) == (3, 3, 10)


def test_a_timeout_of_zero_polls_once():
    result, calls = run({"Node": [{"resources": [BARE]}]}, timeout=0, delay=5)
    assert (result["ok"], result["polls"], len(calls)) == (False, 1, 1)


@pytest.mark.parametrize("answers, message", [
    ({"Node": [{"failed": True, "msg": "Unauthorized"}]}, "could not list the nodes: Unauthorized"),
    ({"Node": [{"resources": [REGISTERED]}], "DaemonSet": [{"failed": True, "msg": "Forbidden"}]},
     "could not list the DaemonSets of kube-system: Forbidden"),
    ({"Node": [{"resources": [REGISTERED]}], "DaemonSet": [{"resources": [DAEMONSET]}],
      "Pod": [{"failed": True, "msg": "Forbidden"}]},
     "could not list the pods of DaemonSet kube-system/volcano-device-plugin: Forbidden"),
])
def test_a_listing_that_fails_ends_the_wait_naming_it(answers, message):
    result, dummy = run(answers, timeout=60, **ROLLOUT)
    assert result == {"ok": False, "polls": 1, "failed": message}


def test_an_old_pods_registration_does_not_count_until_the_rollout_is_done():
    # The node shows its registration all along (the replaced pod's); the DaemonSet rolls out at the second poll.
    # Its new pod's Ready time is far in this clock's future (a cluster clock ahead), so only what the wait saw
    # counts: Ready at 5 s, counted from 20 s (status_period 10 + 5).
    result, calls = run({
        "Node": [{"resources": [REGISTERED]}], "DaemonSet": [{"resources": [ROLLING]}, {"resources": [DAEMONSET]}],
        "Pod": [{"resources": [pod("old", "2026-01-01T00:00:00Z")]}, {"resources": [pod("new", "2999-01-01T00:00:00Z")]}]},
        timeout=120, delay=5, **ROLLOUT)
    assert result["check"] == {"ok": True, "problems": []}
    assert (result["polls"], result["waited_s"]) == (5, 20)
    assert calls[:3] == [("Node", "v1", None, None), ("DaemonSet", "apps/v1", "kube-system", None),
                         ("Pod", "v1", "kube-system", ["name=volcano-device-plugin"])]


def test_a_pod_ready_long_enough_by_the_clusters_clock_counts_at_the_first_poll():
    result, calls = run({"Node": [{"resources": [REGISTERED]}], "DaemonSet": [{"resources": [DAEMONSET]}],
                         "Pod": [{"resources": [pod("new", "2026-01-01T00:00:00Z")]}]}, timeout=120, **ROLLOUT)
    assert (result["ok"], result["polls"], len(calls)) == (True, 1, 3)


def test_the_rollout_that_did_not_finish_is_named_first():
    result, dummy = run({"Node": [{"resources": [BARE]}], "DaemonSet": [{"resources": [ROLLING]}],
                         "Pod": [{"resources": [pod("old", "2026-01-01T00:00:00Z")]}]}, timeout=12, **ROLLOUT)
    problems = result["check"]["problems"]
    assert problems[0] == "DaemonSet kube-system/volcano-device-plugin: rollout in progress, 0 of 1 pods updated"
    assert problems[1].startswith("node rig01: volcano.sh/vgpu-number is missing")
