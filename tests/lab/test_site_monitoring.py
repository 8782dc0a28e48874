"""The monitoring role on a real Prometheus (Debian's package, started with the lab) that scrapes the real
vc-scheduler, vc-controller-manager, each GPU node's plugin monitor and each GPU host's node_exporter (reading the
textfile of gpu_verify's health timer): every dashboard query returns series in the lab's state, and every alert
expression is empty until a scenario built for it - a pod and a gang Volcano cannot place, the scheduler scaled to
zero, the plugin gone from every node while rig02's health timer is stopped, a GPU lost on rig01 while rig02's
driver is not loaded - and empty again after it. The alerts' `for` durations are promtool's to test
(tests/unit/.../test__monitoring_promtool.py); here each expression is evaluated as Prometheus evaluates it, through
its HTTP API."""

import json
import pathlib
import subprocess
import urllib.parse
import urllib.request

import yaml
from kubernetes import client

from harness import fake_nvml
from helpers import ROOT, failed_messages, run_playbook
from labkit import GPU_NODES, allocatable, wait_for

NAMESPACE = "gpufleet-monitoring-test"
FIXTURE = "/etc/gpufleet-fake-nvml/fixture.conf"
# Where the lab inventory has gpu_verify's health timer write (Debian's node_exporter reads it).
TEXTFILE = "/var/lib/prometheus/node-exporter/gpufleet_gpu_health.prom"


def lab_info(lab):
    return json.loads((lab["dir"] / "lab.json").read_text())


def api(lab, path, **params):
    url = lab_info(lab)["prometheus_url"] + path + ("?" + urllib.parse.urlencode(params) if params else "")
    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 (lab loopback)
        body = json.loads(response.read().decode())
    assert body["status"] == "success", body
    return body["data"]


def query(lab, expr):
    return api(lab, "/api/v1/query", query=expr)["result"]


def rules(lab):
    return yaml.safe_load(pathlib.Path(lab_info(lab)["prometheus_rules"]).read_text())["groups"][0]["rules"]


def alerting(lab):
    """{alert name: sorted label sets its expression returns now} of every alert of the rules file."""
    found = {}
    for rule in rules(lab):
        if "alert" in rule:
            found[rule["alert"]] = sorted(
                tuple(sorted((k, v) for k, v in series["metric"].items() if k in ("node", "job_id", "gpu")))
                for series in query(lab, rule["expr"]))
    return found


def quiet(lab):
    return {rule["alert"]: [] for rule in rules(lab) if "alert" in rule}


def converged(lab):
    """site.yml in place (the nodes' health timers, Volcano, the plugin, the monitoring); converged only where no
    earlier test left it so."""
    info = lab_info(lab)
    timers = [subprocess.run(["podman", "exec", info["hosts"][node], "test", "-s", TEXTFILE], check=False).returncode
              for node in GPU_NODES]
    if not pathlib.Path(info["prometheus_rules"]).exists() or [allocatable(lab, n) for n in GPU_NODES] != ["10", "10"] \
            or any(timers):
        rc, out, err = run_playbook(ROOT / "playbooks" / "site.yml", env=lab["env"],
                                    inventory=str(ROOT / "inventories" / "lab"), local=False)
        assert rc == 0, (failed_messages(out), err[-2000:])


def on_host(lab, node, script):
    host = lab_info(lab)["hosts"][node]
    subprocess.run(["podman", "exec", host, "sh", "-c", script], check=True)


def plugin_pod(lab, node):
    pods = client.CoreV1Api(lab["api"]).list_namespaced_pod(
        "kube-system", label_selector="gpufleet.io/component=device-plugin", field_selector="spec.nodeName=" + node)
    return [p for p in pods.items if p.metadata.deletion_timestamp is None]


def test_dashboard_and_alerts_on_the_labs_prometheus(lab):
    converged(lab)
    fired = set()
    core = client.CoreV1Api(lab["api"])
    # Prometheus reloaded the rules the role wrote, and scrapes every component under the role's job names.
    wait_for(lambda: [(g["name"], len(g["rules"])) for g in api(lab, "/api/v1/rules")["groups"]]
             == [("gpufleet-vgpu", len(rules(lab)))] or api(lab, "/api/v1/rules")["groups"], 60, "the rules loaded")

    def targets():
        return sorted((t["labels"]["job"], t["labels"].get("node", ""), t["health"])
                      for t in api(lab, "/api/v1/targets")["activeTargets"])
    wait_for(lambda: targets() == [("gpufleet-vgpu-monitor", "rig01", "up"), ("gpufleet-vgpu-monitor", "rig02", "up"),
                                   ("gpufleet-volcano-controllers", "", "up"),
                                   ("gpufleet-volcano-scheduler", "", "up"),
                                   ("lab-node-exporter", "", "up"), ("lab-node-exporter", "", "up")] or targets(), 60,
             "every target up")
    wait_for(lambda: alerting(lab) == quiet(lab) or alerting(lab), 60, "no alert in the lab's steady state")

    core.create_namespace({"metadata": {"name": NAMESPACE}})
    try:
        # One vGPU pod that runs, one that asks rig02 for a whole RTX 4090's memory (8188 units; its 4070 Supers have
        # 5458 - admitted, as a 4090 elsewhere could hold it), and a gang of two such pods.
        def pod(name, memory, **meta):
            spec = {"schedulerName": "volcano", "containers": [{"name": "cuda", "image": "registry.invalid/cuda:1",
                                                                "resources": {"limits": {
                                                                    "volcano.sh/vgpu-number": "1",
                                                                    "volcano.sh/vgpu-memory": str(memory)}}}]}
            if memory > 5458:
                spec["nodeSelector"] = {"kubernetes.io/hostname": "rig02"}
            return {"metadata": dict({"name": name}, **meta), "spec": spec}
        core.create_namespaced_pod(NAMESPACE, pod("runs", 1000))
        waiting = core.create_namespaced_pod(NAMESPACE, pod("too-big-for-rig02", 8188))
        client.CustomObjectsApi(lab["api"]).create_namespaced_custom_object(
            "batch.volcano.sh", "v1alpha1", NAMESPACE, "jobs", {
                "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "gang"},
                "spec": {"schedulerName": "volcano", "minAvailable": 2, "tasks": [
                    {"name": "worker", "replicas": 2,
                     "template": {"spec": dict(pod("w", 8188)["spec"], restartPolicy="Never")}}]}})
        wait_for(lambda: core.read_namespaced_pod("runs", NAMESPACE).status.phase == "Running", 90, "the vGPU pod Running")

        # Every dashboard query returns series now (the dashboard file as the role wrote it).
        board = json.loads((pathlib.Path(lab_info(lab)["prometheus_rules"]).parent / "gpufleet-dashboard.json")
                           .read_text())

        def empty_panels():
            return [p["title"] for p in board["panels"] if not query(lab, p["targets"][0]["expr"])]
        wait_for(lambda: empty_panels() == [] or empty_panels(), 90, "every dashboard query answered")

        def waiting_alerts():
            now = alerting(lab)
            return now["GpufleetVolcanoJobPending"], now["GpufleetGangWaiting"], [
                name for name, found in now.items()
                if found and name not in ("GpufleetVolcanoJobPending", "GpufleetGangWaiting")]

        def only_the_waiting_ones():
            pending, gang, others = waiting_alerts()
            return (len(pending) == 1 and len(gang) == 1 and not others) or (pending, gang, others)
        wait_for(only_the_waiting_ones, 60, "the pending pod and the gang alerting, nothing else")
        pending, gang, dummy = waiting_alerts()
        # The bare pod's group is podgroup-<its uid>; the Job's is named after the Job.
        assert pending == [(("job_id", "podgroup-" + waiting.metadata.uid),)], pending
        assert gang[0][0][1].startswith("gang-"), gang
        fired.update(("GpufleetVolcanoJobPending", "GpufleetGangWaiting"))
    finally:
        core.delete_namespace(NAMESPACE)
    wait_for(lambda: alerting(lab) == quiet(lab) or alerting(lab), 120, "quiet again once the pods are gone")

    # The scheduler gone (its Deployment scaled to zero, as an outage leaves it): nothing scrapes it any more.
    apps = client.AppsV1Api(lab["api"])
    [scheduler] = apps.list_namespaced_deployment("volcano-system", label_selector="app=volcano-scheduler").items
    apps.patch_namespaced_deployment_scale(scheduler.metadata.name, "volcano-system", {"spec": {"replicas": 0}})
    try:
        wanted = dict(quiet(lab), GpufleetVolcanoSchedulerDown=[()])
        wait_for(lambda: alerting(lab) == wanted or alerting(lab), 90, "GpufleetVolcanoSchedulerDown only")
        fired.update(name for name, found in wanted.items() if found)
    finally:
        apps.patch_namespaced_deployment_scale(scheduler.metadata.name, "volcano-system",
                                               {"spec": {"replicas": scheduler.spec.replicas}})
    wait_for(lambda: alerting(lab) == quiet(lab) or alerting(lab), 120, "quiet again with the scheduler back")

    # The plugin gone from every GPU node (a nodeSelector no node matches): its pods and monitors stop.
    [daemonset] = apps.list_namespaced_daemon_set("kube-system", label_selector="gpufleet.io/component=device-plugin").items
    selector = dict(daemonset.spec.template.spec.node_selector)
    assert "lab.gpufleet.io/no-such-node" not in selector
    apps.patch_namespaced_daemon_set(daemonset.metadata.name, "kube-system", {"spec": {"template": {"spec": {
        "nodeSelector": dict(selector, **{"lab.gpufleet.io/no-such-node": "true"})}}}})
    # Meanwhile rig02's health timer stopped, its last metrics gone with the node_exporter textfile.
    on_host(lab, "rig02", "systemctl stop gpufleet-gpu-health.timer && rm %s" % TEXTFILE)
    try:
        wanted = dict(quiet(lab), GpufleetVGPUPluginDown=[(("node", "rig01"),), (("node", "rig02"),)],
                      GpufleetGPUHealthCheckStale=[(("node", "rig02"),)])
        wait_for(lambda: alerting(lab) == wanted or alerting(lab), 90,
                 "GpufleetVGPUPluginDown for both nodes and GpufleetGPUHealthCheckStale for rig02 only")
        fired.update(name for name, found in wanted.items() if found)
    finally:
        # A merge patch keeps keys it does not name: the added one is removed by name.
        apps.patch_namespaced_daemon_set(daemonset.metadata.name, "kube-system", {"spec": {"template": {"spec": {
            "nodeSelector": {"lab.gpufleet.io/no-such-node": None}}}}})
        # The timer runs the check as it starts.
        on_host(lab, "rig02", "systemctl start gpufleet-gpu-health.timer")
    wait_for(lambda: alerting(lab) == quiet(lab) or alerting(lab), 120, "quiet again with the plugin back")

    # rig01's GPU 3 fallen off the bus: NVML answers GPU_IS_LOST on its handle (the fixture), read by the plugin's
    # monitor when it starts again and by the health timer's next run. Meanwhile rig02's driver is not loaded: NVML
    # fails to start, which its health timer's next run reports (the plugin keeps what it read when it started).
    for node, name in (("rig01", "rig01-gpu-lost"), ("rig02", "driver-not-loaded")):
        broken = fake_nvml.flatten(json.loads((ROOT / "tests" / "fixtures" / "nvml" / (name + ".json")).read_text()))
        on_host(lab, node, "cp %s %s.saved && cat > %s <<'EOF'\n%s\nEOF" % (FIXTURE, FIXTURE, FIXTURE, broken))
    try:
        # The check now rather than at the timer's next run (every minute, the role's default; the timer itself is
        # shown above: started, it runs the check).
        for node in GPU_NODES:
            on_host(lab, node, "systemctl start gpufleet-gpu-health.service")
        for pod in plugin_pod(lab, "rig01"):
            core.delete_namespaced_pod(pod.metadata.name, "kube-system")
        wanted = dict(quiet(lab), GpufleetGPUMissing=[(("node", "rig01"),)],
                      GpufleetGPUUnhealthy=[(("gpu", "3"), ("node", "rig01"))],
                      GpufleetGPUNodeUnhealthy=[(("node", "rig02"),)])
        wait_for(lambda: alerting(lab) == wanted or alerting(lab), 150,
                 "GpufleetGPUMissing and GpufleetGPUUnhealthy (GPU 3) for rig01, GpufleetGPUNodeUnhealthy for rig02")
        fired.update(name for name, found in wanted.items() if found)
        [series] = query(lab, [r["expr"] for r in rules(lab) if r.get("alert") == "GpufleetGPUMissing"][0])
        assert series["value"][1] == "5", series
        [series] = query(lab, 'gpufleet_gpu_nvml_up{node="rig02"}')
        assert (series["metric"]["error"], series["value"][1]) == ("DRIVER_NOT_LOADED", "0"), series
    finally:
        for node in ("rig01", "rig02"):
            on_host(lab, node, "mv %s.saved %s && systemctl start gpufleet-gpu-health.service" % (FIXTURE, FIXTURE))
        for pod in plugin_pod(lab, "rig01"):
            core.delete_namespaced_pod(pod.metadata.name, "kube-system")
    wait_for(lambda: alerting(lab) == quiet(lab) or alerting(lab), 150, "quiet again with every GPU back")
    wait_for(lambda: [allocatable(lab, n) for n in GPU_NODES] == ["10", "10"] or
             [allocatable(lab, n) for n in GPU_NODES], 120, "both nodes registered with 10 vGPUs again")
    # rig01's driver logs an Xid 119 (GSP timeout) for GPU 1 while NVML keeps answering. A container cannot write
    # the kernel's log: the check reads a log file instead (gpu_verify_xid_source, as from rsyslog), set in its
    # installed configuration for the scenario. Xid records last the boot: a reboot ends the alert, here the
    # check's state removed with the original configuration back.
    config = "/opt/gpufleet/gpu-health/config.json"
    log = "/var/log/gpufleet-lab-kern.log"
    [gpu1] = [s["metric"] for s in query(lab, 'gpufleet_gpu_healthy{node="rig01", gpu="1"}')]
    domain, bus, device = gpu1["pci_bus_id"].split(".")[0].split(":")
    line = ("Dec  5 10:01:00 rig01 kernel: [ 8123.456789] NVRM: Xid (PCI:%s:%s:%s): 119, pid=2364, name=python3, "
            "Timeout after 6s of waiting for RPC response from GPU1 GSP!" % (domain[-4:], bus, device))
    on_host(lab, "rig01", "cp %s %s.saved && python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); "
                          "c[\"xid_source\"]=sys.argv[2]; json.dump(c, open(sys.argv[1], \"w\"))' %s %s && "
                          # A run before the file exists: the check then reads all of it once it appears.
                          "systemctl start gpufleet-gpu-health.service" % (config, config, config, log))
    try:
        on_host(lab, "rig01", "printf '%%s\\n' '%s' >> %s && systemctl start gpufleet-gpu-health.service" % (line, log))
        wanted = dict(quiet(lab), GpufleetGPUXid=[(("gpu", "1"), ("node", "rig01"))],
                      GpufleetGPUUnhealthy=[(("gpu", "1"), ("node", "rig01"))])
        wait_for(lambda: alerting(lab) == wanted or alerting(lab), 120, "GpufleetGPUXid for rig01's GPU 1")
        fired.update(name for name, found in wanted.items() if found)
        [series] = query(lab, 'gpufleet_gpu_xid_events{node="rig01"}')
        assert (series["metric"]["code"], series["metric"]["action"], series["value"][1]) == ("119", "reset_gpu", "1")
    finally:
        on_host(lab, "rig01", "mv %s.saved %s && rm -f %s /opt/gpufleet/gpu-health/state.json && "
                              "systemctl start gpufleet-gpu-health.service" % (config, config, log))
    wait_for(lambda: alerting(lab) == quiet(lab) or alerting(lab), 150, "quiet again after the Xid's state is gone")
    # Every alert of the rules fired in one of the scenarios above.
    assert fired == set(quiet(lab)), set(quiet(lab)) - fired
