"""The local lab: a real Kubernetes control plane on this machine with kwok-simulated nodes and the real Volcano.

    python tools/lab/lab.py up [--nodes FILE] [--bare]
        build (cached) and start etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok; create the
        nodes; start the lab controller; install Volcano's chart from its Go module (not with --bare); print the
        kubeconfig
    python tools/lab/lab.py down      stop every process the lab started (by PID) and remove its state
    python tools/lab/lab.py status    what runs

    python tools/lab/lab.py controller [--refresh S]   (started by up) runs Volcano's scheduler, controller-manager
        and webhook-manager locally with the configuration deployed in the cluster (restarted when it changes), points
        Volcano's webhooks at 127.0.0.1, and emulates volcano-vgpu-device-plugin on every GPU node its DaemonSet runs

State (PKI, etcd data, kubeconfig, logs, PIDs) lives in $GPUFLEET_LAB_DIR (default $GPUFLEET_CACHE/lab). Nodes come
from a YAML file (default tools/lab/nodes.yml, the article's cluster). Volcano runs from the pinned module (v1.10.0,
see README.md); its chart and CRDs come from the same module.
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import json
import os
import pathlib
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
import zlib

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

HERE = pathlib.Path(__file__).resolve().parent
# The emulated plugin and the device_plugin role share one reading of the plugin's code.
sys.path.insert(0, str(HERE.parents[1] / "plugins" / "module_utils"))
import _capacity as cap  # noqa: E402  pylint: disable=wrong-import-position,import-error
import _vgpu_plugin as vgpu  # noqa: E402  pylint: disable=wrong-import-position,import-error
CACHE = pathlib.Path(os.environ.get("GPUFLEET_CACHE", "/var/cache/gpufleet"))
LAB = pathlib.Path(os.environ.get("GPUFLEET_LAB_DIR", str(CACHE / "lab")))
KWOK_STAGES = ["node/fast/node-initialize.yaml", "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
               "pod/fast/pod-ready.yaml", "pod/fast/pod-delete.yaml", "pod/fast/pod-complete.yaml"]
SERVICE_CIDR = "10.96.0.0/16"


def log(msg):
    print("[lab] %s" % msg, flush=True)


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def binaries(groups=("etcd", "kubernetes", "kwok", "helm", "volcano")):
    """Build (or reuse) the pinned binaries; return {name: path} from the builds of the current pins."""
    subprocess.run([str(HERE / "build.sh")] + list(groups), check=True)
    found = {}
    for group in groups:
        for exe in (CACHE / "lab-bin" / group).resolve().iterdir():
            if exe.is_file() and os.access(exe, os.X_OK):
                found[exe.name] = exe
    return found


# --- PKI ---------------------------------------------------------------------------------------------------------

def _key():
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _write(path, key=None, cert=None):
    if key is not None:
        path.with_suffix(".key").write_bytes(key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()))
        path.with_suffix(".key").chmod(0o600)
    if cert is not None:
        path.with_suffix(".crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _cert(subject, key, issuer_cert, issuer_key, ca=False, sans=(), client=False):
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(subject)
               .issuer_name(issuer_cert.subject if issuer_cert else subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=30))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), True)
    else:
        usage = [x509.ExtendedKeyUsageOID.CLIENT_AUTH] if client else [x509.ExtendedKeyUsageOID.SERVER_AUTH]
        builder = builder.add_extension(x509.ExtendedKeyUsage(usage), critical=False)
    if sans:
        names = [x509.IPAddress(ipaddress.ip_address(s)) if s[0].isdigit() else x509.DNSName(s) for s in sans]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(issuer_key or key, hashes.SHA256())


def _name(cn, org=None):
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def make_pki(pki):
    pki.mkdir(parents=True, exist_ok=True)
    ca_key = _key()
    ca = _cert(_name("gpufleet-lab-ca"), ca_key, None, None, ca=True)
    _write(pki / "ca", ca_key, ca)
    server_key = _key()
    service_ip = str(next(ipaddress.ip_network(SERVICE_CIDR).hosts()))
    _write(pki / "apiserver", server_key, _cert(
        _name("kube-apiserver"), server_key, ca, ca_key,
        sans=("127.0.0.1", service_ip, "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc")))
    for name, cn, org in (("admin", "gpufleet-lab-admin", "system:masters"),
                          ("controller-manager", "system:kube-controller-manager", None),
                          ("scheduler", "system:kube-scheduler", None),
                          ("kwok", "system:kwok-controller", "system:masters")):
        key = _key()
        _write(pki / name, key, _cert(_name(cn, org), key, ca, ca_key, client=True))
    sa_key = _key()
    _write(pki / "sa", sa_key)
    (pki / "sa.pub").write_bytes(sa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))


def kubeconfig(path, server, pki, user):
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "gpufleet-lab",
        "clusters": [{"name": "gpufleet-lab", "cluster": {"server": server,
                                                          "certificate-authority": str(pki / "ca.crt")}}],
        "users": [{"name": user, "user": {"client-certificate": str(pki / ("%s.crt" % user)),
                                          "client-key": str(pki / ("%s.key" % user))}}],
        "contexts": [{"name": "gpufleet-lab", "context": {"cluster": "gpufleet-lab", "user": user}}],
    }))
    path.chmod(0o600)


# --- processes ---------------------------------------------------------------------------------------------------

def start(name, argv, state, env=None):
    logfile = open(LAB / "logs" / ("%s.log" % name), "ab")  # pylint: disable=consider-using-with
    proc = subprocess.Popen(argv, stdout=logfile, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    state["pids"][name] = proc.pid
    (LAB / "state.json").write_text(json.dumps(state, indent=2))
    log("started %s (pid %d)" % (name, proc.pid))
    return proc


def wait_ready(url, pki, timeout=90):
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
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


def module_dir(group, module):
    return pathlib.Path(subprocess.run(["go", "list", "-m", "-f", "{{.Dir}}", module], cwd=HERE / group,
                                       capture_output=True, text=True, check=True).stdout.strip())


def stages_config(path):
    """kwok's own stage definitions, from the pinned kwok module.

    pod-complete is narrowed to batch/v1 Jobs (helm hooks such as Volcano's admission-init must finish); its own
    selector matches any owner of kind Job, which would also end every Volcano Job's pods (batch.volcano.sh).
    """
    base = module_dir("kwok", "sigs.k8s.io/kwok") / "kustomize" / "stage"
    docs = []
    for stage in KWOK_STAGES:
        doc = yaml.safe_load((base / stage).read_text())
        if doc["metadata"]["name"] == "pod-complete":
            doc["spec"]["selector"]["matchExpressions"].append(
                {"key": ".metadata.ownerReferences.[].apiVersion", "operator": "In", "values": ["batch/v1"]})
        docs.append(doc)
    path.write_text(yaml.safe_dump_all(docs))


def node_object(node):
    labels = {"kubernetes.io/hostname": node["name"], "kubernetes.io/os": "linux", "type": "kwok"}
    labels.update(node.get("labels", {}))
    # No kwok taint: every node here is simulated, so workloads need no toleration to land on one.
    taints = []
    if node.get("control_plane"):
        labels["node-role.kubernetes.io/control-plane"] = ""
        taints.append({"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"})
    capacity = {"cpu": str(node.get("cpu", 32)), "memory": node.get("memory", "256Gi"), "pods": "110"}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": node["name"], "labels": labels,
                     "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"}},
        "spec": {"taints": taints},
        "status": {"capacity": capacity, "allocatable": capacity},
    }


def up(args):
    if (LAB / "state.json").exists():
        raise SystemExit("a lab is already running or was not stopped (%s); run 'lab.py down' first" % LAB)
    t0 = time.time()
    bins = binaries()
    for d in ("pki", "etcd", "logs", "bin"):
        (LAB / d).mkdir(parents=True, exist_ok=True)
    pki = LAB / "pki"
    make_pki(pki)
    ports = {"etcd": free_port(), "etcd-peer": free_port(), "apiserver": free_port()}
    server = "https://127.0.0.1:%d" % ports["apiserver"]
    nodes_file = pathlib.Path(args.nodes).resolve()
    state = {"pids": {}, "ports": ports, "server": server, "kubeconfig": str(LAB / "kubeconfig"),
             "nodes_file": str(nodes_file), "bin": {k: str(v) for k, v in bins.items()}}
    start("etcd", [str(bins["etcd"]), "--data-dir", str(LAB / "etcd"),
                   "--listen-client-urls", "http://127.0.0.1:%d" % ports["etcd"],
                   "--advertise-client-urls", "http://127.0.0.1:%d" % ports["etcd"],
                   "--listen-peer-urls", "http://127.0.0.1:%d" % ports["etcd-peer"],
                   "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % ports["etcd-peer"],
                   "--initial-cluster", "default=http://127.0.0.1:%d" % ports["etcd-peer"],
                   "--unsafe-no-fsync"], state)
    start("kube-apiserver", [
        str(bins["kube-apiserver"]), "--etcd-servers", "http://127.0.0.1:%d" % ports["etcd"],
        "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--secure-port", str(ports["apiserver"]),
        "--tls-cert-file", str(pki / "apiserver.crt"), "--tls-private-key-file", str(pki / "apiserver.key"),
        "--client-ca-file", str(pki / "ca.crt"), "--authorization-mode", "Node,RBAC",
        "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
        "--service-account-key-file", str(pki / "sa.pub"), "--service-account-signing-key-file", str(pki / "sa.key"),
        "--service-cluster-ip-range", SERVICE_CIDR, "--allow-privileged=true",
        # Webhooks are called at an endpoint of their Service (the lab controller's EndpointSlice), not a ClusterIP.
        "--enable-aggregator-routing=true"], state)
    wait_ready(server + "/readyz", pki)
    for user in ("admin", "controller-manager", "scheduler", "kwok"):
        kubeconfig(LAB / ("kubeconfig" if user == "admin" else "%s.kubeconfig" % user), server, pki, user)
    start("kube-controller-manager", [
        str(bins["kube-controller-manager"]), "--kubeconfig", str(LAB / "controller-manager.kubeconfig"),
        "--authentication-kubeconfig", str(LAB / "controller-manager.kubeconfig"),
        "--authorization-kubeconfig", str(LAB / "controller-manager.kubeconfig"),
        "--bind-address", "127.0.0.1", "--secure-port", "0", "--leader-elect=false",
        "--use-service-account-credentials", "--service-account-private-key-file", str(pki / "sa.key"),
        "--root-ca-file", str(pki / "ca.crt"), "--controllers",
        # The lab controller owns the EndpointSlices: kwok's pod IPs lead nowhere.
        "*,-nodeipam,-endpoint,-endpointslice,-endpointslicemirroring"], state)
    # kube-scheduler places what Volcano does not: the charts' Deployments, DaemonSet pods, helm hook Jobs.
    start("kube-scheduler", [
        str(bins["kube-scheduler"]), "--kubeconfig", str(LAB / "scheduler.kubeconfig"),
        "--authentication-kubeconfig", str(LAB / "scheduler.kubeconfig"),
        "--authorization-kubeconfig", str(LAB / "scheduler.kubeconfig"),
        "--bind-address", "127.0.0.1", "--secure-port", "0", "--leader-elect=false"], state)
    stages_config(LAB / "kwok.yaml")
    start("kwok", [str(bins["kwok"]), "--kubeconfig", str(LAB / "kwok.kubeconfig"), "--config", str(LAB / "kwok.yaml"),
                   "--manage-nodes-with-annotation-selector", "kwok.x-k8s.io/node=fake",
                   # Node leases are the heartbeat the node lifecycle controller watches; without them nodes flap
                   # NotReady and their pods lose Ready.
                   "--node-lease-duration-seconds", "40",
                   "--server-address", "127.0.0.1:%d" % free_port()], state)
    create_nodes(yaml.safe_load(nodes_file.read_text())["nodes"])
    chart = module_dir("volcano", "volcano.sh/volcano") / "installer" / "helm" / "chart" / "volcano"
    # What the roles and the inventories/lab group vars need to find this lab. Host containers are named after the
    # lab directory, so two labs (make site's and the tests') never take each other's hosts.
    tag = "%06x" % (zlib.crc32(str(LAB).encode()) & 0xFFFFFF)
    gpu_nodes = [n["name"] for n in yaml.safe_load(nodes_file.read_text())["nodes"] if n.get("gpus")]
    (LAB / "bin" / "helm").symlink_to(bins["helm"])
    (LAB / "lab.json").write_text(json.dumps({
        "kubeconfig": str(LAB / "kubeconfig"), "helm": str(LAB / "bin" / "helm"), "volcano_chart": str(chart),
        "volcano_version": chart_version(chart), "nodes_file": str(nodes_file),
        "hosts": {n: "gpufleet-lab-%s-%s" % (tag, n) for n in gpu_nodes}}, indent=2))
    if not args.no_hosts:
        start_hosts(read_json(LAB / "lab.json")["hosts"], state)
    start("lab-controller", [sys.executable, str(HERE / "lab.py"), "controller"], state)
    if not args.bare:
        subprocess.run([str(bins["helm"]), "upgrade", "--install", "volcano", str(chart), "--namespace",
                        "volcano-system", "--create-namespace", "--kubeconfig", str(LAB / "kubeconfig"),
                        "--values", str(HERE / "volcano-values.yaml"), "--wait", "--timeout", "5m"],
                       check=True, stdout=subprocess.DEVNULL)
        log("Volcano %s installed from its module's chart" % chart_version(chart))
        wait_volcano()
    log("ready in %.0f s: export KUBECONFIG=%s" % (time.time() - t0, LAB / "kubeconfig"))


HOST_IMAGE = os.environ.get("GPUFLEET_LAB_HOST_IMAGE", "localhost/gpufleet-el9:9")
# The podman settings the test hosts need here (runc, ulimits), as `make` sets them.
os.environ.setdefault("CONTAINERS_CONF", str(HERE.parents[1] / "tests" / "harness" / "containers.conf"))


def start_hosts(hosts, state):
    """Each GPU node is also a podman test host (EL9-like systemd container), prepared by tools/lab/hosts.yml as a
    freshly installed GPU server: the node layers of site.yml run against it. hosts: {node: container name}."""
    have_image = shutil.which("podman") is not None and subprocess.run(
        ["podman", "image", "exists", HOST_IMAGE], check=False).returncode == 0
    if not have_image:
        log("no podman or no test-host image %s (make images): GPU nodes are not podman hosts" % HOST_IMAGE)
        return
    names = sorted(hosts.values())
    state["containers"] = names
    (LAB / "state.json").write_text(json.dumps(state, indent=2))
    for node, name in sorted(hosts.items()):
        subprocess.run(["podman", "rm", "-f", name], check=False, capture_output=True)
        subprocess.run(["podman", "run", "-d", "--name", name, "--hostname", node, "--systemd=always",
                        "-v", "%s:/srv/gpufleet-repo:ro" % (CACHE / "repos"), HOST_IMAGE, "/sbin/init"],
                       check=True, capture_output=True)
    log("GPU hosts started: %s; preparing them (tools/lab/hosts.yml)" % ", ".join(names))
    env = dict(os.environ, GPUFLEET_LAB_DIR=str(LAB), ANSIBLE_STDOUT_CALLBACK="ansible.builtin.minimal")
    result = subprocess.run(["ansible-playbook", "-i", str(HERE.parents[1] / "inventories" / "lab"),
                             str(HERE / "hosts.yml")], env=env, capture_output=True, text=True, check=False)
    (LAB / "logs" / "hosts-prepare.log").write_text(result.stdout + result.stderr)
    if result.returncode != 0:
        raise SystemExit("preparing the GPU hosts failed; see %s" % (LAB / "logs" / "hosts-prepare.log"))
    state["hosts_ready"] = True
    (LAB / "state.json").write_text(json.dumps(state, indent=2))


def chart_version(chart):
    return yaml.safe_load((chart / "Chart.yaml").read_text())["version"]


def kube():
    from kubernetes import config  # pylint: disable=import-outside-toplevel

    return config.new_client_from_config(str(LAB / "kubeconfig"))


def wait_volcano(timeout=120):
    """Until the lab controller runs Volcano's processes, the webhooks answer and the default queue exists."""
    from kubernetes import client  # pylint: disable=import-outside-toplevel

    objects = client.CustomObjectsApi(kube())
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        children = read_json(LAB / "children.json")
        running = sorted(name for name, child in children.items() if child.get("ready"))
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


def read_json(path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


DEFAULT_QUEUE = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": "default"},
                 "spec": {"weight": 1, "reclaimable": True}}


# --- the lab controller: runs what the cluster's Deployments/DaemonSets describe -------------------------------------

class Child:
    """A local process standing in for a Deployment's pods; restarted when what it was started from changes."""

    def __init__(self, name):
        self.name = name
        self.proc = None
        self.fingerprint = None
        self.started = 0.0

    def ensure(self, fingerprint, argv, env=None, prepare=None):
        if self.proc is not None and self.proc.poll() is None and fingerprint == self.fingerprint:
            return False
        if self.proc is not None and self.proc.poll() is not None and time.time() - self.started < 2:
            return False  # crash-looping: back off a little
        self.stop()
        if prepare:
            prepare()
        logfile = open(LAB / "logs" / ("%s.log" % self.name), "ab")  # pylint: disable=consider-using-with
        self.proc = subprocess.Popen(argv, stdout=logfile, stderr=subprocess.STDOUT, start_new_session=True, env=env)
        self.fingerprint, self.started = fingerprint, time.time()
        log("controller: started %s (pid %d)" % (self.name, self.proc.pid))
        return True

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
            log("controller: stopped %s (pid %d)" % (self.name, self.proc.pid))
        self.proc, self.fingerprint = None, None

    def alive(self):
        return self.proc is not None and self.proc.poll() is None


def _mounted_configmap(template, container, path):
    """(name, key) of the ConfigMap a container sees at `path` (a file inside a mounted ConfigMap volume)."""
    directory, key = os.path.split(path)
    for mount in container.volume_mounts or []:
        if mount.mount_path.rstrip("/") == directory.rstrip("/"):
            for volume in template.spec.volumes or []:
                if volume.name == mount.name and volume.config_map is not None:
                    return volume.config_map.name, key
    return None, key


def host_ip():
    """This machine's own non-loopback IPv4 address (the address the lab's Service endpoints point at)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(("10.255.255.255", 1))  # no packet is sent: this only picks the outgoing address
            address = sock.getsockname()[0]
        except OSError:
            address = ""
    if not address or address.startswith("127."):
        raise SystemExit("the lab needs a non-loopback IPv4 address on this machine for its webhook endpoints")
    return address


def _fingerprint(*parts):
    return zlib.crc32(json.dumps(parts, sort_keys=True, default=str).encode())


class LabController:  # pylint: disable=too-many-instance-attributes
    """Runs Volcano's scheduler, controller-manager and webhook-manager locally with the configuration deployed in
    the cluster, routes Volcano's admission Service to the local webhook-manager, and emulates the vGPU device plugin on every
    node its DaemonSet runs on."""

    def __init__(self, refresh):
        from kubernetes import client  # pylint: disable=import-outside-toplevel

        state = read_json(LAB / "state.json")
        self.bins = {k: pathlib.Path(v) for k, v in state["bin"].items()}
        self.hardware = {n["name"]: n["gpus"] for n in yaml.safe_load(
            pathlib.Path(state["nodes_file"]).read_text())["nodes"] if n.get("gpus")}
        api = kube()
        self.core, self.apps = client.CoreV1Api(api), client.AppsV1Api(api)
        self.objects = client.CustomObjectsApi(api)
        self.discovery = client.DiscoveryV1Api(api)
        self.host_ip = host_ip()
        self.client = client
        self.children = {name: Child(name) for name in ("vc-scheduler", "vc-controller-manager", "vc-webhook-manager")}
        self.ports = {"scheduler-metrics": free_port(), "webhook": free_port()}
        self.plugin_pods = {}  # pod UID -> settings the emulated plugin read when that pod started
        self.refresh, self.last_refresh = refresh, 0.0
        self.stuck_since, self.last_unstick, self.unstick_noted = {}, 0.0, {}
        self.env = dict(os.environ, KUBECONFIG=str(LAB / "kubeconfig"))  # Volcano's vgpu code reads KUBECONFIG

    def save(self):
        state = {name: {"pid": c.proc.pid if c.alive() else None, "ready": c.alive(), "ports": self.ports}
                 for name, c in self.children.items()}
        # The apiserver's service proxy only reaches pod IPs, and kwok's pods have none here: clients of the
        # scheduler's metrics (the smoke test) use this URL in the lab.
        state["vc-scheduler"]["metrics_url"] = "http://%s:%d/metrics" % (self.host_ip, self.ports["scheduler-metrics"])
        (LAB / "children.json").write_text(json.dumps(state, indent=2))

    def deployment(self, app):
        found = self.apps.list_deployment_for_all_namespaces(label_selector="app=%s" % app).items
        found = [d for d in found if (d.spec.replicas or 0) > 0]
        return found[0] if found else None

    def configmap_text(self, namespace, name, key):
        try:
            return (self.core.read_namespaced_config_map(name, namespace).data or {}).get(key)
        except self.client.exceptions.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def sync_scheduler(self):
        child = self.children["vc-scheduler"]
        deploy = self.deployment("volcano-scheduler")
        if deploy is None:
            child.stop()
            return
        container = deploy.spec.template.spec.containers[0]
        conf_path = vgpu.flag_value(container.args, "scheduler-conf") or "/volcano.scheduler/volcano-scheduler.conf"
        cm_name, key = _mounted_configmap(deploy.spec.template, container, conf_path)
        conf = self.configmap_text(deploy.metadata.namespace, cm_name, key) if cm_name else None
        if conf is None:
            log("controller: scheduler ConfigMap %s/%s key %s not found; scheduler not started"
                % (deploy.metadata.namespace, cm_name, key))
            child.stop()
            return
        argv = [str(self.bins["scheduler"]), "--kubeconfig", str(LAB / "kubeconfig"),
                "--scheduler-conf", str(LAB / "scheduler" / "volcano-scheduler.conf"), "--leader-elect=false", "--enable-metrics",
                "--listen-address", "%s:%d" % (self.host_ip, self.ports["scheduler-metrics"]),
                "--healthz-address", "127.0.0.1:%d" % free_port(), "--schedule-period", "500ms"]
        name = vgpu.flag_value(container.args, "scheduler-name")
        if name:
            argv.append("--scheduler-name=%s" % name)
        # Restarted on any change of the conf or the pod template (a rollout): deviceshare reads its settings once.
        conf_file = LAB / "scheduler" / "volcano-scheduler.conf"
        conf_file.parent.mkdir(exist_ok=True)
        child.ensure(_fingerprint(conf, deploy.spec.template.to_dict()), argv, self.env,
                     prepare=lambda: conf_file.write_text(conf))

    def sync_controller_manager(self):
        child = self.children["vc-controller-manager"]
        deploy = self.deployment("volcano-controller")
        if deploy is None:
            child.stop()
            return
        child.ensure(_fingerprint(deploy.spec.template.to_dict()), [
            str(self.bins["controller-manager"]), "--kubeconfig", str(LAB / "kubeconfig"), "--leader-elect=false",
            "--healthz-address", "127.0.0.1:%d" % free_port()], self.env)

    def sync_admission(self):
        deploy = self.deployment("volcano-admission")
        if deploy is None:
            self.children["vc-webhook-manager"].stop()
            return
        container = deploy.spec.template.spec.containers[0]
        namespace = deploy.metadata.namespace
        service = vgpu.flag_value(container.args, "webhook-service-name") or "volcano-admission-service"
        enabled = vgpu.flag_value(container.args, "enabled-admission") or ""
        conf_path = vgpu.flag_value(container.args, "admission-conf") or ""
        cm_name, key = _mounted_configmap(deploy.spec.template, container, conf_path) if conf_path else (None, None)
        conf = (self.configmap_text(namespace, cm_name, key) if cm_name else None) or ""
        # The webhook-manager watches its conf file (a ConfigMap volume in the cluster): rewritten, not restarted, so
        # that no pod creation meets a webhook that is not listening.
        conf_file = LAB / "admission" / "volcano-admission.conf"
        conf_file.parent.mkdir(exist_ok=True)
        if not conf_file.exists() or conf_file.read_text() != conf:
            conf_file.write_text(conf)
        current = self.children["vc-webhook-manager"]
        fingerprint = _fingerprint(deploy.spec.template.to_dict())
        if current.alive() and current.fingerprint == fingerprint:
            self.serve_service(namespace, service, self.ports["webhook"])
            return
        # A rolling update, as the Deployment would do it: the new webhook-manager serves before the old one stops,
        # so the apiserver never meets a webhook that is not listening.
        port = free_port()
        cert = self.serving_cert(namespace, service)
        argv = [str(self.bins["webhook-manager"]), "--kubeconfig", str(LAB / "kubeconfig"),
                "--enabled-admission=%s" % enabled, "--tls-cert-file", str(cert.with_suffix(".crt")),
                "--tls-private-key-file", str(cert.with_suffix(".key")), "--ca-cert-file", str(LAB / "pki" / "ca.crt"),
                "--admission-conf", str(conf_file), "--webhook-namespace", namespace,
                "--webhook-service-name", service, "--listen-address", self.host_ip,
                "--port", str(port), "--enable-healthz=false"]
        fresh = Child("vc-webhook-manager")
        fresh.ensure(fingerprint, argv, self.env)
        deadline = time.time() + 30
        while time.time() < deadline and fresh.alive():
            with socket.socket() as sock:
                if sock.connect_ex((self.host_ip, port)) == 0:
                    break
            time.sleep(0.2)
        if not fresh.alive():
            log("controller: webhook-manager exited at start; see %s" % (LAB / "logs" / "vc-webhook-manager.log"))
            return
        self.ports["webhook"] = port
        self.serve_service(namespace, service, port)
        time.sleep(1)  # the apiserver's endpoint informer catches up before the old one goes
        current.stop()
        self.children["vc-webhook-manager"] = fresh

    def serve_service(self, namespace, service, port):
        """Route a Service to this machine: an EndpointSlice with the host's address (the apiserver calls webhooks
        at a Service endpoint with --enable-aggregator-routing; loopback addresses are not allowed there)."""
        svc = self.core.read_namespaced_service(service, namespace)
        ports = [{"name": p.name or "", "port": port, "protocol": "TCP"} for p in svc.spec.ports or []]
        wanted = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                  "metadata": {"name": "%s-lab" % service, "namespace": namespace,
                               "labels": {"kubernetes.io/service-name": service,
                                          "endpointslice.kubernetes.io/managed-by": "gpufleet-lab"}},
                  "addressType": "IPv4", "endpoints": [{"addresses": [self.host_ip], "conditions": {"ready": True}}],
                  "ports": ports}
        try:
            current = self.discovery.read_namespaced_endpoint_slice("%s-lab" % service, namespace)
            if [(p.name, p.port) for p in current.ports or []] != [(p["name"], p["port"]) for p in ports]:
                self.discovery.replace_namespaced_endpoint_slice("%s-lab" % service, namespace, wanted)
        except self.client.exceptions.ApiException as exc:
            if exc.status != 404:
                raise
            self.discovery.create_namespaced_endpoint_slice(namespace, wanted)
            log("controller: %s/%s served at %s:%d" % (namespace, service, self.host_ip, port))

    def serving_cert(self, namespace, service):
        """Certificate for the names the apiserver checks when it calls the Service (<svc>.<ns>.svc)."""
        path = LAB / "pki" / ("serve-%s.%s" % (service, namespace))
        if not path.with_suffix(".crt").exists():
            ca_key = serialization.load_pem_private_key((LAB / "pki" / "ca.key").read_bytes(), None)
            ca = x509.load_pem_x509_certificate((LAB / "pki" / "ca.crt").read_bytes())
            key = _key()
            names = (self.host_ip, service, "%s.%s" % (service, namespace), "%s.%s.svc" % (service, namespace))
            _write(path, key, _cert(_name("%s.%s.svc" % (service, namespace)), key, ca, ca_key, sans=names))
        return path

    def ensure_default_queue(self):
        if not self.children["vc-webhook-manager"].alive() and self.deployment("volcano-admission") is not None:
            return
        try:
            self.objects.get_cluster_custom_object("scheduling.volcano.sh", "v1beta1", "queues", "default")
        except self.client.exceptions.ApiException as exc:
            if exc.status == 404:
                try:
                    self.objects.create_cluster_custom_object("scheduling.volcano.sh", "v1beta1", "queues",
                                                              DEFAULT_QUEUE)
                except self.client.exceptions.ApiException as create_exc:
                    log("controller: default queue not created yet: %s" % create_exc.reason)

    # --- emulated volcano-vgpu-device-plugin ---

    def plugin_settings(self, pod, node_name):
        """What the plugin in this pod read at its start (config is read once; a changed ConfigMap needs a restart)."""
        container = next((c for c in pod.spec.containers if "volcano-vgpu-device-plugin" in (c.image or "")
                          and "volcano-vgpu-monitor" not in " ".join((c.command or []) + (c.args or []))), None)
        if container is None:
            return None
        version = vgpu.image_version(container.image)
        device_text = None
        for namespace in ("kube-system", "volcano-system"):  # the plugin's own lookup order
            device_text = self.configmap_text(namespace, "volcano-vgpu-device-config", "device-config.yaml")
            if device_text is not None:
                break
        device = (yaml.safe_load(device_text) or {}).get("nvidia") if device_text is not None else None
        node_cfg = None
        cm_name, dummy = _mounted_configmap(pod, container, "/config/config.json")
        if cm_name:
            text = self.configmap_text(pod.metadata.namespace, cm_name, "config.json")
            node_cfg = json.loads(text) if text else None
        try:
            return vgpu.resolve_config(node_name, device, node_cfg, (container.command or [])[1:] + (container.args or []),
                                       version)
        except (vgpu.PluginConfigError, ValueError) as exc:
            log("controller: plugin pod %s on %s would fail: %s" % (pod.metadata.name, node_name, exc))
            return {"error": str(exc)}

    def sync_device_plugin(self):
        active, seen = {}, set()
        for ds in self.apps.list_daemon_set_for_all_namespaces().items:
            images = [c.image or "" for c in ds.spec.template.spec.containers]
            if not any("volcano-vgpu-device-plugin" in image for image in images):
                continue
            selector = ",".join("%s=%s" % kv for kv in (ds.spec.selector.match_labels or {}).items())
            for pod in self.core.list_namespaced_pod(ds.metadata.namespace, label_selector=selector).items:
                if pod.status.phase != "Running" or pod.metadata.deletion_timestamp is not None:
                    continue
                seen.add(pod.metadata.uid)
                node_name = pod.spec.node_name
                if node_name not in self.hardware:
                    continue  # a node without GPUs: the real plugin would crash-loop on NVML init
                if pod.metadata.uid not in self.plugin_pods:
                    self.plugin_pods[pod.metadata.uid] = self.plugin_settings(pod, node_name)
                if self.plugin_pods[pod.metadata.uid]:
                    active[node_name] = self.plugin_pods[pod.metadata.uid]
        refresh = time.time() - self.last_refresh >= self.refresh
        stamp = time.strftime("%Y.%m.%d %H:%M:%S")
        nodes = {node.metadata.name: node for node in self.core.list_node().items} if active else {}
        for node_name, settings in sorted(active.items()):
            if "error" in settings or node_name not in nodes:
                continue
            value, resources = vgpu.registration(node_gpus(node_name, self.hardware[node_name]), settings)
            resources = {k: str(v) for k, v in resources.items()}
            node = nodes[node_name]
            annotations = node.metadata.annotations or {}
            if any(node.status.allocatable.get(k) != v for k, v in resources.items()):
                self.core.patch_node_status(node_name, {"status": {"capacity": resources, "allocatable": resources}})
                log("controller: %s registers %s" % (node_name, resources))
            patch = {}
            if annotations.get("volcano.sh/node-vgpu-register") != value:
                patch["volcano.sh/node-vgpu-register"] = value
            # The handshake of all GPU nodes is refreshed together: each refresh makes Volcano 1.10 rebuild the node's
            # device accounting, which is what clears vGPUs its deviceshare plugin leaks while a gang cannot fit yet
            # (predicates' Allocate mutates the device state shared with the cache; Release is a no-op).
            if refresh or patch or not annotations.get("volcano.sh/node-vgpu-handshake", "").startswith(
                    ("Reported", "Requesting")):
                patch["volcano.sh/node-vgpu-handshake"] = "Reported " + stamp
            if patch:
                self.core.patch_node(node_name, {"metadata": {"annotations": patch}})
        if refresh:
            self.last_refresh = time.time()
        for uid in set(self.plugin_pods) - seen:
            del self.plugin_pods[uid]

    def unstick_gangs(self):
        """Volcano 1.10 leaks the vGPUs it tentatively gives a gang that does not fit (see README.md); resyncs clear it
        only by chance. When a gang has waited for 20 s although its pods fit what the registered GPUs have left
        after the bound pods' allocations, the scheduler is restarted: a fresh cache, as after the upstream fix.
        It never makes a gang fit that does not: capacity is counted from the API, not from the scheduler."""
        now = time.time()
        stuck = {}
        try:
            groups = self.objects.list_cluster_custom_object("scheduling.volcano.sh", "v1beta1", "podgroups")["items"]
        except self.client.exceptions.ApiException as exc:
            if exc.status == 404:  # Volcano's CRDs not installed yet
                return
            raise
        waiting = [group for group in groups
                   # Waiting gangs (their condition messages vary between "gpu fitted" and plain unschedulable
                   # counts; "Unknown" is a gang with some pods placed). Single pods do not leak: never restarted for.
                   if (group.get("status") or {}).get("phase") in ("Pending", "Inqueue", "Unknown")
                   and int((group.get("spec") or {}).get("minMember") or 0) > 1]
        for group in waiting:
            key = "%s/%s" % (group["metadata"]["namespace"], group["metadata"]["name"])
            stuck[key] = self.stuck_since.get(key, now)
        due = [group for group in waiting
               if now - stuck["%s/%s" % (group["metadata"]["namespace"], group["metadata"]["name"])] >= 20]
        if due and now - self.last_unstick >= 30:
            # One list of all pods, only when a group has waited long enough (a fleet has thousands of groups).
            pods = self.core.list_pod_for_all_namespaces().items
            free = cap.free_by_gpu(
                [(n.metadata.annotations or {}).get(cap.REGISTER) for n in self.core.list_node().items],
                [(p.metadata.annotations or {}).get(cap.POD_DEVICES) for p in pods
                 if p.spec.node_name and p.status.phase in ("Pending", "Running")])
            by_group = {}
            for pod in pods:
                name = (pod.metadata.annotations or {}).get("scheduling.k8s.io/group-name")
                if name:
                    by_group.setdefault("%s/%s" % (pod.metadata.namespace, name), []).append(pod)
            for group in due:
                key = "%s/%s" % (group["metadata"]["namespace"], group["metadata"]["name"])
                members = by_group.get(key, [])
                need = int((group.get("spec") or {}).get("minMember") or 0)
                placed = sum(1 for pod in members if pod.spec.node_name)
                requests = [memory for pod in members if not pod.spec.node_name for memory in vgpu_requests(pod)]
                if not requests:
                    continue  # no waiting pod asks for vGPUs (or its pods are not created yet): nothing to judge
                if len(requests) < need - placed or not cap.fits(requests, free):
                    if now - self.unstick_noted.get(key, 0) >= 30:
                        self.unstick_noted[key] = now
                        log("controller: gang %s waits for %.0f s: %d pods need vGPUs %s; free by the API's count: "
                            "%d vGPUs, %d memory units" % (key, now - stuck[key], len(requests), requests,
                                                           sum(c["slots"] for c in free.values()),
                                                           sum(c["memory"] for c in free.values())))
                    continue
                log("controller: gang %s refused for %.0f s (phase %s) although its %d pods fit the free vGPUs: "
                    "restarting vc-scheduler (Volcano 1.10 device-accounting leak)"
                    % (key, now - stuck[key], group["status"].get("phase"), len(requests)))
                self.children["vc-scheduler"].stop()
                self.last_unstick = now
                stuck[key] = now
                break
        self.stuck_since = stuck

    def run(self):
        running = {"on": True}
        signal.signal(signal.SIGTERM, lambda *a: running.update(on=False))
        while running["on"]:
            took = {}
            for step in (self.sync_admission, self.sync_controller_manager, self.sync_scheduler,
                         self.ensure_default_queue, self.sync_device_plugin, self.unstick_gangs):
                started = time.time()
                try:
                    step()
                except Exception as exc:  # pylint: disable=broad-except  # keep controlling; the log tells
                    log("controller: %s failed: %s" % (step.__name__, exc))
                took[step.__name__] = time.time() - started
            if sum(took.values()) > 10:
                # A slow pass delays handshake answers: Volcano drops a node's vGPUs after 60 s without one.
                log("controller: slow pass (%s)" % ", ".join("%s %.1f s" % kv for kv in sorted(took.items())))
            self.save()
            time.sleep(1)
        for child in self.children.values():
            child.stop()
        self.save()


def vgpu_requests(pod):
    """Memory units of each vGPU a pod asks for (one entry per vGPU; only pods that ask for vGPUs)."""
    from kubernetes.utils import parse_quantity  # pylint: disable=import-outside-toplevel

    requests = []
    for container in pod.spec.containers:
        limits = (container.resources and container.resources.limits) or {}
        # The API server canonicalises quantities: a request of 1000 reads back as "1k".
        count = int(parse_quantity(limits.get("volcano.sh/vgpu-number", "0") or "0"))
        requests += [int(parse_quantity(limits.get("volcano.sh/vgpu-memory", "0") or "0"))] * count
    return requests


def node_gpus(node_name, gpus):
    """The simulated hardware of a node as NVML would list it (stable UUIDs derived from the node name)."""
    return [{"uuid": "GPU-%08x-0000-4000-8000-%012d" % (zlib.crc32(node_name.encode()), index), "index": index,
             "model": gpus["model"], "memory_mib": gpus["memory_mib"]} for index in range(gpus["count"])]


def controller(args):
    LabController(args.refresh).run()


def create_nodes(nodes):
    from kubernetes import client, config  # pylint: disable=import-outside-toplevel

    api = client.CoreV1Api(config.new_client_from_config(str(LAB / "kubeconfig")))
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


def _stop(name, pid, grace=5):
    """SIGTERM to the process group a lab process leads, SIGKILL after `grace` seconds; only processes of this lab
    (their command line names its directory or its binaries), so a recycled PID is never hit."""
    try:
        cmdline = pathlib.Path("/proc/%d/cmdline" % pid).read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return
    if str(LAB) not in cmdline and "lab.py" not in cmdline and str(CACHE / "lab-bin") not in cmdline:
        return
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.time() + grace
    while time.time() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        os.killpg(pid, signal.SIGKILL)
    log("stopped %s (pid %d)" % (name, pid))


def down(_args):
    state_file = LAB / "state.json"
    if not state_file.exists():
        log("nothing to stop")
        return
    state = json.loads(state_file.read_text())
    pids = dict(state["pids"])
    # The controller first: it would start a child again that it sees gone. Then its children (it stops them on
    # SIGTERM, but not when it had to be killed), read after it is gone; then the rest, in reverse start order.
    if "lab-controller" in pids:
        _stop("lab-controller", pids.pop("lab-controller"), grace=15)
    for name, child in read_json(LAB / "children.json").items():
        if child.get("pid"):
            _stop("%s (controller child)" % name, child["pid"])
    for name, pid in reversed(list(pids.items())):
        _stop(name, pid)
    for name in state.get("containers", []):
        subprocess.run(["podman", "rm", "-f", "-t", "0", name], check=False, capture_output=True)
        log("removed host %s" % name)
    shutil.rmtree(LAB)


def status(_args):
    state_file = LAB / "state.json"
    if not state_file.exists():
        print("not running")
        return 1
    state = json.loads(state_file.read_text())
    gone = 0
    for name, pid in state["pids"].items():
        alive = os.path.exists("/proc/%d" % pid)
        gone += not alive
        print("%-24s pid %-8d %s" % (name, pid, "running" if alive else "GONE"))
    for name, child in read_json(LAB / "children.json").items():
        print("%-24s pid %-8s %s" % (name, child.get("pid") or "-", "running" if child.get("ready") else "not running"))
    pids = list(state["pids"].values()) + [c["pid"] for c in read_json(LAB / "children.json").values() if c.get("pid")]
    print("resident memory of the lab's processes: %.0f MiB" % (sum(rss_kib(pid) for pid in pids) / 1024))
    print("KUBECONFIG=%s" % state["kubeconfig"])
    return 1 if gone else 0


def rss_kib(pid):
    try:
        for line in pathlib.Path("/proc/%d/status" % pid).read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_up = sub.add_parser("up")
    p_up.add_argument("--nodes", default=str(HERE / "nodes.yml"))
    p_up.add_argument("--bare", action="store_true", help="do not install Volcano (the volcano role will)")
    p_up.add_argument("--no-hosts", action="store_true", help="GPU nodes only in the cluster, not as podman hosts")
    sub.add_parser("down")
    sub.add_parser("status")
    p_controller = sub.add_parser("controller")
    p_controller.add_argument("--refresh", type=float, default=float(os.environ.get("GPUFLEET_LAB_REFRESH", "1")),
                              help="seconds between handshake refreshes of all GPU nodes (the plugin: 30; "
                                   "default $GPUFLEET_LAB_REFRESH or 1)")
    args = parser.parse_args(argv)
    return {"up": up, "down": down, "status": status, "controller": controller}[args.cmd](args) or 0


if __name__ == "__main__":
    sys.exit(main())
