"""Roles volcano and device_plugin against the lab: the real API server, Volcano 1.15.1's chart and processes, the
real vGPU plugin behind kubelet's device manager."""

import json
import subprocess
import sys
import time

from ansible_collections.gpufleet.vgpu.plugins.module_utils._capacity import parse_pod_devices
from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _volcano_config
from kubernetes import client

from helpers import ROOT, failed_messages, run_playbook
from labkit import GPU_NODES, allocatable, children, cmdline, vgpu_pod_spec, wait_for

PLAYBOOK = ROOT / "playbooks" / "cluster.yml"
LAB = [sys.executable, str(ROOT / "tools" / "lab" / "lab.py")]
INVENTORY = str(ROOT / "inventories" / "lab")


def converge(lab, *args):
    rc, out, err = run_playbook(PLAYBOOK, *args, env=lab["env"], inventory=INVENTORY)
    return rc, out, err


def changed(out):
    return out["stats"]["localhost"]["changed"]


def task_results(out, suffix):
    return [task["hosts"]["localhost"] for play in out["plays"] for task in play["tasks"]
            if task["task"]["name"].endswith(suffix)]


def test_converge_then_nothing_to_change(plugin):
    """The first converge replaces plugin-fixture.yaml's DaemonSet (session fixture `plugin`) with the role's. The
    old pods registered the same numbers, and the nodes keep showing them while the pods are replaced (after
    test_plugin.py, a pod of its deleted twin node holds the rollout up until pod GC removes it, about a minute):
    the role's wait must outlast the rollout and kubelet's next status update."""
    lab = plugin
    rc, out, err = converge(lab)
    assert rc == 0, (failed_messages(out), err[-2000:])
    assert changed(out) > 0
    # Its first poll found new pods (or none yet) where the old registration still showed: it polled again.
    wait = task_results(out, "device_plugin : Wait until every GPU node registers its vGPUs")[0]
    assert wait["polls"] >= 2 and wait["check"]["ok"], wait
    status = client.AppsV1Api(lab["api"]).read_namespaced_daemon_set("volcano-device-plugin", "kube-system").status
    assert status.updated_number_scheduled == status.desired_number_scheduled == 2, status
    # Per node from group vars: 5 GPUs x split 2; gpuMemoryFactor auto = 3 (5 x 24564 MiB > kubelet's 60000 limit).
    for node, memory in (("rig01", 24564), ("rig02", 16376)):
        assert allocatable(lab, node) == "10"
        assert allocatable(lab, node, "volcano.sh/vgpu-memory") == str(5 * (memory // 3))
    # The role's scheduler settings reach the running scheduler: its Deployment's arguments, which the lab runs.
    args = client.AppsV1Api(lab["api"]).read_namespaced_deployment("volcano-scheduler", "volcano-system").spec \
        .template.spec.containers[0].args
    argv = cmdline(children(lab)["vc-scheduler"]["pid"])
    for setting in ("--node-worker-threads=20", "-v=2", "--percentage-nodes-to-find=10"):
        assert setting in args and setting in argv, (setting, args, argv)
    # A second plain run changing nothing is test_site.py's (site.yml holds these roles); check mode is asserted here.
    rc, out, err = converge(lab, "--check", "--diff")
    assert rc == 0 and changed(out) == 0, failed_messages(out)
    # Nodes already labelled are not patched at all: a patch of a node the plugin's handshake rewrites in between
    # would read as changed.
    labels = task_results(out, "device_plugin : Label the GPU nodes for the plugin's nodeSelector")
    assert labels and labels[0].get("skipped"), labels


def rig02_split_3(tmp_path):
    """One host's own device_plugin_vgpu, as its host_vars would set it: an inventory source naming rig02 alone,
    after the lab's (Ansible merges a host's variables across sources)."""
    extra = tmp_path / "rig02.yml"
    extra.write_text(json.dumps({"all": {"hosts": {"rig02": {"device_plugin_vgpu": {"split": 3}}}}}))
    return ["-i", str(extra)]


def test_split_and_device_config_changes_take_effect(lab, tmp_path):
    """rig02's own split (host vars) and a fleet-wide gpuMemoryFactor 3 -> 4, in one run. The split is the node
    ConfigMap's; the factor is the device ConfigMap's, which deviceshare loads once per process: device_plugin writes
    it, then the volcano role rolls the scheduler - a new process, its pods labelled with the hash of the ConfigMap as
    the cluster has it. Back to the defaults, the label follows again. (That a converged rerun rolls nothing is
    test_converge_then_nothing_to_change's check-mode run.)"""
    apps, core = client.AppsV1Api(lab["api"]), client.CoreV1Api(lab["api"])

    def scheduler():
        labels = apps.read_namespaced_deployment("volcano-scheduler", "volcano-system").spec.template.metadata.labels
        return labels.get("gpufleet.io/device-config"), children(lab)["vc-scheduler"]["pid"]

    def live_hash():
        return _volcano_config.config_hash(core.read_namespaced_config_map("volcano-vgpu-device-config",
                                                                           "kube-system").data)

    before = scheduler()
    try:
        rc, out, err = converge(lab, "-e", json.dumps({"device_plugin_gpu_memory_factor": 4}),
                                *rig02_split_3(tmp_path))
        assert rc == 0, (failed_messages(out), err[-2000:])
        assert (allocatable(lab, "rig01"), allocatable(lab, "rig02")) == ("10", "15")
        assert allocatable(lab, "rig01", "volcano.sh/vgpu-memory") == str(5 * (24564 // 4))
        after = scheduler()
        assert after[0] == live_hash() and after[0] != before[0] and after[1] != before[1], (before, after)
    finally:
        rc, out, err = converge(lab)
        assert rc == 0, failed_messages(out)
    assert [allocatable(lab, n) for n in GPU_NODES] == ["10", "10"]
    assert scheduler()[0] == live_hash() != after[0]


def test_admission_namespace_gets_volcano(lab):
    _converged(lab)
    core = client.CoreV1Api(lab["api"])
    pod = core.create_namespaced_pod("mljobs", {"metadata": {"name": "plain"}, "spec": {
        "containers": [{"name": "c", "image": "registry.invalid/none:1"}]}})
    try:
        assert pod.spec.scheduler_name == "volcano"
    finally:
        core.delete_namespaced_pod("plain", "mljobs")


def test_queue_settings_apply_and_a_matching_queue_is_left_alone(lab):
    """volcano_queues as a user changes them: a new weight and capability reach the Queue; a rerun sends it nothing,
    whatever its status holds (an apply of a Queue that matches reads as changed when Volcano's scheduler writes its
    status in between: the role applies only what differs)."""
    _converged(lab)
    queues = client.CustomObjectsApi(lab["api"])
    changed_to = json.dumps({"volcano_queues": [{"name": "ml", "weight": 3, "capability": {"cpu": 8}}]})
    try:
        rc, out, err = converge(lab, "--tags", "volcano_queues", "-e", changed_to)
        assert rc == 0 and changed(out) == 1, (failed_messages(out), err[-2000:])
        spec = queues.get_cluster_custom_object("scheduling.volcano.sh", "v1beta1", "queues", "ml")["spec"]
        assert (spec["weight"], str(spec["capability"]["cpu"])) == (3, "8"), spec
        queues.patch_cluster_custom_object_status("scheduling.volcano.sh", "v1beta1", "queues", "ml", {
            "status": {"allocated": {"cpu": "1"}}})
        rc, out, err = converge(lab, "--tags", "volcano_queues", "-e", changed_to)
        assert rc == 0 and changed(out) == 0, failed_messages(out)
        applied = task_results(out, "volcano : Queues")
        assert applied and applied[0].get("results") == [], applied
    finally:
        # Back to the inventory's queue, also after a failure above (its assertions then stay the ones reported).
        restored = converge(lab, "--tags", "volcano_queues")
    rc, out, err = restored
    # The capability the role set is removed by its apply.
    assert rc == 0 and changed(out) == 1, (failed_messages(out), err[-2000:])
    spec = queues.get_cluster_custom_object("scheduling.volcano.sh", "v1beta1", "queues", "ml")["spec"]
    assert spec["weight"] == 1 and "capability" not in spec, spec


def placements(lab, namespace, count):
    """Create `count` one-vGPU pods (4 CPUs each) one after another; return (node, GPU) of each."""
    core = client.CoreV1Api(lab["api"])
    placed = []
    for index in range(count):
        name = "p%d" % index
        spec = vgpu_pod_spec(1000)
        spec["containers"][0]["resources"]["requests"] = {"cpu": "4"}
        core.create_namespaced_pod(namespace, {"metadata": {"name": name}, "spec": spec})
        wait_for(lambda n=name: bool(core.read_namespaced_pod(n, namespace).spec.node_name), 60, "%s bound" % name)
        pod = core.read_namespaced_pod(name, namespace)
        placed.append((pod.spec.node_name, pod.metadata.annotations["volcano.sh/vgpu-ids-new"].split(",")[0]))
    return placed


def test_scheduler_configuration_in_effect(lab):
    """The deployed scheduler configuration is the one that schedules. deviceshare's SchedulePolicy picks the GPU
    and, weighted, orders the nodes (Volcano 1.15): binpack puts the second pod on the first pod's GPU, so on its
    node, against nodeorder's least-requested (4 CPUs per pod), which prefers the other node; spread scores every
    node with an unused GPU alike and leaves the order to least-requested, so the second pod goes to the other node.
    The binpack plugin is off in both: only the policy differs."""
    core = client.CoreV1Api(lab["api"])
    configs = {name: json.dumps({"volcano_binpack": {"weight": 0}, "volcano_deviceshare": {
        "vgpu_enable": True, "schedule_policy": name, "schedule_weight": 10}}) for name in ("binpack", "spread")}
    results = {}
    try:
        for name, extra in configs.items():
            # The scheduler's configuration is the volcano role's alone.
            rc, out, err = converge(lab, "--tags", "volcano", "-e", extra)
            assert rc == 0, (failed_messages(out), err[-2000:])
            namespace = "placement-%s" % name
            core.create_namespace({"metadata": {"name": namespace}})
            try:
                results[name] = placements(lab, namespace, 2)
            finally:
                core.delete_namespace(namespace)
                wait_for(lambda ns=namespace: not core.list_namespaced_pod(ns).items, 60, "pods of %s gone" % namespace)
    finally:
        converge(lab, "--tags", "volcano")
    first, second = results["binpack"]
    assert first == second, results                    # same node, same GPU
    first, second = results["spread"]
    assert first[0] != second[0], results              # the other node (so another GPU)


def test_plugins_before_1_12_get_one_daemonset_per_split(lab, tmp_path):
    """Plugin v1.11 ignores the node ConfigMap: the role deploys the article's workaround instead, one DaemonSet per
    split count on labelled nodes with the flags. The lab builds v1.12.0 only (the module proxy serves no other),
    so no v1.11 binary runs and the role's wait names the unregistered nodes; the rendering is what is checked."""
    apps = client.AppsV1Api(lab["api"])
    extra = json.dumps({"device_plugin_version": "v1.11.0", "device_plugin_wait_timeout": 10})
    try:
        rc, out, err = converge(lab, "-e", extra, *rig02_split_3(tmp_path))
        assert rc != 0
        assert any("volcano.sh/vgpu-number" in m for m in failed_messages(out)), failed_messages(out)
        ours = {d.metadata.name: d for d in apps.list_namespaced_daemon_set(
            "kube-system", label_selector="gpufleet.io/component=device-plugin").items}
        assert sorted(ours) == ["volcano-device-plugin-split-2", "volcano-device-plugin-split-3"]
        for split in (2, 3):
            spec = ours["volcano-device-plugin-split-%d" % split].spec.template.spec
            assert spec.node_selector["gpufleet.io/vgpu-split"] == str(split)
            assert "--device-split-count=%d" % split in spec.containers[0].args
            assert spec.containers[0].image.endswith(":v1.11.0")
    finally:
        rc, out, err = converge(lab)
        assert rc == 0, failed_messages(out)
    assert [d.metadata.name for d in apps.list_namespaced_daemon_set(
        "kube-system", label_selector="gpufleet.io/component=device-plugin").items] == ["volcano-device-plugin"]
    assert [allocatable(lab, n) for n in GPU_NODES] == ["10", "10"]


def helm_revisions(lab, release="volcano", namespace="volcano-system"):
    """{revision: status} of a Helm release, from the Secrets Helm keeps it in."""
    secrets = client.CoreV1Api(lab["api"]).list_namespaced_secret(
        namespace, label_selector="owner=helm,name=%s" % release).items
    return {int(s.metadata.labels["version"]): s.metadata.labels["status"] for s in secrets}


def test_failed_volcano_upgrade_rolls_back(lab):
    """An upgrade that fails half-way (the API server refuses the scheduler Deployment after the chart's ConfigMap
    was updated) is rolled back: the release is deployed again and the scheduler keeps its configuration."""
    _converged(lab)
    core = client.CoreV1Api(lab["api"])
    conf_before = core.read_namespaced_config_map("volcano-scheduler-configmap", "volcano-system").data
    last = max(helm_revisions(lab))
    broken = json.dumps({"volcano_chart_values": {"custom": {"scheduler_replicas": -1}},
                         "volcano_deviceshare": {"vgpu_enable": True, "schedule_policy": "spread"},
                         "volcano_wait_timeout": 60})
    try:
        rc, out, err = converge(lab, "--tags", "volcano", "-e", broken)
        assert rc != 0
        revisions = helm_revisions(lab)
        assert revisions[max(revisions)] == "deployed" and max(revisions) > last + 1, revisions
        assert "failed" in [revisions[r] for r in revisions if r > last], revisions
        assert core.read_namespaced_config_map("volcano-scheduler-configmap", "volcano-system").data == conf_before
    finally:
        # Only the volcano role ran with other settings: it alone is put back.
        rc, out, err = converge(lab, "--tags", "volcano")
        assert rc == 0, failed_messages(out)


def test_another_gpu_device_plugin_is_refused_unless_removal_is_asked_for(lab):
    """NVIDIA's device plugin as a Helm release installs it: refused, naming the release and how to remove it; the
    opt-in for unowned plugins still leaves an owned one alone; once nothing manages it, that opt-in removes it."""
    apps = client.AppsV1Api(lab["api"])
    labels = {"app.kubernetes.io/name": "nvidia-device-plugin"}
    apps.create_namespaced_daemon_set("kube-system", {
        "metadata": {"name": "nvdp", "labels": dict(labels, **{"app.kubernetes.io/managed-by": "Helm"}),
                     "annotations": {"meta.helm.sh/release-name": "nvdp",
                                     "meta.helm.sh/release-namespace": "kube-system"}},
        "spec": {"selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": {
            "nodeSelector": {"gpufleet.io/no-such-node": "true"},
            "containers": [{"name": "plugin", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"}]}}}})
    try:
        for action in ("refuse", "remove-unowned"):
            rc, out, err = converge(lab, "--tags", "device_plugin", "-e", "device_plugin_conflicting_action=" + action)
            messages = " ".join(failed_messages(out))
            assert rc != 0 and "kube-system/nvdp (image nvcr.io/nvidia/k8s-device-plugin:v0.17.0" in messages, messages
            assert "managed by Helm release nvdp (namespace kube-system)" in messages
            assert "helm uninstall nvdp -n kube-system" in messages
            assert apps.read_namespaced_daemon_set("nvdp", "kube-system").metadata.name == "nvdp"
        apps.patch_namespaced_daemon_set("nvdp", "kube-system", [
            {"op": "remove", "path": "/metadata/annotations"},
            {"op": "remove", "path": "/metadata/labels/app.kubernetes.io~1managed-by"}])
        rc, out, err = converge(lab, "--tags", "device_plugin", "-e", "device_plugin_conflicting_action=refuse")
        assert rc != 0 and "applied by hand" in " ".join(failed_messages(out))
        rc, out, err = converge(lab, "--tags", "device_plugin", "-e", "device_plugin_conflicting_action=remove-unowned")
        assert rc == 0, failed_messages(out)
        assert "nvdp" not in [d.metadata.name for d in apps.list_namespaced_daemon_set("kube-system").items]
    finally:
        try:
            apps.delete_namespaced_daemon_set("nvdp", "kube-system")
        except client.exceptions.ApiException as exc:
            if exc.status != 404:
                raise


def _cordon(lab, steps, node="rig01"):
    rc, out, err = run_playbook(ROOT / "tests" / "lab" / "playbooks" / "cordon.yml", "-e", "steps=%s node=%s" % (steps, node),
                                env=lab["env"], inventory=INVENTORY)
    assert rc == 0, (failed_messages(out), err[-2000:])
    return out


def _node(lab, name="rig01"):
    node = client.CoreV1Api(lab["api"]).read_node(name)
    return bool(node.spec.unschedulable), (node.metadata.annotations or {}).get("gpufleet.vgpu/cordoned-by")


def test_a_reboot_uncordons_only_what_it_cordoned(lab):
    core = client.CoreV1Api(lab["api"])
    try:
        # Cordoned and uncordoned by the same run: schedulable again, no mark left.
        _cordon(lab, "drain")
        assert _node(lab) == (True, "nvidia_driver")
        _cordon(lab, "uncordon")  # a later run: the mark says gpufleet cordoned it
        assert _node(lab) == (False, None)
        # An operator's cordon: drained for the reboot, but left cordoned.
        core.patch_node("rig01", {"spec": {"unschedulable": True}})
        _cordon(lab, "drain,uncordon")
        assert _node(lab) == (True, None)
        # No mark, no cordon: the uncordon step touches nothing.
        core.patch_node("rig01", {"spec": {"unschedulable": False}})
        out = _cordon(lab, "uncordon")
        assert _node(lab) == (False, None)
        assert out["stats"]["rig01"]["changed"] == 0 and out["stats"].get("localhost", {}).get("changed", 0) == 0
    finally:
        core.patch_node("rig01", {"spec": {"unschedulable": False},
                                  "metadata": {"annotations": {"gpufleet.vgpu/cordoned-by": None}}})


def _refusal(core, name, spec):
    """The API server's message refusing the pod, or an AssertionError when it was admitted."""
    try:
        core.create_namespaced_pod("mljobs", {"metadata": {"name": name}, "spec": spec})
    except client.ApiException as exc:
        return json.loads(exc.body)["message"]
    core.delete_namespaced_pod(name, "mljobs")
    raise AssertionError("pod %s was admitted" % name)


def plan_sources(out):
    """{node: where the device_plugin role's plan took its GPU sizes from} of a run's json output."""
    return next(result["sources"] for play in out["plays"] for task in play["tasks"]
                if task["task"]["name"].endswith("Check the settings and plan (the same check as the preflight's)")
                for result in task["hosts"].values() if "sources" in result)


def test_vgpu_memory_no_card_has_is_refused_at_admission(lab):
    """The policy the role renders from the fleet's GPUs, evaluated by the lab's real API server: a whole RTX 4090
    (8188 units of 3 MiB) is admitted, one unit more is refused with the unit and the largest card explained. The
    lab's inventory sizes its card groups as inventories/example does (each card at least 24000 or 16000 MiB): a
    cluster-only run (cluster.yml, and site.yml --tags cluster) takes the cards' real memory from what the plugin
    registered, never the minimums - the registration wait and the policy compare with 24564 MiB, not 24000."""
    _converged(lab)  # the plugin deployed and registered (a first deployment plans with the minimums)
    rc, out, err = converge(lab)
    assert rc == 0, (failed_messages(out), err[-2000:])
    assert plan_sources(out) == {"rig01": "registration", "rig02": "registration"}
    rc, out, err = run_playbook(ROOT / "playbooks" / "site.yml", "--tags", "cluster", env=lab["env"],
                                inventory=INVENTORY)
    assert rc == 0, (failed_messages(out), err[-2000:])
    assert plan_sources(out) == {"rig01": "registration", "rig02": "registration"}
    assert out["stats"]["localhost"]["changed"] == 0, out["stats"]
    core = client.CoreV1Api(lab["api"])
    pod = core.create_namespaced_pod("mljobs", {"metadata": {"name": "whole-4090"}, "spec": vgpu_pod_spec(8188)})
    core.delete_namespaced_pod(pod.metadata.name, "mljobs")
    message = _refusal(core, "too-big", vgpu_pod_spec(8189))
    for fragment in ("asks for 8189 units", "units of 3 MiB", "NVIDIA GeForce RTX 4090 on rig01 with 24564 MiB = 8188",
                     "at most 8188"):
        assert fragment in message, (fragment, message)
    # An init container counts too.
    spec = vgpu_pod_spec(100)
    spec["initContainers"] = [dict(spec["containers"][0], name="prep",
                                   resources={"limits": {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "9000"}})]
    assert "asks for 9000 units" in _refusal(core, "big-init", spec)


def _two_vgpu_containers():
    """HAMi's multi-container example as volcano-vgpu-device-plugin users write it (plugin #77, #84): two containers,
    each with 2 vGPUs and its own memory."""
    spec = vgpu_pod_spec()
    spec["containers"] = [
        {"name": "ubuntu-container", "image": "registry.invalid/ubuntu:18.04", "resources": {"limits": {
            "volcano.sh/vgpu-number": "2", "volcano.sh/vgpu-memory": "2000"}}},
        {"name": "ubuntu-container0", "image": "registry.invalid/ubuntu:18.04", "resources": {"limits": {
            "volcano.sh/vgpu-number": "2", "volcano.sh/vgpu-memory": "3000"}}}]
    return spec


def _warnings(core, name, spec, namespace="mljobs"):
    """The API server's Warning headers on creating the pod (admitted; deleted again)."""
    response = core.create_namespaced_pod(namespace, {"metadata": {"name": name}, "spec": spec},
                                          _preload_content=False)
    core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
    return response.headers.get("Warning", "")


def test_pod_shapes_that_cannot_run_are_refused_saying_what_to_write(lab):
    """The upstream issues' manifests against the role's policy on the real API server: each refused with the field
    and the way out; the multi-container example is first shown failing at the kubelet (the real plugin's Allocate),
    with the policy's binding removed for that one pod."""
    _converged(lab)
    core = client.CoreV1Api(lab["api"])
    policies = client.AdmissionregistrationV1Api(lab["api"])
    # Why the multi-container shape is refused: admitted, it is bound and then failed by the node.
    binding = policies.read_validating_admission_policy_binding("gpufleet-vgpu-memory")
    policies.delete_validating_admission_policy_binding("gpufleet-vgpu-memory")
    try:
        def admitted():
            try:
                core.create_namespaced_pod("mljobs", {"metadata": {"name": "two-containers"},
                                                      "spec": _two_vgpu_containers()})
                return True
            except client.ApiException as exc:
                return exc.body[:200]
        wait_for(admitted, 30, "the pod admitted without the binding")
        wait_for(lambda: core.read_namespaced_pod("two-containers", "mljobs").status.phase == "Failed"
                 or core.read_namespaced_pod("two-containers", "mljobs").status.phase, 60, "the pod failed")
        pod = core.read_namespaced_pod("two-containers", "mljobs")
        assert pod.status.reason == "UnexpectedAdmissionError" and "cannot get valid pod" in pod.status.message, \
            pod.status
        core.delete_namespaced_pod("two-containers", "mljobs", grace_period_seconds=0)
    finally:
        policies.create_validating_admission_policy_binding(
            {"metadata": {"name": "gpufleet-vgpu-memory", "labels": binding.metadata.labels},
             "spec": binding.spec})
    wait_for(lambda: "ask for vGPUs" in _refusal_or_none(core, "two-containers", _two_vgpu_containers()), 30,
             "the policy in effect again")
    message = _refusal(core, "two-containers", _two_vgpu_containers())
    assert "containers ubuntu-container, ubuntu-container0 ask for vGPUs" in message and "one container" in message

    # A sidecar without vGPUs beside the one vGPU container is a shape that runs: admitted.
    spec = vgpu_pod_spec(1000)
    spec["containers"].append({"name": "sidecar", "image": "registry.invalid/sidecar:1"})
    assert "gpuMemoryFactor" not in _warnings(core, "with-sidecar", spec)

    # volcano#3089: the percentage resource.
    spec = vgpu_pod_spec()
    spec["containers"][0]["resources"] = {"limits": {"volcano.sh/vgpu-number": "1",
                                                     "volcano.sh/vgpu-memory-percentage": "50"}}
    message = _refusal(core, "percentage", spec)
    assert "container cuda asks for volcano.sh/vgpu-memory-percentage" in message and \
        "write volcano.sh/vgpu-memory: 4094" in message, message
    # volcano#4505: more vGPUs in one container than a node has GPUs (rig01 and rig02 have 5 each).
    spec = vgpu_pod_spec(100)
    spec["containers"][0]["resources"]["limits"]["volcano.sh/vgpu-number"] = "6"
    message = _refusal(core, "six", spec)
    assert "container cuda asks for 6 volcano.sh/vgpu-number: each vGPU" in message and "at most 5 per container" in message, \
        message
    # plugin #93, #142: a vGPU pod the default scheduler would place (in a namespace Volcano does not take over).
    try:
        core.create_namespaced_pod("default", {"metadata": {"name": "default-scheduled"},
                                               "spec": vgpu_pod_spec(scheduler_name=None)})
    except client.ApiException as exc:
        message = json.loads(exc.body)["message"]
    else:
        core.delete_namespaced_pod("default-scheduled", "default")
        raise AssertionError("a vGPU pod for default-scheduler was admitted")
    assert "spec.schedulerName is default-scheduler" in message and "Set spec.schedulerName: volcano" in message
    # Volcano's example job pod asking for nvidia.com/gpu, which no node of the lab offers.
    spec = {"schedulerName": "volcano", "containers": [{"name": "tensorflow", "image": "registry.invalid/tf:1",
                                                        "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    message = _refusal(core, "whole-gpu", spec)
    assert "container tensorflow asks for nvidia.com/gpu" in message and \
        "ask for volcano.sh/vgpu-number: 1" in message, message
    # An init container with vGPUs (within a card's memory).
    spec = vgpu_pod_spec(100)
    spec["initContainers"] = [dict(spec["containers"][0], name="prep")]
    assert "init container prep asks for vGPUs" in _refusal(core, "init", spec)
    # plugin #18, HAMi #2187: 1024 written as MiB is admitted with a warning saying what it is here.
    warning = _warnings(core, "mib-like", vgpu_pod_spec(1024))
    assert "volcano.sh/vgpu-memory: 1024 counts units of 3 MiB" in warning and "means 3072 MiB" in warning and \
        "ask for 341" in warning, warning
    assert _warnings(core, "units", vgpu_pod_spec(2729)) == ""


def _refusal_or_none(core, name, spec):
    try:
        return _refusal(core, name, spec)
    except AssertionError:
        return ""


class Deployments:
    """One-vGPU Deployments in a namespace of their own, as the article writes them."""

    def __init__(self, lab, namespace):
        self.apps, self.core, self.namespace = client.AppsV1Api(lab["api"]), client.CoreV1Api(lab["api"]), namespace
        self.core.create_namespace({"metadata": {"name": namespace}})

    def create(self, name, replicas, limits, node=None):
        spec = vgpu_pod_spec()
        spec["containers"][0]["resources"] = {"limits": dict(limits)}
        if node:
            spec["nodeSelector"] = {"kubernetes.io/hostname": node}
        self.apps.create_namespaced_deployment(self.namespace, {
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}})

    def pods(self, name):
        return self.core.list_namespaced_pod(self.namespace, label_selector="app=%s" % name).items

    def settle(self, name, running, pending, timeout=120):
        """Wait until exactly `running` pods run and `pending` wait, then hold that for 10 s (nothing more binds)."""
        def counts():
            phases = [p.status.phase for p in self.pods(name)]
            return (phases.count("Running"), phases.count("Pending"))
        wait_for(lambda: counts() == (running, pending) or counts(), timeout, "%d Running, %d Pending" % (running, pending))
        time.sleep(5)
        assert counts() == (running, pending)
        return self.pods(name)

    def delete(self):
        self.core.delete_namespace(self.namespace)


def _memory_on_cards(pods):
    """{node: [memory units of each vGPU]} from the allocations Volcano wrote on the running pods."""
    cards = {}
    for pod in pods:
        if pod.status.phase == "Running":
            for device in parse_pod_devices(pod.metadata.annotations["volcano.sh/vgpu-ids-new"]):
                cards.setdefault(pod.spec.node_name, []).append(device["memory_units"])
    return cards


def _converged(lab):
    """cluster.yml's defaults in place: converge only where an earlier test (or none) left the lab otherwise - every
    GPU node registered by the plugin and no default-memory policy (each converge of cluster.yml costs ~40 s)."""
    policies = client.CustomObjectsApi(lab["api"]).list_cluster_custom_object(
        "admissionregistration.k8s.io", "v1beta1", "mutatingadmissionpolicies")["items"]
    if policies or [allocatable(lab, node) for node in GPU_NODES] != ["10", "10"] \
            or allocatable(lab, "rig01", "volcano.sh/vgpu-memory") != str(5 * 8188):
        rc, out, err = converge(lab)
        assert rc == 0, (failed_messages(out), err[-2000:])


def test_a_gang_spreads_over_cards_only_when_it_asks(lab):
    """Volcano 1.15's vGPU spread policy (volcano#5049), as a user writes it on the pod template: with the role's
    binpack default two members of one gang share a card (volcano#5097: 70 % slower allreduce); with
    `volcano.sh/vgpu-podgroup-policy: spread` they land on two cards."""
    _converged(lab)
    core, objects = client.CoreV1Api(lab["api"]), client.CustomObjectsApi(lab["api"])
    core.create_namespace({"metadata": {"name": "spread"}})

    def cards(job, annotations):
        spec = dict(vgpu_pod_spec(1000, scheduler_name=None), nodeSelector={"kubernetes.io/hostname": "rig02"})
        objects.create_namespaced_custom_object("batch.volcano.sh", "v1alpha1", "spread", "jobs", {
            "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": job},
            "spec": {"minAvailable": 2, "schedulerName": "volcano", "queue": "default", "tasks": [
                {"name": "worker", "replicas": 2, "template": {"metadata": {"annotations": annotations},
                                                               "spec": spec}}]}})

        def running():
            pods = core.list_namespaced_pod("spread", label_selector="volcano.sh/job-name=" + job).items
            return [p.status.phase for p in pods] == ["Running"] * 2 or [p.status.phase for p in pods]
        wait_for(running, 90, "both members of %s Running" % job)
        pods = core.list_namespaced_pod("spread", label_selector="volcano.sh/job-name=" + job).items
        found = sorted(d["uuid"] for p in pods for d in parse_pod_devices(p.metadata.annotations["volcano.sh/vgpu-ids-new"]))
        objects.delete_namespaced_custom_object("batch.volcano.sh", "v1alpha1", "spread", "jobs", job)
        wait_for(lambda: not core.list_namespaced_pod("spread", label_selector="volcano.sh/job-name=" + job).items,
                 60, "%s's pods gone" % job)
        return found
    try:
        packed = cards("packed", {})
        assert len(packed) == 2 and len(set(packed)) == 1, packed
        spread = cards("spread", {"volcano.sh/vgpu-podgroup-policy": "spread"})
        assert len(spread) == 2 and len(set(spread)) == 2, spread
    finally:
        core.delete_namespace("spread")


def test_the_articles_deployment_means_what_the_readme_says(lab):
    """`vgpu-memory: 8188` ("about 8 GB" in the article) counts units of 3 MiB on this fleet: 24564 MiB, a whole RTX
    4090. As roles/device_plugin/README.md promises: 10 and 20 replicas both give one pod per 4090 (rig01's five),
    none on a 4070 Super (5458 units), the rest Pending with Volcano's reason; the article's 8 GB written in units
    (2729 = 8187 MiB) runs all 20, as in the article."""
    _converged(lab)
    article = Deployments(lab, "vgpu-article")
    try:
        article.create("as-written", 10, {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "8188"})
        pods = article.settle("as-written", 5, 5)
        assert _memory_on_cards(pods) == {"rig01": [8188] * 5}
        waiting = [p for p in pods if p.status.phase == "Pending"]
        reasons = {c.message for p in waiting for c in p.status.conditions or [] if c.type == "PodScheduled"}
        assert reasons and all(reasons), [p.status for p in waiting]
        article.apps.patch_namespaced_deployment_scale("as-written", article.namespace, {"spec": {"replicas": 20}})
        article.settle("as-written", 5, 15)
        article.apps.delete_namespaced_deployment("as-written", article.namespace)
        wait_for(lambda: not article.pods("as-written") or len(article.pods("as-written")), 60, "pods gone")
        article.create("in-units", 20, {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "2729"})
        pods = article.settle("in-units", 20, 0)
        assert {node: sorted(units) for node, units in _memory_on_cards(pods).items()} == {
            "rig01": [2729] * 10, "rig02": [2729] * 10}
    finally:
        article.delete()


def test_vgpu_requests_without_memory_get_what_the_policy_says(lab):
    """whole-card (the default, Volcano's rule): on rig02's 10 vGPUs only 5 memory-less pods run, each holding a whole
    4070 Super (5458 units). even-share: the role's MutatingAdmissionPolicy, on the lab's real API server, gives each
    2729 units (the smallest card / its split), and all 10 run beside each other; back to whole-card, the policy is
    removed. A percentage request is no way out: no node has that resource, and admission refuses it."""
    _converged(lab)
    number_only = {"volcano.sh/vgpu-number": "1"}
    trial = Deployments(lab, "vgpu-default-memory")
    try:
        trial.create("whole", 6, number_only, node="rig02")
        assert _memory_on_cards(trial.settle("whole", 5, 1)) == {"rig02": [5458] * 5}
        trial.apps.delete_namespaced_deployment("whole", trial.namespace)
        wait_for(lambda: not trial.pods("whole") or len(trial.pods("whole")), 60, "pods gone")

        # The percentage resource is refused at admission (no node offers it: such a pod stayed Pending).
        spec = vgpu_pod_spec()
        spec["containers"][0]["resources"] = {"limits": dict(number_only, **{"volcano.sh/vgpu-memory-percentage": "50"})}
        assert "no node of this fleet offers it" in _refusal(trial.core, "percentage", spec)

        # Only the role that changes (--tags device_plugin): Volcano's release stays as the defaults left it.
        rc, out, err = converge(lab, "--tags", "device_plugin", "-e", "device_plugin_default_memory=even-share")
        assert rc == 0, (failed_messages(out), err[-2000:])
        trial.create("shared", 11, number_only, node="rig02")
        pods = trial.settle("shared", 10, 1)
        assert _memory_on_cards(pods) == {"rig02": [2729] * 10}
        limits = pods[0].spec.containers[0].resources
        assert limits.limits["volcano.sh/vgpu-memory"] == limits.requests["volcano.sh/vgpu-memory"] == "2729"
        config = trial.core.read_namespaced_config_map("volcano-vgpu-device-config", "kube-system")
        assert config.metadata.annotations["gpufleet.io/vgpu-default-memory"].startswith("2729 units = 8187 MiB")
    finally:
        trial.delete()
        rc, out, err = converge(lab, "--tags", "device_plugin")
        assert rc == 0, (failed_messages(out), err[-2000:])
    policies = client.CustomObjectsApi(lab["api"]).list_cluster_custom_object(
        "admissionregistration.k8s.io", "v1beta1", "mutatingadmissionpolicies")
    assert not policies["items"], policies["items"]


def test_a_quiet_plugins_nodes_are_seen_after_a_scheduler_rollout(lab):
    """The plugin after v1.12.0 writes its Node only when its registration changed (the lab's stand-in with
    plugin-register=on-change, on a kwok twin of rig01 without a host). After a rollout of the scheduler nothing
    changes such a node, and Volcano 1.15.1 would place vGPU pods there without a device: the volcano role marks it
    for the new scheduler, which then allocates devices on it. The control: a rollout without the role leaves the
    node unseen, and the pod is bound without a device."""
    _converged(lab)
    core, apps = client.CoreV1Api(lab["api"]), client.AppsV1Api(lab["api"])
    twin = "rig03-quiet"
    capacity = {"cpu": "32", "memory": "256Gi", "pods": "110"}
    gpus = {"count": 2, "model": "NVIDIA GeForce RTX 4090", "memory_mib": 24564}
    # Quiet before the twin exists: a stand-in still periodic when the twin appears registers it with a handshake.
    subprocess.run(LAB + ["set", "plugin-register=on-change"], env=lab["env"], check=True)
    core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": twin, "labels": {"gpufleet.io/gpu": "true", "kubernetes.io/hostname": twin, "type": "kwok"},
        "annotations": {"kwok.x-k8s.io/node": "fake", "lab.gpufleet.io/gpus": json.dumps(gpus)}}})
    core.patch_node_status(twin, {"status": {"capacity": capacity, "allocatable": capacity}})
    core.create_namespace({"metadata": {"name": "quiet"}})

    def placed(name):
        spec = dict(vgpu_pod_spec(1000), nodeSelector={"kubernetes.io/hostname": twin})
        core.create_namespaced_pod("quiet", {"metadata": {"name": name}, "spec": spec})
        wait_for(lambda: bool(core.read_namespaced_pod(name, "quiet").spec.node_name), 60, "%s bound" % name)
        return (core.read_namespaced_pod(name, "quiet").metadata.annotations or {}).get("volcano.sh/vgpu-ids-new")

    try:
        wait_for(lambda: allocatable(lab, twin) == "4" or allocatable(lab, twin), 90, "the twin registered")
        handshake = core.read_node(twin).metadata.annotations.get("volcano.sh/node-vgpu-handshake")
        assert handshake is None, handshake          # a quiet plugin: no handshake, nothing every 30 s
        # Control: the scheduler rolled without the role (its pod template changed) never sees the twin's vGPUs.
        apps.patch_namespaced_deployment("volcano-scheduler", "volcano-system", {"spec": {"template": {"metadata": {
            "annotations": {"test.gpufleet.io/roll": str(time.time())}}}}})
        before = children(lab)["vc-scheduler"]["pid"]
        wait_for(lambda: children(lab)["vc-scheduler"]["pid"] not in (None, before), 90, "the scheduler restarted")
        time.sleep(15)  # past its first session: deviceshare has enabled vGPUs, and the twin did not change since
        assert placed("unseen") is None
        # The role's rollout (a changed scheduler setting) marks the twin for the new scheduler.
        rc, out, err = converge(lab, "--tags", "volcano", "-e", json.dumps({"volcano_deviceshare": {
            "vgpu_enable": True, "schedule_policy": "spread", "schedule_weight": 10}}))
        assert rc == 0, (failed_messages(out), err[-2000:])
        started = core.list_namespaced_pod("volcano-system", label_selector="app=volcano-scheduler").items
        marks = {p.status.container_statuses[0].state.running.started_at for p in started
                 if p.status.phase == "Running" and p.metadata.deletion_timestamp is None}
        mark = core.read_node(twin).metadata.annotations.get("gpufleet.io/vgpu-scheduler-resync")
        assert mark and mark.replace("Z", "+00:00") in {m.isoformat() for m in marks}, (mark, marks)
        assert placed("seen"), "the pod on the marked twin was bound without a device"
    finally:
        subprocess.run(LAB + ["set", "plugin-register=periodic"], env=lab["env"], check=True)
        core.delete_namespace("quiet")
        core.delete_node(twin)
        converge(lab, "--tags", "volcano")


def test_kubeflow_training_operator_gangs_with_volcano_as_its_release_manifests_run_it(lab):
    """training-operator's release manifest (v1.7 and later) starts the manager with `command: [/manager]` and no
    args, where appending to args used to fail; older ones have args. The flag is added either way, once (a dry run
    reports the change and makes none; a rerun changes nothing), and another gang scheduler already set is left as
    it is and reported."""
    apps, core, namespace = client.AppsV1Api(lab["api"]), client.CoreV1Api(lab["api"]), "gpufleet-kubeflow-test"
    core.create_namespace({"metadata": {"name": namespace}})

    def operator(name, container):
        labels = {"control-plane": name}
        apps.create_namespaced_deployment(namespace, {"metadata": {"name": name}, "spec": {
            "replicas": 0, "selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": {
                "containers": [dict({"name": "training-operator", "image": "kubeflow/training-operator:v1-855e096"},
                                    **container)]}}}})

    def run(name, *args):
        rc, out, err = run_playbook(ROOT / "tests" / "lab" / "playbooks" / "kubeflow.yml", "-e",
                                    "device_plugin_kubeflow_namespace=%s device_plugin_kubeflow_deployment=%s"
                                    % (namespace, name), *args, env=lab["env"], inventory=INVENTORY)
        assert rc == 0, (failed_messages(out), err[-2000:])
        return out

    def manager(name):
        return apps.read_namespaced_deployment(name, namespace).spec.template.spec.containers[0]

    try:
        operator("release", {"command": ["/manager"]})
        operator("older", {"args": ["--monitoring-port=8443"]})
        operator("plugins", {"command": ["/manager"], "args": ["--gang-scheduler-name=scheduler-plugins"]})
        # A dry run reports the change it would make and makes none.
        assert changed(run("release", "--check")) == 1 and manager("release").args is None
        assert changed(run("release")) == 1
        assert (manager("release").command, manager("release").args) == (["/manager"], ["--gang-scheduler-name=volcano"])
        assert changed(run("release")) == 0
        assert changed(run("older")) == 1
        assert manager("older").args == ["--monitoring-port=8443", "--gang-scheduler-name=volcano"]
        out = run("plugins")
        assert changed(out) == 0 and manager("plugins").args == ["--gang-scheduler-name=scheduler-plugins"]
        assert "runs with --gang-scheduler-name=scheduler-plugins, left as it is" in json.dumps(out)
        assert "Kubeflow Trainer runtimes" not in json.dumps(out)  # no Trainer API served: nothing said

        # Kubeflow Trainer v2: no flag; each runtime's spec.podGroupPolicy (trainer.kubeflow.org/v1alpha1, its API
        # types). The CRDs here carry Trainer's group, version, kinds and scopes with an open schema.
        trainer_crds(lab, create=True)
        objects = client.CustomObjectsApi(lab["api"])
        for name, policy in (("torch-distributed", {"volcano": {}}), ("deepspeed", {"coscheduling": {}}),
                             ("mlx", None)):
            spec = dict({"mlPolicy": {"numNodes": 2}}, **({"podGroupPolicy": policy} if policy else {}))
            objects.create_cluster_custom_object("trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes", {
                "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
                "metadata": {"name": name}, "spec": spec})
        objects.create_namespaced_custom_object("trainer.kubeflow.org", "v1alpha1", namespace, "trainingruntimes", {
            "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime", "metadata": {"name": "mine"},
            "spec": {"mlPolicy": {"numNodes": 2}}})
        out = run("release")
        assert changed(out) == 0
        assert ("Kubeflow Trainer runtimes whose TrainJobs Volcano does not gang-schedule: deepspeed (coscheduling), "
                "%s/mine, mlx." % namespace) in json.dumps(out), json.dumps(out)[-3000:]
        assert "Runtimes that do: torch-distributed." in json.dumps(out)
    finally:
        trainer_crds(lab, create=False)
        core.delete_namespace(namespace)


def trainer_crds(lab, create):
    """Kubeflow Trainer's two runtime CRDs (group, version, kinds and scopes as Trainer serves them), created and
    served, or deleted."""
    extensions = client.ApiextensionsV1Api(lab["api"])
    kinds = (("ClusterTrainingRuntime", "clustertrainingruntimes", "Cluster"),
             ("TrainingRuntime", "trainingruntimes", "Namespaced"))
    for kind, plural, scope in kinds:
        name = plural + ".trainer.kubeflow.org"
        if not create:
            try:
                extensions.delete_custom_resource_definition(name)
            except client.ApiException as exc:
                if exc.status != 404:
                    raise
            continue
        extensions.create_custom_resource_definition({
            "metadata": {"name": name},
            "spec": {"group": "trainer.kubeflow.org", "scope": scope,
                     "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": kind + "List"},
                     "versions": [{"name": "v1alpha1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                         "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}})
    if create:
        def served():
            conditions = [c.type for kind, plural, scope in kinds for c in
                          extensions.read_custom_resource_definition(plural + ".trainer.kubeflow.org").status.conditions
                          or [] if c.status == "True"]
            return conditions.count("Established") == 2 or conditions
        wait_for(served, 30, "Trainer's CRDs established")


CDI_KIND = "k8s.device-plugin.nvidia.com/gpu"


def test_cdi_mode_hands_the_gpus_to_pods_as_cdi_devices(lab):
    """container_runtime_cdi on the GPU hosts: cluster.yml creates the nvidia RuntimeClass and runs the real plugin
    under it with DEVICE_LIST_STRATEGY=cdi-cri. The plugin writes its CDI spec of the node's GPUs into the host's
    /var/run/cdi (NVIDIA's nvcdi, finding the driver's files under the host's root, mounted at /driver-root), and
    its Allocate response reaches kubelet's device manager as CDI devices of that spec, with the vGPU's memory limit
    and no NVIDIA_VISIBLE_DEVICES. Back out of the mode, the stock DaemonSet registers the nodes again."""
    apps, core = client.AppsV1Api(lab["api"]), client.CoreV1Api(lab["api"])
    node_api = client.NodeV1Api(lab["api"])
    rc, out, err = converge(lab, "-e", json.dumps({"container_runtime_cdi": True}))
    try:
        assert rc == 0, (failed_messages(out), err[-2000:])
        assert node_api.read_runtime_class("nvidia").handler == "nvidia"
        template = apps.read_namespaced_daemon_set("volcano-device-plugin", "kube-system").spec.template.spec
        assert template.runtime_class_name == "nvidia"
        env = {e.name: e.value for e in template.containers[0].env}
        assert env["DEVICE_LIST_STRATEGY"] == "cdi-cri"
        # The role waited for the registration: the nodes registered through the CDI-mode plugin.
        for node in GPU_NODES:
            assert allocatable(lab, node) == "10"
        host = json.loads((lab["dir"] / "lab.json").read_text())["hosts"]["rig01"]
        spec = json.loads(subprocess.run(
            ["podman", "exec", host, "cat", "/var/run/cdi/k8s.device-plugin.nvidia.com-gpu.json"],
            capture_output=True, text=True, check=True).stdout)
        assert spec["kind"] == CDI_KIND
        # The hooks the runtime runs on the host name the host's nvidia-ctk.
        assert {hook["path"] for hook in spec["containerEdits"]["hooks"]} == {"/usr/bin/nvidia-ctk"}
        uuids = {device["name"] for device in spec["devices"]}
        assert len(uuids) == 5
        core.create_namespace({"metadata": {"name": "vgpu-cdi"}})
        spec_pod = dict(vgpu_pod_spec(), nodeSelector={"kubernetes.io/hostname": "rig01"})
        core.create_namespaced_pod("vgpu-cdi", {"metadata": {"name": "p"}, "spec": spec_pod})
        wait_for(lambda: core.read_namespaced_pod("p", "vgpu-cdi").status.phase == "Running", 60, "vGPU pod Running")
        annotations = core.read_namespaced_pod("p", "vgpu-cdi").metadata.annotations
        uuid = annotations["volcano.sh/vgpu-ids-new"].split(",")[0]
        assert uuid in uuids
        options = json.loads(annotations["lab.gpufleet.io/device-run-options"])["cuda"]
        assert options["cdiDevices"] == ["%s=%s" % (CDI_KIND, uuid)]
        assert "NVIDIA_VISIBLE_DEVICES" not in options["envs"]
        assert options["envs"]["CUDA_DEVICE_MEMORY_LIMIT_0"] == "6000m"
    finally:
        if "vgpu-cdi" in [ns.metadata.name for ns in core.list_namespace().items]:
            core.delete_namespace("vgpu-cdi")
            wait_for(lambda: "vgpu-cdi" not in [ns.metadata.name for ns in core.list_namespace().items], 120,
                     "namespace vgpu-cdi removed")
        rc, out, err = converge(lab)
        assert rc == 0, (failed_messages(out), err[-2000:])
    template = apps.read_namespaced_daemon_set("volcano-device-plugin", "kube-system").spec.template.spec
    assert template.runtime_class_name is None
    for node in GPU_NODES:
        assert allocatable(lab, node) == "10"
