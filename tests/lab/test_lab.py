"""End to end: the local lab's real control plane, Volcano 1.15.1 and the real vGPU device plugin."""

import json
import time

from kubernetes import client

from labkit import (GPU_NODES, allocatable, children, cmdline, nodes_file, restart_daemonset, vgpu_pod_spec,
                    wait_for)


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
    """The lab runs Volcano's processes from what the chart deployed: the scheduler conf is the ConfigMap's, the
    arguments the Deployment's (the chart's schedule period, not a faster one), the credentials its service
    account's."""
    state = children(lab)
    assert all(state[name]["ready"] for name in ("vc-scheduler", "vc-controller-manager", "vc-webhook-manager"))
    deployed = client.CoreV1Api(lab["api"]).read_namespaced_config_map(
        "volcano-scheduler-configmap", "volcano-system").data["volcano-scheduler.conf"]
    assert (lab["dir"] / "scheduler" / "volcano-scheduler.conf").read_text() == deployed
    assert "deviceshare.VGPUEnable: true" in deployed
    argv = cmdline(state["vc-scheduler"]["pid"])
    args = client.AppsV1Api(lab["api"]).read_namespaced_deployment("volcano-scheduler", "volcano-system").spec.template \
        .spec.containers[0].args
    assert "--schedule-period=1s" in args and "--schedule-period=1s" in argv
    assert not [a for a in argv if a.startswith("--kubeconfig")]
    token = (lab["dir"] / "serviceaccounts" / "vc-scheduler" / "token").read_text()
    review = client.AuthenticationV1Api(lab["api"]).create_token_review({"spec": {"token": token}})
    assert review.status.user.username == "system:serviceaccount:volcano-system:volcano-scheduler"


def test_gpu_nodes_registered_by_the_real_plugin(plugin):
    nodes = {n.metadata.name: n for n in client.CoreV1Api(plugin["api"]).list_node().items}
    for name, memory in (("rig01", 24564), ("rig02", 16376)):
        alloc = nodes[name].status.allocatable
        assert alloc["volcano.sh/vgpu-number"] == "10"
        # gpuMemoryFactor 3 in the fixture: one unit is 3 MiB, so the device list stays under kubelet's limit.
        assert alloc["volcano.sh/vgpu-memory"] == str(5 * (memory // 3))
        assert alloc["volcano.sh/vgpu-cores"] == "500"
        register = nodes[name].metadata.annotations["volcano.sh/node-vgpu-register"]
        assert register.count(",2,%d," % (memory // 3)) == 5
        assert nodes[name].metadata.annotations["volcano.sh/node-vgpu-handshake"].startswith("Reported")
    # Control-plane nodes have no plugin pod (nodeSelector) and stay unregistered.
    assert "volcano.sh/vgpu-number" not in nodes["master0"].status.allocatable
    # Each GPU node runs the plugin and its monitor as processes of the lab's kubelet, with the device manager.
    state = children(plugin)["nodes"]
    for name in GPU_NODES:
        assert state[name]["devicemanager"]["running"]
        (pod,) = state[name]["pods"].values()
        running = {c: v["running"] for c, v in pod["containers"].items()}
        assert running == {"volcano-device-plugin": True, "monitor": True}


def test_registration_follows_the_deployed_config_after_a_restart(plugin):
    """As the real plugin: the node ConfigMap is read at start, so it takes effect once the pods restart."""
    core = client.CoreV1Api(plugin["api"])
    node_config = {"nodeconfig": [{"name": "rig02", "devicesplitcount": 3, "operatingmode": "hami-core"}]}
    core.patch_namespaced_config_map("volcano-vgpu-node-config", "kube-system",
                                     {"data": {"config.json": json.dumps(node_config)}})
    time.sleep(12)  # more than the device manager's node status period
    assert allocatable(plugin, "rig02") == "10"  # not restarted yet
    restart_daemonset(plugin)
    try:
        wait_for(lambda: allocatable(plugin, "rig02") == "15", 120, "rig02 re-registered with split 3")
        assert allocatable(plugin, "rig01") == "10"
    finally:
        core.patch_namespaced_config_map("volcano-vgpu-node-config", "kube-system",
                                         {"data": {"config.json": json.dumps({"nodeconfig": []})}})
        restart_daemonset(plugin, stamp="back")
        wait_for(lambda: all(allocatable(plugin, n) == "10" for n in GPU_NODES), 120, "both nodes back at split 2")


def test_vgpu_pod_is_scheduled_by_volcano_and_gets_its_memory_limit(plugin):
    """Volcano places the pod, the node's device manager calls the plugin's Allocate, and the container gets the
    vGPU's memory limit: 2000 units x gpuMemoryFactor 3."""
    core = client.CoreV1Api(plugin["api"])
    core.create_namespace({"metadata": {"name": "vgpu-one"}})
    try:
        core.create_namespaced_pod("vgpu-one", {"metadata": {"name": "case01"}, "spec": vgpu_pod_spec()})
        wait_for(lambda: core.read_namespaced_pod("case01", "vgpu-one").status.phase == "Running", 60,
                 "vGPU pod Running")
        pod = core.read_namespaced_pod("case01", "vgpu-one")
        assert pod.spec.node_name in GPU_NODES
        annotations = pod.metadata.annotations
        assert annotations["volcano.sh/vgpu-node"] == pod.spec.node_name
        assert annotations["volcano.sh/bind-phase"] == "success"  # the plugin's Allocate found the pod
        envs = json.loads(annotations["lab.gpufleet.io/device-run-options"])["cuda"]["envs"]
        assert envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "6000m"
        assert envs["NVIDIA_VISIBLE_DEVICES"] == annotations["volcano.sh/vgpu-ids-new"].split(",")[0]
    finally:
        core.delete_namespace("vgpu-one")


def test_a_vgpu_pod_volcano_did_not_place_is_rejected_by_the_node(plugin):
    """kube-scheduler knows nothing of vGPU devices: bound without Volcano's device annotations, the pod finds no
    allocation in the plugin and kubelet rejects it (UnexpectedAdmissionError), as on a real node."""
    core = client.CoreV1Api(plugin["api"])
    core.create_namespace({"metadata": {"name": "vgpu-wrong"}})
    try:
        core.create_namespaced_pod("vgpu-wrong", {"metadata": {"name": "p"},
                                                  "spec": vgpu_pod_spec(scheduler_name=None)})
        wait_for(lambda: core.read_namespaced_pod("p", "vgpu-wrong").status.phase == "Failed"
                 or core.read_namespaced_pod("p", "vgpu-wrong").status.phase, 60, "pod rejected")
        pod = core.read_namespaced_pod("p", "vgpu-wrong")
        assert pod.status.reason == "UnexpectedAdmissionError"
        assert "cannot get valid pod" in pod.status.message
    finally:
        core.delete_namespace("vgpu-wrong")


def test_deployment_of_one_vgpu_pods_scales_to_fill_every_vgpu(plugin):
    """The article's deployment check: 10 replicas run, 20 fill every vGPU of the two nodes, the 21st waits."""
    apps, core = client.AppsV1Api(plugin["api"]), client.CoreV1Api(plugin["api"])
    core.create_namespace({"metadata": {"name": "vgpu-deploy"}})

    def phases():
        return [p.status.phase for p in core.list_namespaced_pod("vgpu-deploy", label_selector="app=fill").items]
    try:
        apps.create_namespaced_deployment("vgpu-deploy", {
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "fill"},
            "spec": {"replicas": 10, "selector": {"matchLabels": {"app": "fill"}},
                     "template": {"metadata": {"labels": {"app": "fill"}}, "spec": vgpu_pod_spec(1000)}}})
        wait_for(lambda: phases().count("Running") == 10 or phases(), 120, "10 replicas Running")
        apps.patch_namespaced_deployment_scale("fill", "vgpu-deploy", {"spec": {"replicas": 20}})
        wait_for(lambda: phases().count("Running") == 20 or phases(), 120, "20 replicas Running")
        apps.patch_namespaced_deployment_scale("fill", "vgpu-deploy", {"spec": {"replicas": 21}})
        wait_for(lambda: len(phases()) == 21 or phases(), 60, "21 pods")
        time.sleep(5)
        assert phases().count("Running") == 20 and phases().count("Pending") == 1, phases()
    finally:
        core.delete_namespace("vgpu-deploy")


def test_scheduler_metrics_carry_the_vgpu_series(plugin):
    """Volcano 1.15's metric names on its :8080 (the smoke test and dashboards read these)."""
    import urllib.request  # pylint: disable=import-outside-toplevel

    from prometheus_client.parser import text_string_to_metric_families  # pylint: disable=import-outside-toplevel

    with urllib.request.urlopen(children(plugin)["vc-scheduler"]["metrics_url"], timeout=10) as response:  # noqa: S310
        families = {f.name: f for f in text_string_to_metric_families(response.read().decode())}
    for name in ("volcano_vgpu_device_memory_limit", "volcano_vgpu_device_shared_number",
                 "volcano_vgpu_device_allocated_memory", "volcano_vgpu_device_allocated_cores"):
        devices = {(s.labels["NodeName"], s.labels["devID"]) for s in families[name].samples}
        assert {node for node, dummy in devices} == set(GPU_NODES) and len(devices) == 10, (name, devices)
    assert families["volcano_e2e_scheduling_latency_milliseconds"].type == "histogram"


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
