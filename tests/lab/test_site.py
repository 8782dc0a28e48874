"""playbooks/site.yml end to end on the lab: GPU nodes as podman hosts, the cluster, smoke tests, the report."""

import json
import re
import shutil
import subprocess
import time

from kubernetes import client

from helpers import ROOT, failed_messages, run_playbook
from labkit import vgpu_pod_spec, wait_for

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
    """The README's main job, `make site`, on this test's fresh lab (make site reuses a healthy lab), then site.yml
    again."""
    assert lab["state"].get("hosts_ready"), "the lab's GPU nodes are not podman hosts (make images)"
    shutil.rmtree(ROOT / "gpufleet-report", ignore_errors=True)
    made = subprocess.run(["make", "--no-print-directory", "site"], cwd=ROOT, env=lab["env"], capture_output=True,
                          text=True, check=False)
    assert made.returncode == 0, (made.stdout[-3000:], made.stderr[-3000:])
    assert "Report: gpufleet-report/report.md" in made.stdout, made.stdout[-2000:]
    assert re.search(r"^\[site\] playbooks/site\.yml took \d+ s$", made.stdout, re.M), made.stdout[-2000:]
    # How to reach the lab's cluster with the kubectl the lab built (another kubectl may be first on PATH).
    assert "  export KUBECONFIG=%s/kubeconfig\n  %s/bin/kubectl get nodes\n" % (lab["dir"], lab["dir"]) in made.stdout, \
        made.stdout[-2000:]
    # It ran on this test's lab, not on one it started in its place.
    assert json.loads((lab["dir"] / "state.json").read_text())["pids"] == lab["state"]["pids"]
    first = ROOT / "gpufleet-report"
    report = json.loads((first / "smoke.json").read_text())
    statuses = {r["check"]: r["status"] for r in report["smoke"]}
    # Every check passed: on the lab the memory limit is the one kubelet's device manager got from the real plugin.
    assert statuses == {"vgpu_pod": "passed", "fill": "passed", "metrics": "passed", "memory_limit": "passed",
                        "gang": "passed", "cleanup": "passed"}, report["smoke"]
    details = {r["check"]: r["detail"] for r in report["smoke"]}
    assert "CUDA_DEVICE_MEMORY_LIMIT_0=8187m" in details["memory_limit"]     # one vGPU of a 4070 Super at split 2
    assert "8192 MiB runs out of memory" in details["memory_limit"]           # the article's 8 GB tensor
    assert "HostGPUMemoryUsage series are present on rig01, rig02" in details["metrics"]
    assert "freed one" in details["gang"]
    assert report["real_gpus"] is False
    totals = report["capacity"]["totals"]
    assert (totals["gpus"], totals["vgpus"]) == (10, 20)
    # The picture is of the fleet while the fill held every vGPU (the table: after the cleanup, none held).
    at_fill = report["capacity_at_fill"]["totals"]
    assert (at_fill["vgpus"], at_fill["vgpus_allocated"]) == (20, 20), at_fill
    assert totals["vgpus_allocated"] == 0, totals
    markdown = (first / "report.md").read_text()
    assert "## Smoke tests" in markdown and "## vGPU capacity" in markdown
    # The capacity picture beside the table (its pixels are tested in test__capacity_picture.py).
    assert "The picture shows the fleet while the fill check held every free vGPU of the nodes under test (the " \
        "table above: after the smoke pods were removed).\n\n![vGPU capacity per node and GPU](capacity.png)" in markdown
    assert (first / "capacity.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    # What gpu_verify found is in the report, per node and GPU: rig02's fixture has one card at x8 of x16.
    assert report["gpu_checks"]["rig01"] == {"ok": True, "failures": [], "warnings": []}, report["gpu_checks"]
    [warning] = report["gpu_checks"]["rig02"]["warnings"]
    assert warning.startswith("GPU 2 (") and "PCIe link x8 of x16" in warning, warning
    assert "## GPU checks (gpu_verify)" in markdown and "- rig02: warning: " + warning in markdown, markdown
    # The lab's GPUs are simulated, and the report says so where the findings are.
    assert ("## GPU checks (gpu_verify)\n\nSimulated GPUs: these findings come from stand-in NVML data on the nodes, "
            "not from cards.\n\n- rig01: OK") in markdown, markdown
    assert "- rig01: OK, no findings" in markdown
    assert "\\n" not in markdown and markdown.startswith("# gpufleet report\n\n## Smoke tests")  # real line breaks

    # A smoke run killed before its cleanup leaves its namespace and a pod holding a vGPU; the next run removes it
    # first (and says so), rather than counting that vGPU as taken by someone else.
    core = client.CoreV1Api(lab["api"])
    core.create_namespace({"metadata": {"name": "gpufleet-smoke-killed", "labels": {"gpufleet.io/smoke": "true"}}})
    core.create_namespaced_pod("gpufleet-smoke-killed", {"metadata": {"name": "fill-0"}, "spec": vgpu_pod_spec()})
    wait_for(lambda: bool(core.read_namespaced_pod("fill-0", "gpufleet-smoke-killed").spec.node_name), 60,
             "the leftover pod bound")
    # Only the first check this time: the whole smoke test ran in make site above; this run is about what a rerun
    # changes and the leftover.
    rc, out, err = site(lab, tmp_path / "second", "-e", json.dumps({"smoke_test_checks": ["vgpu_pod"]}))
    assert rc == 0, (failed_messages(out), err[-3000:])
    # The node layers really ran on the podman hosts: gpu_verify read the fake NVML of each node.
    verdicts = [res for play in out["plays"] for task in play["tasks"] if task["task"]["name"].endswith("Judge the node")
                for res in task["hosts"].values()]
    assert len(verdicts) == 2
    outside = [(host, name) for host, name in changed_tasks(out) if not name.startswith("gpufleet.vgpu.smoke_test :")]
    assert outside == [], outside
    smoke = [result for play in out["plays"] for task in play["tasks"] for result in task["hosts"].values()
             if "removed_leftovers" in result]
    assert [r["removed_leftovers"] for r in smoke] == [["gpufleet-smoke-killed"]] and smoke[0]["changed"], smoke
    assert "gpufleet-smoke-killed" not in [n.metadata.name for n in core.list_namespace().items]


NODE_ROLES = ("node_python", "nvidia_driver", "container_runtime")


def fast_path_messages(out):
    """{(host, role): message} of every node role's "Fast path" task (action gpufleet.vgpu.fast_path)."""
    return {(host, task["task"]["name"].split(" :")[0].rsplit(".", 1)[-1]): result.get("msg", "")
            for play in out["plays"] for task in play["tasks"] if task["task"]["name"].endswith(" : Fast path")
            for host, result in task["hosts"].items()}


def on_host(lab, node, *argv):
    name = json.loads((lab["dir"] / "lab.json").read_text())["hosts"][node]
    return subprocess.run(["podman", "exec", name] + list(argv), capture_output=True, text=True, check=False)


STEADY, ROLLING = "GPU nodes the run does not disrupt", "GPU nodes the run disrupts"


def play_batches(out, prefix):
    """The hosts of each batch of the plays whose name starts with ``prefix``, in the order they ran (the JSON
    callback starts a play again for each batch of a serial play)."""
    return [sorted({host for task in play["tasks"] for host in task["hosts"]}) for play in out["plays"]
            if play["play"]["name"].startswith(prefix)]


def schedulable(lab, node):
    return not client.CoreV1Api(lab["api"]).read_node(node).spec.unschedulable


def test_node_fast_path_skips_unchanged_nodes_and_repairs_drift(lab, tmp_path):
    """A rerun on unchanged nodes skips the node roles' tasks and looks at every node at once; what changed on a node
    is found and put back, one disrupted node at a time."""
    assert lab["state"].get("hosts_ready"), "the lab's GPU nodes are not podman hosts (make images)"
    rc, out, err = site(lab, tmp_path / "converge", "--tags", "nodes")
    assert rc == 0, (failed_messages(out), err[-3000:])
    # An operator's cordon on rig02 (no gpufleet mark): a run that does not disrupt the node leaves it.
    core = client.CoreV1Api(lab["api"])
    core.patch_node("rig02", {"spec": {"unschedulable": True}})
    try:
        rc, out, err = site(lab, tmp_path / "unchanged", "--tags", "nodes")
        assert rc == 0, (failed_messages(out), err[-3000:])
        assert not schedulable(lab, "rig02")
    finally:
        core.patch_node("rig02", {"spec": {"unschedulable": False}})
    messages = fast_path_messages(out)
    assert sorted(messages) == sorted((h, r) for h in ("rig01", "rig02") for r in NODE_ROLES), messages
    assert all("skipping every task: unchanged since the last run" in m for m in messages.values()), messages
    assert changed_tasks(out) == []
    # Both nodes in one batch; nothing for the rolling part.
    assert play_batches(out, STEADY) == [["rig01", "rig02"]]
    assert play_batches(out, ROLLING) == [[]]

    # Drift on rig01: a file of the driver layer removed, containerd's default runtime changed by hand, a package of
    # the node virtualenv uninstalled. On rig02 only containerd's configuration.
    assert on_host(lab, "rig01", "rm", "/etc/modprobe.d/blacklist-nouveau.conf").returncode == 0
    for node in ("rig01", "rig02"):
        assert on_host(lab, node, "sed", "-i", 's/default_runtime_name = "nvidia"/default_runtime_name = "runc"/',
                       "/etc/containerd/config.toml").returncode == 0
    assert on_host(lab, "rig01", "/opt/gpufleet/venv/bin/python", "-m", "pip", "uninstall", "-y", "-q",
                   "tomlkit").returncode == 0

    # A node that drifted after site.yml decided it was unchanged: the part that runs all at once changes nothing
    # on it and hands it to the rolling part.
    rc, out, err = run_playbook(ROOT / "tests" / "lab" / "playbooks" / "handover.yml", "-e", "node=rig02",
                                env=lab["env"], inventory=INVENTORY, local=False)
    assert rc == 0, (failed_messages(out), err[-3000:])
    assert changed_tasks(out) == []
    assert "tree /etc/containerd changed" in fast_path_messages(out)[("rig02", "container_runtime")]
    assert not [name for host, name in ((h, t["task"]["name"]) for p in out["plays"] for t in p["tasks"]
                                        for h in t["hosts"]) if name.startswith("gpufleet.vgpu.gpu_verify")]
    assert play_batches(out, "The nodes handed to the rolling part") == [["rig02"]]
    assert 'default_runtime_name = "runc"' in on_host(lab, "rig02", "cat", "/etc/containerd/config.toml").stdout

    rc, out, err = site(lab, tmp_path / "drift", "--tags", "nodes")
    assert rc == 0, (failed_messages(out), err[-3000:])
    messages = fast_path_messages(out)
    assert "file /etc/modprobe.d/blacklist-nouveau.conf is gone" in messages[("rig01", "nvidia_driver")], messages
    assert "tree /etc/containerd changed" in messages[("rig01", "container_runtime")], messages
    assert "site-packages" in messages[("rig01", "node_python")], messages
    assert "tree /etc/containerd changed" in messages[("rig02", "container_runtime")], messages
    assert all("skipping every task" in messages[("rig02", r)] for r in ("node_python", "nvidia_driver")), messages
    # The two disrupted nodes one at a time (gpufleet_node_serial's default), in inventory order.
    assert play_batches(out, STEADY) == [[]]
    assert play_batches(out, ROLLING) == [["rig01"], ["rig02"]]
    assert {host for host, name in changed_tasks(out)} == {"rig01", "rig02"}
    assert on_host(lab, "rig01", "test", "-f", "/etc/modprobe.d/blacklist-nouveau.conf").returncode == 0
    for node in ("rig01", "rig02"):
        assert 'default_runtime_name = "nvidia"' in on_host(lab, node, "containerd", "config", "dump").stdout
    assert on_host(lab, "rig01", "/opt/gpufleet/venv/bin/python", "-c", "import tomlkit").returncode == 0

    rc, out, err = site(lab, tmp_path / "repaired", "--tags", "nodes")
    assert rc == 0, (failed_messages(out), err[-3000:])
    assert all("skipping every task" in m for m in fast_path_messages(out).values())
    assert changed_tasks(out) == []
    assert play_batches(out, STEADY) == [["rig01", "rig02"]]


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


def test_smoke_fills_only_the_nodes_under_test_within_its_bound(lab, tmp_path):
    """A shared cluster: the smoke test fills only the nodes it is told, and never more pods than its bound."""
    def fill(tag, **settings):
        extra = json.dumps(dict({"smoke_test_checks": ["fill"]}, **settings))
        rc, out, err = site(lab, tmp_path / tag, "--tags", "smoke", "--skip-tags", "nodes", "-e", extra)
        assert rc == 0, (failed_messages(out), err[-3000:])
        return {r["check"]: r for r in json.loads((tmp_path / tag / "smoke.json").read_text())["smoke"]}["fill"]

    only_rig02 = fill("rig02", smoke_test_nodes=["rig02"])
    # rig02's 5 cards at split 2; rig01's 10 vGPUs are another operator's here, neither filled nor counted.
    assert only_rig02["status"] == "passed", only_rig02
    assert only_rig02["detail"].startswith("10 one-vGPU pods run (all free vGPUs of rig02)"), only_rig02
    bounded = fill("bounded", smoke_test_fill_max_pods=10)
    assert bounded["status"] == "passed", bounded
    assert "all free vGPUs of rig01)" in bounded["detail"], bounded
    assert "not filled, beyond fill_max_pods 10: rig02" in bounded["detail"], bounded
    too_big = fill("too-big", smoke_test_nodes=["rig02"], smoke_test_fill_max_pods=4)
    assert too_big["status"] == "skipped" and "rig02 alone has more free vGPUs than fill_max_pods (4)" in \
        too_big["detail"], too_big
