"""playbooks/site.yml end to end on the lab: GPU nodes as podman hosts, the cluster, smoke tests, the report."""

import json
import time

from kubernetes import client

from helpers import ROOT, failed_messages, run_playbook
from labkit import wait_for

PLAYBOOK = ROOT / "playbooks" / "site.yml"
INVENTORY = str(ROOT / "inventories" / "lab")


def site(lab, tmp_path, *args):
    env = dict(lab["env"], GPUFLEET_REPORT_DIR=str(tmp_path))
    return run_playbook(PLAYBOOK, *args, env=env, inventory=INVENTORY, local=False)


def changed_tasks(out):
    """(host, task name) of every task that changed something."""
    return [(host, task["task"]["name"]) for play in out["plays"] for task in play["tasks"]
            for host, result in task["hosts"].items() if result.get("changed")]


def test_site_end_to_end_then_no_change_outside_the_smoke_test(lab, tmp_path):
    assert lab["state"].get("hosts_ready"), "the lab's GPU nodes are not podman hosts (make images)"
    rc, out, err = site(lab, tmp_path / "first")
    assert rc == 0, (failed_messages(out), err[-3000:])
    report = json.loads((tmp_path / "first" / "smoke.json").read_text())
    statuses = {r["check"]: r["status"] for r in report["smoke"]}
    # Every check that needs no real GPU passed; the memory limit is skipped with its reason.
    assert statuses == {"vgpu_pod": "passed", "fill": "passed", "metrics": "passed", "memory_limit": "skipped",
                        "gang": "passed", "cleanup": "passed"}, report["smoke"]
    assert report["real_gpus"] is False
    totals = report["capacity"]["totals"]
    assert (totals["gpus"], totals["vgpus"]) == (10, 20)
    markdown = (tmp_path / "first" / "report.md").read_text()
    assert "## Smoke tests" in markdown and "## vGPU capacity" in markdown
    # The node layers really ran on the podman hosts: gpu_verify read the fake NVML of each node.
    verdicts = [res for play in out["plays"] for task in play["tasks"] if task["task"]["name"].endswith("Judge the node")
                for res in task["hosts"].values()]
    assert len(verdicts) == 2

    rc, out, err = site(lab, tmp_path / "second")
    assert rc == 0, (failed_messages(out), err[-3000:])
    outside = [(host, name) for host, name in changed_tasks(out) if not name.startswith("gpufleet.vgpu.smoke_test :")]
    assert outside == [], outside


def test_a_failing_check_leaves_nothing_behind(lab, tmp_path):
    core = client.CoreV1Api(lab["api"])
    extra = json.dumps({"smoke_test_checks": ["vgpu_pod"], "smoke_test_scheduler_name": "nobody-schedules-this",
                        "smoke_test_timeout": 20})
    rc, out, err = site(lab, tmp_path, "--tags", "smoke", "--skip-tags", "nodes", "-e", extra)
    assert rc != 0
    assert any("vgpu_pod: failed" in m for m in failed_messages(out)), failed_messages(out)
    report = json.loads((tmp_path / "smoke.json").read_text())
    assert [r["status"] for r in report["smoke"]] == ["failed", "passed"], report["smoke"]
    time.sleep(1)
    wait_for(lambda: not core.list_namespace(label_selector="gpufleet.io/smoke=true").items, 60,
             "no smoke namespace left")
    assert not [p for p in core.list_pod_for_all_namespaces().items if p.metadata.namespace.startswith("gpufleet-smoke")]
