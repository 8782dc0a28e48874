"""End to end: the local lab's real control plane, Volcano and the emulated vGPU device plugin."""

import json
import time

from kubernetes import client

from labkit import GPU_NODES, nodes_file, vgpu_pod_spec, wait_for


def test_nodes_from_the_inventory(lab):
    nodes = {n.metadata.name: n for n in client.CoreV1Api(lab["api"]).list_node().items}
    wanted = nodes_file()
    assert sorted(nodes) == sorted(n["name"] for n in wanted)
    for name in ("master0", "master1", "master2"):
        assert any(t.key == "node-role.kubernetes.io/control-plane" for t in nodes[name].spec.taints)
    assert nodes["rig01"].metadata.labels["gpufleet.io/gpu-model"] == "rtx4090"
    assert nodes["rig01"].status.allocatable["cpu"] == "32"
    for node in nodes.values():
        assert any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)


def test_rbac_is_on(lab):
    # A service account without bindings must be refused: the apiserver runs with RBAC, not AlwaysAllow.
    review = client.AuthorizationV1Api(lab["api"]).create_subject_access_review({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": "system:serviceaccount:default:nobody", "resourceAttributes": {"verb": "list", "resource": "nodes"}},
    })
    assert review.status.allowed is False


def test_deployment_pods_run_and_stay_running(lab):
    apps, core = client.AppsV1Api(lab["api"]), client.CoreV1Api(lab["api"])
    apps.create_namespaced_deployment("default", {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "holder"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "holder"}}, "template": {
            "metadata": {"labels": {"app": "holder"}},
            "spec": {"nodeName": "rig02",
                     "containers": [{"name": "c", "image": "registry.invalid/none:1"}]}}},
    })
    deadline = time.time() + 60
    phases = []
    while time.time() < deadline:
        phases = [p.status.phase for p in core.list_namespaced_pod("default", label_selector="app=holder").items]
        if phases.count("Running") == 3:
            break
        time.sleep(1)
    assert phases.count("Running") == 3, phases
    time.sleep(3)
    assert [p.status.phase for p in core.list_namespaced_pod("default", label_selector="app=holder").items] \
        == ["Running"] * 3


def test_volcano_runs_with_the_deployed_configuration(lab):
    """The lab runs Volcano's processes from what the chart deployed: the scheduler conf is the ConfigMap's."""
    children = json.loads((lab["dir"] / "children.json").read_text())
    assert {"vc-scheduler", "vc-controller-manager", "vc-webhook-manager"} <= {n for n, c in children.items()
                                                                               if c["ready"]}
    deployed = client.CoreV1Api(lab["api"]).read_namespaced_config_map(
        "volcano-scheduler-configmap", "volcano-system").data["volcano-scheduler.conf"]
    assert (lab["dir"] / "scheduler" / "volcano-scheduler.conf").read_text() == deployed
    assert "deviceshare.VGPUEnable: true" in deployed


def test_gpu_nodes_registered_by_the_emulated_plugin(plugin):
    nodes = {n.metadata.name: n for n in client.CoreV1Api(plugin["api"]).list_node().items}
    for name, memory in (("rig01", 24564), ("rig02", 16376)):
        alloc = nodes[name].status.allocatable
        assert alloc["volcano.sh/vgpu-number"] == "10"
        # gpuMemoryFactor 3 in the fixture: one unit is 3 MiB, so the device list stays under kubelet's limit.
        assert alloc["volcano.sh/vgpu-memory"] == str(5 * (memory // 3))
        assert alloc["volcano.sh/vgpu-cores"] == "500"
        register = nodes[name].metadata.annotations["volcano.sh/node-vgpu-register"]
        assert register.count(",2,%d," % (memory // 3)) == 5
        assert nodes[name].metadata.annotations["volcano.sh/node-vgpu-handshake"].startswith(("Reported", "Requesting"))
    # Control-plane nodes have no plugin pod (nodeSelector) and stay unregistered.
    assert "volcano.sh/vgpu-number" not in nodes["master0"].status.allocatable


def test_registration_follows_the_deployed_config_after_a_restart(plugin):
    """As the real plugin: the node ConfigMap is read at start, so it takes effect once the pods restart."""
    core, apps = client.CoreV1Api(plugin["api"]), client.AppsV1Api(plugin["api"])
    node_config = {"nodeconfig": [{"name": "rig02", "devicesplitcount": 3, "operatingmode": "hami-core"}]}
    core.patch_namespaced_config_map("volcano-vgpu-node-config", "kube-system",
                                     {"data": {"config.json": json.dumps(node_config)}})
    time.sleep(4)
    assert core.read_node("rig02").status.allocatable["volcano.sh/vgpu-number"] == "10"  # not restarted yet
    apps.patch_namespaced_daemon_set("volcano-device-plugin", "kube-system", {"spec": {"template": {"metadata": {
        "annotations": {"gpufleet.io/restarted": str(time.time())}}}}})
    try:
        wait_for(lambda: core.read_node("rig02").status.allocatable["volcano.sh/vgpu-number"] == "15", 90,
                 "rig02 re-registered with split 3")
        assert core.read_node("rig01").status.allocatable["volcano.sh/vgpu-number"] == "10"
    finally:
        core.patch_namespaced_config_map("volcano-vgpu-node-config", "kube-system",
                                         {"data": {"config.json": json.dumps({"nodeconfig": []})}})
        apps.patch_namespaced_daemon_set("volcano-device-plugin", "kube-system", {"spec": {"template": {"metadata": {
            "annotations": {"gpufleet.io/restarted": "back"}}}}})
        wait_for(lambda: all(core.read_node(n).status.allocatable["volcano.sh/vgpu-number"] == "10"
                             for n in GPU_NODES), 90, "both nodes back at split 2")


def test_vgpu_pod_is_scheduled_by_volcano(plugin):
    core = client.CoreV1Api(plugin["api"])
    core.create_namespace({"metadata": {"name": "vgpu-one"}})
    try:
        core.create_namespaced_pod("vgpu-one", {"metadata": {"name": "case01"}, "spec": vgpu_pod_spec()})
        wait_for(lambda: core.read_namespaced_pod("case01", "vgpu-one").status.phase == "Running", 60,
                 "vGPU pod Running")
        pod = core.read_namespaced_pod("case01", "vgpu-one")
        assert pod.spec.node_name in GPU_NODES
        assert pod.metadata.annotations["volcano.sh/vgpu-node"] == pod.spec.node_name
    finally:
        core.delete_namespace("vgpu-one")


def test_admission_webhook_injects_the_scheduler_by_namespace(lab):
    """The admission webhook really runs: a resourceGroups rule for a namespace makes its pods use Volcano."""
    core = client.CoreV1Api(lab["api"])
    rule = "resourceGroups:\n- resourceGroup: ml\n  object:\n    key: namespace\n    value:\n    - mljobs-lab\n" \
           "  schedulerName: volcano\n"
    core.patch_namespaced_config_map("volcano-admission-configmap", "volcano-system",
                                     {"data": {"volcano-admission.conf": rule}})
    core.create_namespace({"metadata": {"name": "mljobs-lab"}})
    try:
        # The webhook-manager reloads its conf file when the lab rewrites it; retry until the new rule answers.
        def injected():
            name = "plain-%d" % int(time.time() * 1000)
            pod = core.create_namespaced_pod("mljobs-lab", {"metadata": {"name": name}, "spec": {
                "containers": [{"name": "c", "image": "registry.invalid/none:1"}]}})
            return pod.spec.scheduler_name == "volcano" or pod.spec.scheduler_name
        wait_for(injected, 60, "schedulerName volcano injected in mljobs-lab")
        other = core.create_namespaced_pod("default", {"metadata": {"name": "plain-default"}, "spec": {
            "containers": [{"name": "c", "image": "registry.invalid/none:1"}]}})
        assert other.spec.scheduler_name == "default-scheduler"
    finally:
        core.delete_namespace("mljobs-lab")
        core.delete_namespaced_pod("plain-default", "default")


def test_volcano_job_validation_rejects_bad_jobs(lab):
    """/jobs/validate answers from the local webhook-manager: minAvailable above the replicas is refused."""
    objects = client.CustomObjectsApi(lab["api"])
    try:
        objects.create_namespaced_custom_object("batch.volcano.sh", "v1alpha1", "default", "jobs", {
            "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "bad"},
            "spec": {"minAvailable": 3, "schedulerName": "volcano", "tasks": [{"name": "w", "replicas": 1, "template": {
                "spec": {"containers": [{"name": "c", "image": "registry.invalid/none:1"}]}}}]}})
    except client.exceptions.ApiException as exc:
        assert exc.status in (400, 403, 422) and "minAvailable" in exc.body, exc.body
    else:
        raise AssertionError("a Job with minAvailable 3 > 1 replica was accepted: no job validation")
