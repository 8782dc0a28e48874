"""The registration wait's loop (the real listing and plan: every converge of the lab tests waits with it)."""

from unittest import mock

import pytest
from ansible.errors import AnsibleActionFail

from ansible_collections.gpufleet.vgpu.plugins.action import vgpu_registration_wait as wait

EXPECTED = {"rig01": {"host": "rig01", "volcano.sh/vgpu-number": 10, "volcano.sh/vgpu-memory": 40940,
                      "volcano.sh/vgpu-cores": 500, "gpus": 5, "split": 2, "memory_mib": 122820, "source": "nvml",
                      "memory_exact": True}}
REGISTERED = {"metadata": {"name": "rig01"}, "status": {"allocatable": {
    "volcano.sh/vgpu-number": "10", "volcano.sh/vgpu-memory": "40940", "volcano.sh/vgpu-cores": "500"}}}
BARE = {"metadata": {"name": "rig01"}, "status": {"allocatable": {"cpu": "8"}}}


def action(args, answers):
    """The action with `args`, its listings answered in turn from `answers` (the last one repeated)."""
    task = mock.MagicMock(args=args, async_val=0, check_mode=False, diff=False)
    module = wait.ActionModule(task, mock.MagicMock(), mock.MagicMock(), loader=None, templar=None,
                               shared_loader_obj=None)
    calls = []

    def execute(module_name, module_args, task_vars):
        calls.append((module_name, dict(module_args)))
        return answers[min(len(calls), len(answers)) - 1]
    module._execute_module = execute  # pylint: disable=protected-access
    return module, calls


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch):
    clock = {"now": 0.0}
    monkeypatch.setattr(wait.time, "monotonic", lambda: clock["now"])
    monkeypatch.setattr(wait.time, "sleep", lambda seconds: clock.__setitem__("now", clock["now"] + seconds))


def test_polls_until_every_node_registered_passing_the_auth_options_on():
    module, calls = action({"expected": EXPECTED, "timeout": 60, "delay": 5, "kubeconfig": "/k", "context": "c"},
                           [{"resources": [BARE]}, {"resources": [BARE]}, {"resources": [REGISTERED]}])
    result = module.run(task_vars={})
    assert result["check"] == {"ok": True, "problems": []} and not result.get("failed")
    assert (result["polls"], result["waited_s"], result["changed"]) == (3, 10, False)
    assert result["resources"] == [REGISTERED] and "after 10 s" in result["msg"]
    assert calls[0] == ("kubernetes.core.k8s_info", {"kind": "Node", "kubeconfig": "/k", "context": "c"})


def test_the_time_up_is_the_callers_to_report():
    module, calls = action({"expected": EXPECTED, "timeout": 12, "delay": 5}, [{"resources": [BARE]}])
    result = module.run(task_vars={})
    assert not result.get("failed") and result["check"]["ok"] is False
    assert result["check"]["problems"][0].startswith("node rig01: volcano.sh/vgpu-number is missing, expected 10")
    # Polls at 0, 5 and 10 s; a fourth would end after the 12 s.
    assert len(calls) == 3 and "within 12 s" in result["msg"]


def test_a_listing_that_fails_fails_the_task():
    module, dummy = action({"expected": EXPECTED}, [{"failed": True, "msg": "Unauthorized"}])
    result = module.run(task_vars={})
    assert result["failed"] and result["msg"] == "could not list the nodes: Unauthorized"


@pytest.mark.parametrize("args, fragment", [
    ({}, "needs expected"),
    ({"expected": EXPECTED, "timeout": "soon"}, r"seconds \(integers\): .*soon"),
    ({"expected": EXPECTED, "delay": 0}, "delay and status_period >= 1, got 300, 0 and 10"),
    ({"expected": EXPECTED, "daemonsets": ["volcano-device-plugin"]}, "needs namespace"),
    ({"expected": EXPECTED, "status_period": "10s"}, r"status_period are seconds \(integers\): .*'10s'"),
])
def test_bad_arguments_are_named(args, fragment):
    module, dummy = action(args, [{"resources": []}])
    with pytest.raises(AnsibleActionFail, match=fragment):
        module.run(task_vars={})


def pod(uid, ready_at):
    return {"metadata": {"name": "volcano-device-plugin-" + uid, "uid": uid,
                         "ownerReferences": [{"kind": "DaemonSet", "name": "volcano-device-plugin"}]},
            "spec": {"nodeName": "rig01"},
            "status": {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": ready_at}]}}


def by_kind(answers):
    """An _execute_module answering each kind's listings in turn from answers[kind] (the last one repeated)."""
    calls = []

    def execute(module_name, module_args, task_vars):
        calls.append(dict(module_args))
        listed = answers[module_args["kind"]]
        return listed[min(sum(c["kind"] == module_args["kind"] for c in calls), len(listed)) - 1]
    return execute, calls


DAEMONSET = {"metadata": {"name": "volcano-device-plugin", "generation": 2},
             "spec": {"selector": {"matchLabels": {"name": "volcano-device-plugin"}}},
             "status": {"observedGeneration": 2, "desiredNumberScheduled": 1, "updatedNumberScheduled": 1}}
ROLLING = dict(DAEMONSET, status=dict(DAEMONSET["status"], updatedNumberScheduled=0))
ARGS = {"expected": EXPECTED, "timeout": 120, "delay": 5, "daemonsets": ["volcano-device-plugin"],
        "namespace": "kube-system", "status_period": 10, "kubeconfig": "/k"}


def test_an_old_pods_registration_does_not_count_until_the_rollout_is_done():
    module, dummy = action(ARGS, [])
    # The node shows its registration all along (the replaced pod's); the DaemonSet rolls out at the second poll.
    # Its new pod's Ready time is far in this clock's future (a cluster clock ahead), so only what the wait saw
    # counts: Ready at 5 s, counted from 20 s (status_period 10 + 5).
    module._execute_module, calls = by_kind({  # pylint: disable=protected-access
        "Node": [{"resources": [REGISTERED]}], "DaemonSet": [{"resources": [ROLLING]}, {"resources": [DAEMONSET]}],
        "Pod": [{"resources": [pod("old", "2026-01-01T00:00:00Z")]}, {"resources": [pod("new", "2999-01-01T00:00:00Z")]}]})
    result = module.run(task_vars={})
    assert result["check"] == {"ok": True, "problems": []}
    assert (result["polls"], result["waited_s"]) == (5, 20)
    assert calls[:3] == [{"kind": "Node", "kubeconfig": "/k"},
                         {"kind": "DaemonSet", "namespace": "kube-system", "kubeconfig": "/k"},
                         {"kind": "Pod", "namespace": "kube-system", "label_selectors": ["name=volcano-device-plugin"],
                          "kubeconfig": "/k"}]


def test_the_rollout_that_did_not_finish_is_named_first():
    module, dummy = action(dict(ARGS, timeout=12), [])
    module._execute_module, dummy = by_kind({  # pylint: disable=protected-access
        "Node": [{"resources": [BARE]}], "DaemonSet": [{"resources": [ROLLING]}],
        "Pod": [{"resources": [pod("old", "2026-01-01T00:00:00Z")]}]})
    problems = module.run(task_vars={})["check"]["problems"]
    assert problems[0] == "DaemonSet kube-system/volcano-device-plugin: rollout in progress, 0 of 1 pods updated"
    assert problems[1].startswith("node rig01: volcano.sh/vgpu-number is missing")


def test_a_daemonset_listing_that_fails_fails_the_task():
    module, dummy = action(ARGS, [])
    module._execute_module, dummy = by_kind({  # pylint: disable=protected-access
        "Node": [{"resources": [REGISTERED]}], "DaemonSet": [{"failed": True, "msg": "Forbidden"}]})
    result = module.run(task_vars={})
    assert result["failed"] and result["msg"] == "could not list the DaemonSets of kube-system: Forbidden"
