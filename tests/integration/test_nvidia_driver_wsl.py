"""A WSL host among the GPU nodes is named as such and refused by role nvidia_driver before anything is installed."""

import pytest

from helpers import ROOT, run_playbook

PLAYBOOK = ROOT / "tests" / "integration" / "playbooks" / "nvidia_driver_wsl.yml"


@pytest.mark.parametrize("kernel", ["5.15.167.4-microsoft-standard-WSL2", "4.4.0-19041-Microsoft"])
def test_a_wsl_host_is_refused_before_any_change(kernel):
    rc, out, dummy = run_playbook(PLAYBOOK, "-e", "wsl_kernel=%s" % kernel)
    tasks = out["plays"][0]["tasks"]
    failed = [t for t in tasks if t["hosts"]["localhost"].get("failed")]
    assert rc != 0 and len(failed) == 1, tasks
    assert failed[0]["task"]["name"].endswith("nvidia_driver : Refuse a WSL host")
    assert "runs Windows Subsystem for Linux (kernel %s)" % kernel in failed[0]["hosts"]["localhost"]["msg"]
    assert not any(t["hosts"]["localhost"].get("changed") for t in tasks)
