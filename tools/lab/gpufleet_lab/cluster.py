"""up / down / status: the lab's control plane, its nodes, its hosts and Volcano's chart."""

import json
import pathlib
import shutil
import ssl
import subprocess
import sys
import time
import urllib.request

import yaml

from . import hosts, images, kube, netns, pki, procs, prometheus
from .paths import BIN, HERE, LAB, NETNS, free_port, log, read_json, write_json

KWOK_STAGES = ["node/fast/node-initialize.yaml", "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
               "pod/fast/pod-ready.yaml", "pod/fast/pod-delete.yaml", "pod/fast/pod-complete.yaml"]
GROUPS = ("etcd", "kubernetes", "kwok", "helm", "volcano", "hami")
GPUS_ANNOTATION = "lab.gpufleet.io/gpus"
ADMITTED = "lab.gpufleet.io/admitted"
VGPU_LIMIT = '.spec.containers.[].resources.limits."volcano.sh/vgpu-number"'
PLUGIN_REGISTER = ("periodic", "on-change")


def binaries(groups=GROUPS):
    """Build (or reuse) the pinned binaries; return {name: path} from the builds of the current pins."""
    subprocess.run([str(HERE / "build.sh")] + list(groups), check=True)
    found = {}
    for group in groups:
        for exe in (BIN / group).resolve().iterdir():
            if exe.is_file() and exe.stat().st_mode & 0o111:
                found[exe.name] = exe
    return found


def module_dir(group, module):
    return pathlib.Path(subprocess.run(["go", "list", "-m", "-f", "{{.Dir}}", module], cwd=HERE / group,
                                       capture_output=True, text=True, check=True).stdout.strip())


def stages_config(path):
    """kwok's own stage definitions, from the pinned kwok module, with two changes:
    - pod-complete only for batch/v1 Jobs (helm hooks such as Volcano's admission-init finish); its own selector
      matches any owner of kind Job, which would also end every Volcano Job's pods (batch.volcano.sh);
    - a pod that asks for vGPUs starts only once the node's device manager admitted it (lab.gpufleet.io/admitted),
      as kubelet starts a pod only after its admit handlers passed (a rejected pod goes Failed instead).
    """
    base = module_dir("kwok", "sigs.k8s.io/kwok") / "kustomize" / "stage"
    docs = []
    for stage in KWOK_STAGES:
        doc = yaml.safe_load((base / stage).read_text())
        expressions = doc["spec"]["selector"]["matchExpressions"]
        if doc["metadata"]["name"] == "pod-complete":
            expressions.append({"key": ".metadata.ownerReferences.[].apiVersion", "operator": "In",
                                "values": ["batch/v1"]})
        if doc["metadata"]["name"] == "pod-ready":
            admitted = json.loads(json.dumps(doc))
            admitted["metadata"]["name"] = "pod-ready-admitted"
            admitted["spec"]["selector"]["matchExpressions"].append(
                {"key": '.metadata.annotations."%s"' % ADMITTED, "operator": "In", "values": ["true"]})
            expressions.append({"key": VGPU_LIMIT, "operator": "DoesNotExist"})
            docs.append(admitted)
        docs.append(doc)
    path.write_text(yaml.safe_dump_all(docs))


def node_object(node):
    labels = {"kubernetes.io/hostname": node["name"], "kubernetes.io/os": "linux", "type": "kwok"}
    labels.update(node.get("labels", {}))
    annotations = {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"}
    if node.get("gpus"):
        # The simulated GPUs, for the stand-in plugin of nodes without a host (a host answers NVML itself).
        annotations[GPUS_ANNOTATION] = json.dumps(node["gpus"], sort_keys=True)
    # No kwok taint: every node here is simulated, so workloads need no toleration to land on one.
    taints = []
    if node.get("control_plane"):
        labels["node-role.kubernetes.io/control-plane"] = ""
        taints.append({"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"})
    capacity = {"cpu": str(node.get("cpu", 32)), "memory": node.get("memory", "256Gi"), "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": node["name"], "labels": labels, "annotations": annotations},
            "spec": {"taints": taints}, "status": {"capacity": capacity, "allocatable": capacity}}


def create_nodes(nodes):
    from kubernetes import client  # pylint: disable=import-outside-toplevel

    api = client.CoreV1Api(kube.api())
    for node in nodes:
        obj = node_object(node)
        api.create_node(obj)
        # Capacity is status: the create call drops it, so it is written through the status subresource.
        api.patch_node_status(node["name"], {"status": obj["status"]})
    timeout = 60 + len(nodes) // 10  # kwok takes nodes on at its own pace (the benchmark fleet has 1000)
    deadline = time.time() + timeout
    while time.time() < deadline:
        ready = [n.metadata.name for n in api.list_node().items
                 if any(c.type == "Ready" and c.status == "True" for c in (n.status.conditions or []))]
        if len(ready) == len(nodes):
            log("%d nodes Ready: %s" % (len(ready), ", ".join(sorted(ready)[:10]) + (" ..." if len(ready) > 10 else "")))
            return
        time.sleep(1)
    raise SystemExit("nodes not Ready after %d s (kwok log: %s)" % (timeout, LAB / "logs" / "kwok.log"))


def wait_ready(url, pki_dir, timeout=90):
    ctx = ssl.create_default_context(cafile=str(pki_dir / "ca.crt"))
    ctx.load_cert_chain(str(pki_dir / "admin.crt"), str(pki_dir / "admin.key"))
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, context=ctx, timeout=5) as resp:  # noqa: S310 (local lab URL)
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1)
    raise SystemExit("the lab's kube-apiserver did not become ready within %d s; see %s" % (timeout, LAB / "logs"))


def wait_volcano(timeout=180):
    """Until the controller runs Volcano's processes and the scheduler has created the default queue."""
    from kubernetes import client  # pylint: disable=import-outside-toplevel

    objects = client.CustomObjectsApi(kube.api())
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        children = read_json(LAB / "children.json")
        running = sorted(name for name, child in children.items() if isinstance(child, dict) and child.get("ready"))
        try:
            objects.get_cluster_custom_object("scheduling.volcano.sh", "v1beta1", "queues", "default")
            queue = True
        except client.exceptions.ApiException:
            queue = False
        last = (running, queue)
        if {"vc-scheduler", "vc-controller-manager", "vc-webhook-manager"} <= set(running) and queue:
            return
        time.sleep(1)
    raise SystemExit("Volcano not running in the lab within %d s (%r); see %s" % (timeout, last, LAB / "logs"))


def chart_version(chart):
    return yaml.safe_load((chart / "Chart.yaml").read_text())["version"]


def up(args):  # pylint: disable=too-many-locals
    if (LAB / "state.json").exists():
        raise SystemExit("a lab is already running or was not stopped (%s); run 'lab.py down' first" % LAB)
    t0 = time.time()
    bins = binaries()
    if args.volcano_fix:
        # Its own folder (lab-bin/volcano-fix): its scheduler must not take the stock one's name in `bins`.
        subprocess.run([str(HERE / "build.sh"), "volcano-fix"], check=True)
    for d in ("pki", "etcd", "logs", "bin"):
        (LAB / d).mkdir(parents=True, exist_ok=True)
    pki_dir = LAB / "pki"
    pki.make_pki(pki_dir)
    ports = {"etcd": free_port(), "etcd-peer": free_port(), "apiserver": free_port()}
    server = "https://127.0.0.1:%d" % ports["apiserver"]
    nodes_file = pathlib.Path(args.nodes).resolve()
    nodes = yaml.safe_load(nodes_file.read_text())["nodes"]
    state = {"pids": {}, "ports": ports, "server": server, "kubeconfig": str(LAB / "kubeconfig"),
             "nodes_file": str(nodes_file)}
    procs.start("etcd", [str(bins["etcd"]), "--data-dir", str(LAB / "etcd"),
                         "--listen-client-urls", "http://127.0.0.1:%d" % ports["etcd"],
                         "--advertise-client-urls", "http://127.0.0.1:%d" % ports["etcd"],
                         "--listen-peer-urls", "http://127.0.0.1:%d" % ports["etcd-peer"],
                         "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % ports["etcd-peer"],
                         "--initial-cluster", "default=http://127.0.0.1:%d" % ports["etcd-peer"],
                         "--unsafe-no-fsync"], state)
    procs.start("kube-apiserver", [
        str(bins["kube-apiserver"]), "--etcd-servers", "http://127.0.0.1:%d" % ports["etcd"],
        "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--secure-port", str(ports["apiserver"]),
        "--tls-cert-file", str(pki_dir / "apiserver.crt"), "--tls-private-key-file", str(pki_dir / "apiserver.key"),
        "--client-ca-file", str(pki_dir / "ca.crt"), "--authorization-mode", "Node,RBAC",
        "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
        "--service-account-key-file", str(pki_dir / "sa.pub"),
        "--service-account-signing-key-file", str(pki_dir / "sa.key"),
        "--service-cluster-ip-range", pki.SERVICE_CIDR, "--allow-privileged=true",
        # Webhooks are called at an endpoint of their Service (the lab controller's EndpointSlice), not a ClusterIP.
        "--enable-aggregator-routing=true",
        # MutatingAdmissionPolicy is beta and off by default in 1.35 (GA in 1.36): served here as a site would serve
        # it, for device_plugin_default_memory: even-share. Nothing uses it unless that option installs a policy.
        "--feature-gates=MutatingAdmissionPolicy=true", "--runtime-config=admissionregistration.k8s.io/v1beta1=true"],
        state)
    wait_ready(server + "/readyz", pki_dir)
    for user, dummy, dummy2 in pki.USERS:
        pki.kubeconfig(LAB / ("kubeconfig" if user == "admin" else "%s.kubeconfig" % user), server, pki_dir, user)
    procs.start("kube-controller-manager", [
        str(bins["kube-controller-manager"]), "--kubeconfig", str(LAB / "controller-manager.kubeconfig"),
        "--authentication-kubeconfig", str(LAB / "controller-manager.kubeconfig"),
        "--authorization-kubeconfig", str(LAB / "controller-manager.kubeconfig"),
        "--bind-address", "127.0.0.1", "--secure-port", "0", "--leader-elect=false",
        "--use-service-account-credentials", "--service-account-private-key-file", str(pki_dir / "sa.key"),
        "--root-ca-file", str(pki_dir / "ca.crt"), "--controllers",
        # The lab controller owns the EndpointSlices: kwok's pod IPs lead nowhere.
        "*,-nodeipam,-endpoint,-endpointslice,-endpointslicemirroring"], state)
    # kube-scheduler places what Volcano does not: the charts' Deployments, DaemonSet pods, helm hook Jobs.
    procs.start("kube-scheduler", [
        str(bins["kube-scheduler"]), "--kubeconfig", str(LAB / "scheduler.kubeconfig"),
        "--authentication-kubeconfig", str(LAB / "scheduler.kubeconfig"),
        "--authorization-kubeconfig", str(LAB / "scheduler.kubeconfig"),
        "--bind-address", "127.0.0.1", "--secure-port", "0", "--leader-elect=false"], state)
    stages_config(LAB / "kwok.yaml")
    procs.start("kwok", [str(bins["kwok"]), "--kubeconfig", str(LAB / "kwok.kubeconfig"),
                         "--config", str(LAB / "kwok.yaml"),
                         "--manage-nodes-with-annotation-selector", "kwok.x-k8s.io/node=fake",
                         # Node leases are the heartbeat the node lifecycle controller watches; without them nodes
                         # flap NotReady and their pods lose Ready.
                         "--node-lease-duration-seconds", "40",
                         "--server-address", "127.0.0.1:%d" % free_port()], state)
    create_nodes(nodes)
    chart = module_dir("volcano", "volcano.sh/volcano") / "installer" / "helm" / "chart" / "volcano"
    host_names = hosts.names([n["name"] for n in nodes if n.get("gpus")])
    for name in ("helm", "kubectl"):
        (LAB / "bin" / name).symlink_to(bins[name])
    # What the roles and the inventories/lab group vars need to find this lab.
    write_json(LAB / "lab.json", {
        "kubeconfig": str(LAB / "kubeconfig"), "helm": str(LAB / "bin" / "helm"),
        "kubectl": str(LAB / "bin" / "kubectl"), "volcano_chart": str(chart),
        "volcano_version": chart_version(chart), "plugin_version": images.plugin_version(),
        "nodes_file": str(nodes_file), "hosts": host_names,
        # Lab options (README, "Lab options"): off unless asked for, and recorded for the benchmarks' JSON.
        "volcano_fix": {"tag": images.volcano_version() + images.VOLCANO_FIX_SUFFIX,
                        "patches": sorted(p.name for p in (HERE.parent / "upstream" / "volcano" / "patches")
                                          .glob("*.patch"))} if args.volcano_fix else None,
        "plugin_register": args.plugin_register})
    hosts_up = not args.no_hosts and hosts.start(host_names, state)
    if not args.no_prometheus:
        prometheus_url = prometheus.start(state, hosts.node_exporters(host_names) if hosts_up else {})
        lab = read_json(LAB / "lab.json")
        lab.update(prometheus_url=prometheus_url, prometheus_rules=str(prometheus.RULES))
        write_json(LAB / "lab.json", lab)
    procs.start("lab-controller", [sys.executable, str(HERE / "lab.py"), "controller"], state)
    if not args.bare:
        subprocess.run([str(bins["helm"]), "upgrade", "--install", "volcano", str(chart), "--namespace",
                        "volcano-system", "--create-namespace", "--kubeconfig", str(LAB / "kubeconfig"),
                        "--values", str(HERE / "volcano-values.yaml"), "--wait", "--timeout", "5m"],
                       check=True, stdout=subprocess.DEVNULL)
        log("Volcano %s installed from its module's chart" % chart_version(chart))
        wait_volcano()
    log("ready in %.0f s: export KUBECONFIG=%s; %s get nodes"
        % (time.time() - t0, LAB / "kubeconfig", LAB / "bin" / "kubectl"))


def set_option(args):
    """`lab.py set plugin-register=on-change`: a lab option the controller reads on its next pass."""
    name, dummy, value = args.option.partition("=")
    if name != "plugin-register" or value not in PLUGIN_REGISTER:
        raise SystemExit("unknown option %r (allowed: plugin-register=%s)" % (args.option, "|".join(PLUGIN_REGISTER)))
    lab = read_json(LAB / "lab.json")
    if not lab:
        raise SystemExit("no lab runs in %s" % LAB)
    lab["plugin_register"] = value
    write_json(LAB / "lab.json", lab)
    log("plugin-register=%s" % value)


def down(_args):
    state = read_json(LAB / "state.json")
    if not state:
        # A half-removed lab (an earlier 'down' that failed) has no state left: stop whatever still runs from its
        # folder, then remove it.
        for pid in procs.running_from(LAB):
            procs.stop_process("leftover process", pid)
        if LAB.exists():
            remove_tree(LAB)
        log("nothing to stop")
        return
    pids = dict(state.get("pids", {}))
    # The controller first: it would start again a child it sees gone. It stops its children on SIGTERM; those
    # it could not stop are stopped from its last state.
    from .controller import children  # pylint: disable=import-outside-toplevel

    if "lab-controller" in pids:
        procs.stop("lab-controller", pids.pop("lab-controller"), grace=60)
    for child in children():
        procs.stop("controller child", child["pid"], started=child.get("started"))
    for name, pid in reversed(list(pids.items())):
        procs.stop(name, pid)
    hosts.remove(state)
    if NETNS.exists():
        for path in NETNS.iterdir():
            netns.remove(path)
        shutil.rmtree(NETNS.parent, ignore_errors=True)
    remove_tree(LAB)


def remove_tree(path, attempts=5):
    """rmtree that finishes: a file vanishing under it (a process of the lab still exiting) is retried, and what
    still cannot be removed is named instead of a traceback, so a second 'down' can clean up."""
    for attempt in range(attempts):
        try:
            shutil.rmtree(path)
            return
        except FileNotFoundError:
            if not path.exists():
                return
        except OSError as exc:
            if attempt == attempts - 1:
                raise SystemExit("could not remove %s (%s); run 'lab.py down' again" % (path, exc)) from exc
        time.sleep(1)
    shutil.rmtree(path, ignore_errors=True)
    if path.exists():
        raise SystemExit("could not remove %s; run 'lab.py down' again" % path)


def status(_args):
    state = read_json(LAB / "state.json")
    if not state:
        print("not running")
        return 1
    gone = 0
    for name, pid in state["pids"].items():
        alive = procs.alive(pid)
        gone += not alive
        print("%-24s pid %-8d %s" % (name, pid, "running" if alive else "GONE"))
    from .controller import children  # pylint: disable=import-outside-toplevel

    running = [c["pid"] for c in children() if procs.ours(c["pid"], c.get("started"))]
    print("%-24s %d processes (Volcano, device managers, plugin containers)" % ("controller children", len(running)))
    pids = list(state["pids"].values()) + running
    print("resident memory of the lab's processes: %.0f MiB" % (sum(procs.rss_kib(pid) for pid in pids) / 1024))
    print("KUBECONFIG=%s" % state["kubeconfig"])
    print("KUBECTL=%s" % (LAB / "bin" / "kubectl"))
    return 1 if gone else 0
