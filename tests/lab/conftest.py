"""One local lab for all end-to-end lab tests (session scope), brought up from scratch and torn down at the end.

With GPUFLEET_LAB_VOLCANO_FIX=1 (`make lab-gang-fix`) the lab runs Volcano's scheduler built with
tools/upstream/volcano's patches, as a site deploys it (the scheduler Deployment's image tag), instead of the stock
release: the tests then check that the patched scheduler and the real plugin work together. `make test` runs the
stock release only.
"""

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest
from kubernetes import client, config, utils

from gpufleet_lab import controller, images, procs
from labkit import GPU_NODES, children, wait_for

ROOT = pathlib.Path(__file__).resolve().parents[2]
LAB = [sys.executable, str(ROOT / "tools" / "lab" / "lab.py")]


@pytest.fixture(scope="session")
def lab(tmp_path_factory):
    labdir = tmp_path_factory.mktemp("lab") / "state"
    env = dict(os.environ, GPUFLEET_LAB_DIR=str(labdir))
    volcano_fix = os.environ.get("GPUFLEET_LAB_VOLCANO_FIX") == "1"
    subprocess.run(LAB + ["up"] + (["--volcano-fix"] if volcano_fix else []), env=env, check=True)
    state = json.loads((labdir / "state.json").read_text())
    try:
        if volcano_fix:
            _run_patched_scheduler(labdir)
        yield {"dir": labdir, "env": env, "state": state,
               "api": config.new_client_from_config(str(labdir / "kubeconfig"))}
    finally:
        # The logs outlive the lab (pytest's base temp keeps the last runs) for the failure reports below.
        if (labdir / "logs").exists():
            shutil.copytree(labdir / "logs", tmp_path_factory.getbasetemp() / "lab-logs", dirs_exist_ok=True)
        started = [{"pid": pid, "started": procs.start_time(pid)} for pid in state["pids"].values()]
        started += controller.children(labdir)
        subprocess.run(LAB + ["down"], env=env, check=True)
        # Nothing the lab started may survive it (same PID and start time), and its state is gone.
        assert not [c["pid"] for c in started if c["started"] and procs.running(c["pid"], c["started"])]
        assert not labdir.exists()


def _run_patched_scheduler(labdir):
    """Point the scheduler Deployment at the patched build's tag and wait until the lab runs that build."""
    apps = client.AppsV1Api(config.new_client_from_config(str(labdir / "kubeconfig")))
    deploy = apps.read_namespaced_deployment("volcano-scheduler", "volcano-system")
    container = deploy.spec.template.spec.containers[0]
    tag = images.volcano_version() + images.VOLCANO_FIX_SUFFIX
    apps.patch_namespaced_deployment("volcano-scheduler", "volcano-system", {"spec": {"template": {"spec": {
        "containers": [{"name": container.name, "image": container.image.rsplit(":", 1)[0] + ":" + tag}]}}}})

    def patched_running():
        child = children({"dir": labdir}).get("vc-scheduler") or {}
        return (child.get("build") == "volcano-fix" and bool(child.get("pid"))
                and procs.running(child["pid"], child.get("started"))) or child
    wait_for(patched_running, 120, "the lab runs the patched scheduler")


LOG_TAILS = (("lab-controller.log", 60), ("vc-scheduler.log", 40), ("lab-devicemanager-rig01.log", 20),
             ("lab-devicemanager-rig02.log", 20))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed lab test reports what the lab controller and the scheduler were doing (CI keeps nothing else)."""
    outcome = yield
    report = outcome.get_result()
    lab = item.funcargs.get("lab") if hasattr(item, "funcargs") else None
    if report.when != "call" or not report.failed or not lab:
        return
    for name, lines in LOG_TAILS:
        path = lab["dir"] / "logs" / name
        if path.exists():
            tail = path.read_text(errors="replace").splitlines()[-lines:]
            report.sections.append(("lab log %s (last %d lines)" % (name, lines), "\n".join(tail)))


@pytest.fixture(scope="session")
def plugin(lab):
    """plugin-fixture.yaml's deployment on the labelled GPU nodes: the real plugin binary registers them through the
    node's device manager (kubelet's own code)."""
    core = client.CoreV1Api(lab["api"])
    for name in GPU_NODES:
        core.patch_node(name, {"metadata": {"labels": {"gpufleet.io/gpu": "true"}}})
    utils.create_from_yaml(lab["api"], str(pathlib.Path(__file__).with_name("plugin-fixture.yaml")))
    wait_for(lambda: all(core.read_node(n).status.allocatable.get("volcano.sh/vgpu-number") == "10"
                         for n in GPU_NODES) or [core.read_node(n).status.allocatable for n in GPU_NODES],
             90, "both GPU nodes registered with 10 vGPUs")
    return lab
