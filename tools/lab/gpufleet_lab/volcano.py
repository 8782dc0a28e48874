"""Volcano's Deployments as local processes: what the chart deployed is what runs.

kwok gives the Deployments' pods a phase and nothing else, so the controller runs each component with its
Deployment's own arguments. Only what points inside a pod is translated: the files of its ConfigMap volumes (written
here and kept in sync as kubelet keeps a ConfigMap volume), its listen addresses (ports on this machine), and the API
server: as in a pod, KUBERNETES_SERVICE_HOST/PORT and the token of the Deployment's service account, bound to
the Deployment's pod (serviceaccount.py) - so the chart's RBAC is what Volcano can do, and Volcano's device code,
which builds its API client from the in-cluster config only, works. Nothing else is added or changed:
- vc-scheduler: the build its image names (images.scheduler_build: the stock one, or with --volcano-fix the one
  with tools/upstream/volcano's patches); restarted when its pod template changes (a rollout); a changed ConfigMap
  only rewrites the file, which the scheduler watches and reloads, as in a cluster (deviceshare keeps what it read
  at start, which is why the volcano role rolls the scheduler on a changed configuration);
- vc-controller-manager: restarted when its pod template changes;
- vc-webhook-manager: rolled without a gap when its pod template changes; its admission ConfigMap is rewritten in
  place (it watches the file). The admission Service is routed to it: an EndpointSlice with this machine's address
  (the API server calls webhooks at a Service endpoint with --enable-aggregator-routing; loopback is not allowed
  there), so the chart's own webhook configurations reach it.
"""

import json
import os
import socket
import time
import zlib

from . import images, kube, pki, serviceaccount
from .paths import BIN, LAB, free_port, log, read_json
from .procs import Child


def _fingerprint(*parts):
    return zlib.crc32(json.dumps(parts, sort_keys=True, default=str).encode())


def flag(args, name):
    """Value of --name=value or --name value in a container's args, or None when the flag is not given."""
    args = list(args or [])
    for index, arg in enumerate(args):
        if arg.startswith("--%s=" % name):
            return arg.split("=", 1)[1]
        if arg == "--%s" % name and index + 1 < len(args):
            return args[index + 1]
    return None


def translate(args, replace):
    """The container's args with the flags in `replace` ({name: value}) set to the lab's values (added when absent)."""
    out, skip, seen = [], False, set()
    for index, arg in enumerate(args or []):
        if skip:
            skip = False
            continue
        name = arg[2:].split("=", 1)[0] if arg.startswith("--") else None
        if name in replace:
            seen.add(name)
            out.append("--%s=%s" % (name, replace[name]))
            skip = "=" not in arg and index + 1 < len(args) and not args[index + 1].startswith("-")
            continue
        out.append(arg)
    return out + ["--%s=%s" % (name, value) for name, value in replace.items() if name not in seen]


def mounted_configmap(template, container, path):
    """(name, key) of the ConfigMap a container sees at `path` (a file inside a mounted ConfigMap volume)."""
    directory, key = os.path.split(path)
    for mount in container.volume_mounts or []:
        if mount.mount_path.rstrip("/") == directory.rstrip("/"):
            for volume in template.spec.volumes or []:
                if volume.name == mount.name and volume.config_map is not None:
                    return volume.config_map.name, key
    return None, key


def write_if_changed(path, text):
    """Atomically (a rename: the watching process sees one Create event and a whole file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() and path.read_text() == text:
        return False
    tmp = path.with_name("." + path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return True


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


class Volcano:
    """Volcano's scheduler, controller-manager and webhook-manager, from their Deployments."""

    def __init__(self, api):
        from kubernetes import client  # pylint: disable=import-outside-toplevel

        self.client = client
        self.core, self.apps = client.CoreV1Api(api), client.AppsV1Api(api)
        self.discovery = client.DiscoveryV1Api(api)
        self.host_ip = host_ip()
        self.children = {name: Child(name) for name in ("vc-scheduler", "vc-controller-manager", "vc-webhook-manager")}
        self.refused = None  # why the scheduler's image is not run, once logged
        self.scheduler_build = None
        self.ports = {"scheduler-metrics": free_port(), "controller-metrics": free_port(), "webhook": free_port()}
        api_port = read_json(LAB / "state.json")["ports"]["apiserver"]
        self.env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        self.env.update(KUBERNETES_SERVICE_HOST="127.0.0.1", KUBERNETES_SERVICE_PORT=str(api_port))
        self.credentials = {name: serviceaccount.Credentials(LAB / "serviceaccounts" / name, LAB / "pki" / "ca.crt")
                            for name in self.children}

    def pod_of(self, deploy, name):
        """The Deployment's Running pod (kwok runs it) with fresh credentials for it, or None."""
        selector = ",".join("%s=%s" % kv for kv in sorted((deploy.spec.selector.match_labels or {}).items()))
        pods = [p for p in self.core.list_namespaced_pod(deploy.metadata.namespace, label_selector=selector).items
                if p.status.phase == "Running" and p.metadata.deletion_timestamp is None]
        if not pods:
            return None
        pod = max(pods, key=lambda p: p.metadata.creation_timestamp)
        self.credentials[name].ensure(self.core, pod)
        return pod

    def command(self, name, deploy, binary, replace, group="volcano"):
        """(fingerprint, argv) of a component: its Deployment's arguments with `replace` set to the lab's values, run
        with its pod's credentials; None while the Deployment has no Running pod. The fingerprint changes with the
        pod template (a rollout) and with the pod."""
        pod = self.pod_of(deploy, name)
        if pod is None:
            return None
        args = translate(deploy.spec.template.spec.containers[0].args, replace)
        return (_fingerprint(deploy.spec.template.to_dict(), pod.metadata.uid),
                self.credentials[name].argv() + [str(BIN / group / binary)] + args)

    def deployment(self, app):
        found = [d for d in self.apps.list_deployment_for_all_namespaces(label_selector="app=%s" % app).items
                 if (d.spec.replicas or 0) > 0]
        return found[0] if found else None

    def sync(self):
        self.sync_admission()
        self.sync_controller_manager()
        self.sync_scheduler()

    def sync_scheduler(self):
        child = self.children["vc-scheduler"]
        deploy = self.deployment("volcano-scheduler")
        if deploy is None:
            child.stop()
            return
        container = deploy.spec.template.spec.containers[0]
        conf_path = flag(container.args, "scheduler-conf") or "/volcano.scheduler/volcano-scheduler.conf"
        cm_name, key = mounted_configmap(deploy.spec.template, container, conf_path)
        conf = kube.configmap_text(self.core, deploy.metadata.namespace, cm_name, key) if cm_name else None
        if conf is None:
            log("controller: scheduler ConfigMap %s/%s key %s not found; scheduler not started"
                % (deploy.metadata.namespace, cm_name, key))
            child.stop()
            return
        group, refused = images.scheduler_build(container.image, bool(read_json(LAB / "lab.json").get("volcano_fix")))
        if refused:
            if refused != self.refused:
                log("controller: scheduler not started: %s" % refused)
            self.refused = refused
            child.stop()
            return
        self.refused, self.scheduler_build = None, group
        conf_file = LAB / "scheduler" / os.path.basename(conf_path)
        write_if_changed(conf_file, conf)
        planned = self.command("vc-scheduler", deploy, "scheduler", {
            "scheduler-conf": conf_file, "listen-address": "%s:%d" % (self.host_ip, self.ports["scheduler-metrics"]),
            "healthz-address": "127.0.0.1:%d" % free_port()}, group=group)
        if planned:
            child.ensure(planned[0], planned[1], self.env)

    def sync_controller_manager(self):
        child = self.children["vc-controller-manager"]
        deploy = self.deployment("volcano-controller")
        if deploy is None:
            child.stop()
            return
        planned = self.command("vc-controller-manager", deploy, "controller-manager", {
            "healthz-address": "127.0.0.1:%d" % free_port(),
            "listen-address": "127.0.0.1:%d" % self.ports["controller-metrics"]})
        if planned:
            child.ensure(planned[0], planned[1], self.env)

    def sync_admission(self):
        deploy = self.deployment("volcano-admission")
        if deploy is None:
            self.children["vc-webhook-manager"].stop()
            return
        container = deploy.spec.template.spec.containers[0]
        namespace = deploy.metadata.namespace
        service = flag(container.args, "webhook-service-name") or "volcano-admission-service"
        conf_path = flag(container.args, "admission-conf") or ""
        cm_name, key = mounted_configmap(deploy.spec.template, container, conf_path) if conf_path else (None, None)
        conf = (kube.configmap_text(self.core, namespace, cm_name, key) if cm_name else None) or ""
        conf_file = LAB / "admission" / (os.path.basename(conf_path) or "volcano-admission.conf")
        write_if_changed(conf_file, conf)
        current = self.children["vc-webhook-manager"]
        port = free_port()
        names = (self.host_ip, service, "%s.%s" % (service, namespace), "%s.%s.svc" % (service, namespace))
        cert = pki.serving_cert(LAB / "pki", LAB / "pki" / ("serve-%s.%s" % (service, namespace)), names)
        planned = self.command("vc-webhook-manager", deploy, "webhook-manager", {
            "tls-cert-file": cert.with_suffix(".crt"), "tls-private-key-file": cert.with_suffix(".key"),
            "ca-cert-file": LAB / "pki" / "ca.crt", "admission-conf": conf_file, "listen-address": self.host_ip,
            "port": port, "healthz-address": "127.0.0.1:%d" % free_port()})
        if planned is None:
            return
        fingerprint, argv = planned
        if current.alive() and current.fingerprint == fingerprint:
            self.serve_service(namespace, service, self.ports["webhook"])
            return
        # A rolling update, as the Deployment does it: the new webhook-manager serves before the old one stops, so
        # the API server never meets a webhook that is not listening.
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
        time.sleep(1)  # the API server's endpoint informer catches up before the old one goes
        current.stop()
        self.children["vc-webhook-manager"] = fresh

    def serve_service(self, namespace, service, port):
        """Route a Service to this machine: an EndpointSlice with the host's address."""
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

    def status(self):
        state = {name: dict(c.identity(), ready=c.alive(), restarts=c.restarts) for name, c in self.children.items()}
        # The API server's service proxy reaches pod IPs only, and kwok's pods have none here: clients of the
        # scheduler's metrics (the smoke test, the monitoring) use this URL in the lab.
        state["vc-scheduler"]["build"] = self.scheduler_build
        state["vc-scheduler"]["metrics_url"] = "http://%s:%d/metrics" % (self.host_ip,
                                                                         self.ports["scheduler-metrics"])
        state["vc-controller-manager"]["metrics_url"] = "http://127.0.0.1:%d/metrics" % self.ports["controller-metrics"]
        return state

    def stop(self):
        for child in self.children.values():
            child.stop()
