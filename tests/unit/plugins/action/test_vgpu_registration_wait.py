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
    ({"expected": EXPECTED, "delay": 0}, "delay >= 1"),
])
def test_bad_arguments_are_named(args, fragment):
    module, dummy = action(args, [{"resources": []}])
    with pytest.raises(AnsibleActionFail, match=fragment):
        module.run(task_vars={})
