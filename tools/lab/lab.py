"""The local lab: a real Kubernetes control plane on this machine with kwok-simulated nodes.

    python tools/lab/lab.py up [--nodes FILE]      build (cached) and start etcd, kube-apiserver,
                                                   kube-controller-manager and kwok; create the nodes; print the kubeconfig
    python tools/lab/lab.py down                   stop every process the lab started (by PID) and remove its state
    python tools/lab/lab.py status                 what runs

    python tools/lab/lab.py emulate-device-plugin  (started by up) registers the GPU nodes' vGPUs as the
                                                   volcano-vgpu-device-plugin does, and keeps the handshake fresh

State (PKI, etcd data, kubeconfig, logs, PIDs) lives in $GPUFLEET_LAB_DIR (default $GPUFLEET_CACHE/lab). Nodes come
from a YAML file (default tools/lab/nodes.yml, the article's cluster). Volcano runs from the pinned module (v1.10.0,
see README.md); its CRDs come from the same module.
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
CACHE = pathlib.Path(os.environ.get("GPUFLEET_CACHE", "/var/cache/gpufleet"))
LAB = pathlib.Path(os.environ.get("GPUFLEET_LAB_DIR", str(CACHE / "lab")))
KWOK_STAGES = ["node/fast/node-initialize.yaml", "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
               "pod/fast/pod-ready.yaml", "pod/fast/pod-delete.yaml"]  # no pod-complete: pods stay Running
SERVICE_CIDR = "10.96.0.0/16"


def log(msg):
    print("[lab] %s" % msg, flush=True)


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def binaries():
    """Build (or reuse) the pinned binaries; return {name: path}."""
    subprocess.run([str(HERE / "build.sh"), "etcd", "kubernetes", "kwok", "volcano"], check=True)
    found = {}
    for directory in sorted((CACHE / "lab-bin").iterdir()):
        if (directory / ".complete").exists():
            for exe in directory.iterdir():
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
    """kwok's own stage definitions, from the pinned kwok module (no pod-complete: pods stay Running)."""
    base = module_dir("kwok", "sigs.k8s.io/kwok") / "kustomize" / "stage"
    path.write_text("\n---\n".join((base / stage).read_text() for stage in KWOK_STAGES))


def node_object(node):
    labels = {"kubernetes.io/hostname": node["name"], "kubernetes.io/os": "linux", "type": "kwok"}
    labels.update(node.get("labels", {}))
    taints = [{"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}]
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
    for d in ("pki", "etcd", "logs"):
        (LAB / d).mkdir(parents=True, exist_ok=True)
    pki = LAB / "pki"
    make_pki(pki)
    ports = {"etcd": free_port(), "etcd-peer": free_port(), "apiserver": free_port()}
    server = "https://127.0.0.1:%d" % ports["apiserver"]
    state = {"pids": {}, "ports": ports, "server": server, "kubeconfig": str(LAB / "kubeconfig")}
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
        "--service-cluster-ip-range", SERVICE_CIDR, "--allow-privileged=true"], state)
    wait_ready(server + "/readyz", pki)
    for user in ("admin", "controller-manager", "kwok"):
        kubeconfig(LAB / ("kubeconfig" if user == "admin" else "%s.kubeconfig" % user), server, pki, user)
    start("kube-controller-manager", [
        str(bins["kube-controller-manager"]), "--kubeconfig", str(LAB / "controller-manager.kubeconfig"),
        "--authentication-kubeconfig", str(LAB / "controller-manager.kubeconfig"),
        "--authorization-kubeconfig", str(LAB / "controller-manager.kubeconfig"),
        "--bind-address", "127.0.0.1", "--secure-port", "0", "--leader-elect=false",
        "--use-service-account-credentials", "--service-account-private-key-file", str(pki / "sa.key"),
        "--root-ca-file", str(pki / "ca.crt"), "--controllers", "*,-nodeipam,-nodelifecycle"], state)
    stages_config(LAB / "kwok.yaml")
    start("kwok", [str(bins["kwok"]), "--kubeconfig", str(LAB / "kwok.kubeconfig"), "--config", str(LAB / "kwok.yaml"),
                   "--manage-nodes-with-annotation-selector", "kwok.x-k8s.io/node=fake",
                   "--server-address", "127.0.0.1:%d" % free_port()], state)
    nodes_file = pathlib.Path(args.nodes).resolve()
    create_nodes(yaml.safe_load(nodes_file.read_text())["nodes"])
    start_volcano(bins, state)
    start("device-plugin-emulator", [sys.executable, str(HERE / "lab.py"), "emulate-device-plugin",
                                     "--nodes", str(nodes_file)], state)
    wait_vgpu_registered(yaml.safe_load(nodes_file.read_text())["nodes"])
    log("ready in %.0f s: export KUBECONFIG=%s" % (time.time() - t0, LAB / "kubeconfig"))


def kube():
    from kubernetes import config  # pylint: disable=import-outside-toplevel

    return config.new_client_from_config(str(LAB / "kubeconfig"))


def start_volcano(bins, state):
    """Volcano's CRDs from its module, then its controller-manager and scheduler (config: LAB/scheduler.conf)."""
    from kubernetes import client  # pylint: disable=import-outside-toplevel

    api = kube()
    chart = module_dir("volcano", "volcano.sh/volcano") / "installer" / "helm" / "chart" / "volcano"
    ext = client.ApiextensionsV1Api(api)
    for crd in sorted(chart.glob("crd/bases/*.yaml")) + sorted(chart.glob("charts/*/crd/bases/*.yaml")):
        ext.create_custom_resource_definition(yaml.safe_load(crd.read_text()))
    deadline = time.time() + 60
    while time.time() < deadline:
        established = [c.metadata.name for c in ext.list_custom_resource_definition().items
                       if any(cond.type == "Established" and cond.status == "True" for cond in c.status.conditions or [])]
        if "queues.scheduling.volcano.sh" in established and "jobs.batch.volcano.sh" in established:
            break
        time.sleep(0.5)
    conf = LAB / "scheduler.conf"
    if not conf.exists():
        conf.write_text(DEFAULT_SCHEDULER_CONF)
    env = dict(os.environ, KUBECONFIG=str(LAB / "kubeconfig"))  # vgpu's own client reads KUBECONFIG
    start("vc-controller-manager", [str(bins["controller-manager"]), "--kubeconfig", str(LAB / "kubeconfig"),
                                    "--leader-elect=false", "--healthz-address", "127.0.0.1:%d" % free_port()],
          state, env)
    state["ports"]["scheduler-metrics"] = free_port()
    start("vc-scheduler", [str(bins["scheduler"]), "--kubeconfig", str(LAB / "kubeconfig"),
                           "--scheduler-conf", str(conf), "--leader-elect=false", "--enable-metrics",
                           "--listen-address", "127.0.0.1:%d" % state["ports"]["scheduler-metrics"],
                           "--healthz-address", "127.0.0.1:%d" % free_port(), "--schedule-period", "500ms"],
          state, env)
    # The default queue; Volcano's admission normally creates it.
    objects = client.CustomObjectsApi(api)
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            objects.get_cluster_custom_object("scheduling.volcano.sh", "v1beta1", "queues", "default")
            return
        except client.exceptions.ApiException as exc:
            if exc.status != 404:
                raise
        time.sleep(1)
    objects.create_cluster_custom_object("scheduling.volcano.sh", "v1beta1", "queues", {
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": "default"},
        "spec": {"weight": 1, "reclaimable": True}})


DEFAULT_SCHEDULER_CONF = """actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
    enablePreemptable: false
  - name: conformance
- plugins:
  - name: overcommit
  - name: drf
    enablePreemptable: false
  - name: deviceshare
    arguments:
      deviceshare.VGPUEnable: true
  - name: predicates
  - name: proportion
  - name: nodeorder
  - name: binpack
"""


# --- emulated volcano-vgpu-device-plugin ---------------------------------------------------------------------------

def vgpu_registration(node, split, memory_factor=1):
    """What volcano-vgpu-device-plugin v1.12.0 registers for a node: annotation value and extended resources."""
    gpus = node["gpus"]
    entries = []
    for index in range(gpus["count"]):
        uuid = "GPU-%08x-0000-4000-8000-%012d" % (zlib.crc32(node["name"].encode()), index)
        entries.append("%s,%d,%d,NVIDIA-%s,true,hami-core" % (
            uuid, split, gpus["memory_mib"] // memory_factor, gpus["model"]))
    resources = {
        "volcano.sh/vgpu-number": str(gpus["count"] * split),
        "volcano.sh/vgpu-memory": str(gpus["count"] * gpus["memory_mib"] // memory_factor),
        "volcano.sh/vgpu-cores": str(gpus["count"] * 100),
    }
    return ":".join(entries) + ":", resources


def emulate(args):
    """Register each GPU node's vGPUs and keep the handshake fresh (the scheduler drops a node after 60 s)."""
    from kubernetes import client  # pylint: disable=import-outside-toplevel

    nodes = [n for n in yaml.safe_load(pathlib.Path(args.nodes).read_text())["nodes"] if n.get("gpus")]
    api = client.CoreV1Api(kube())
    running = {"on": True}
    signal.signal(signal.SIGTERM, lambda *a: running.update(on=False))
    while running["on"]:
        for node in nodes:
            value, resources = vgpu_registration(node, node["gpus"].get("split", 2))
            stamp = time.strftime("%Y.%m.%d %H:%M:%S")
            current = api.read_node(node["name"])
            if current.status.capacity.get("volcano.sh/vgpu-number") != resources["volcano.sh/vgpu-number"]:
                api.patch_node_status(node["name"], {"status": {"capacity": resources, "allocatable": resources}})
            annotations = current.metadata.annotations or {}
            handshake = annotations.get("volcano.sh/node-vgpu-handshake", "")
            # As the plugin does: (re-)register when the registration differs or the scheduler asked ("Requesting_"
            # or "Deleted_"); every needless node update makes the scheduler rebuild its device accounting.
            if annotations.get("volcano.sh/node-vgpu-register") != value or not handshake.startswith("Reported"):
                api.patch_node(node["name"], {"metadata": {"annotations": {
                    "volcano.sh/node-vgpu-register": value,
                    "volcano.sh/node-vgpu-handshake": "Reported " + stamp}}})
        for dummy in range(20):
            if not running["on"]:
                break
            time.sleep(1)


def wait_vgpu_registered(nodes, timeout=60):
    from kubernetes import client  # pylint: disable=import-outside-toplevel

    api = client.CoreV1Api(kube())
    deadline = time.time() + timeout
    while time.time() < deadline:
        done = all(api.read_node(n["name"]).status.allocatable.get("volcano.sh/vgpu-number")
                   for n in nodes if n.get("gpus"))
        if done:
            return
        time.sleep(1)
    raise SystemExit("the emulated device plugin did not register the GPU nodes within %d s" % timeout)


def create_nodes(nodes):
    from kubernetes import client, config  # pylint: disable=import-outside-toplevel

    api = client.CoreV1Api(config.new_client_from_config(str(LAB / "kubeconfig")))
    for node in nodes:
        obj = node_object(node)
        api.create_node(obj)
        # Capacity is status: the create call drops it, so it is written through the status subresource.
        api.patch_node_status(node["name"], {"status": obj["status"]})
    deadline = time.time() + 60
    while time.time() < deadline:
        ready = [n.metadata.name for n in api.list_node().items
                 if any(c.type == "Ready" and c.status == "True" for c in (n.status.conditions or []))]
        if len(ready) == len(nodes):
            log("%d nodes Ready: %s" % (len(ready), ", ".join(sorted(ready))))
            return
        time.sleep(1)
    raise SystemExit("nodes not Ready after 60 s (kwok log: %s)" % (LAB / "logs" / "kwok.log"))


def down(_args):
    state_file = LAB / "state.json"
    if not state_file.exists():
        log("nothing to stop")
        return
    state = json.loads(state_file.read_text())
    for name, pid in reversed(list(state["pids"].items())):
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        for dummy in range(50):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            os.killpg(pid, signal.SIGKILL)
        log("stopped %s (pid %d)" % (name, pid))
    shutil.rmtree(LAB)


def status(_args):
    state_file = LAB / "state.json"
    if not state_file.exists():
        print("not running")
        return 1
    state = json.loads(state_file.read_text())
    for name, pid in state["pids"].items():
        alive = os.path.exists("/proc/%d" % pid)
        print("%-24s pid %-8d %s" % (name, pid, "running" if alive else "GONE"))
    print("KUBECONFIG=%s" % state["kubeconfig"])
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_up = sub.add_parser("up")
    p_up.add_argument("--nodes", default=str(HERE / "nodes.yml"))
    sub.add_parser("down")
    sub.add_parser("status")
    p_emulate = sub.add_parser("emulate-device-plugin")
    p_emulate.add_argument("--nodes", default=str(HERE / "nodes.yml"))
    args = parser.parse_args(argv)
    return {"up": up, "down": down, "status": status, "emulate-device-plugin": emulate}[args.cmd](args) or 0


if __name__ == "__main__":
    sys.exit(main())
