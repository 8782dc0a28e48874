"""The kubelet of the lab's host-backed GPU nodes, for what kwok does not do: devices and the containers of
images the lab knows (images.py).

A GPU node that is also a podman test host (hosts.py) is the machine its pods run on. For each such node:
- its device manager: kubelet's own (tools/lab/kubernetes/lab-devicemanager), in the node's mount namespace, so
  /var/lib/kubelet/device-plugins/kubelet.sock is the node's own and device plugins register there;
- for every Running pod bound to it whose containers the lab can run: a pod sandbox (a network namespace of its own,
  netns.py) and the containers as processes in the node's mount namespace, each in a private mount namespace
  holding exactly the pod's volumes at their mount paths: hostPath volumes from the node, ConfigMaps and the
  projected service-account token written where kubelet writes them (/var/lib/kubelet/pods/<uid>/volumes/...),
  the image's own files (images.py), the container's env (fieldRefs resolved as kubelet resolves them), its
  command and args, its postStart hook, and kubelet's restart back-off.
The API server is reached from inside a pod as from inside a cluster: KUBERNETES_SERVICE_HOST/PORT and the
service-account token, so the plugin's own RBAC is what lets it work.
"""

import json
import shlex
import subprocess
import time
import zlib

from . import images, netns, serviceaccount
from .paths import BIN, LAB, NETNS, log
from .procs import Child

POD_VOLUMES = "/var/lib/kubelet/pods"
DEVICE_PLUGINS = "/var/lib/kubelet/device-plugins"


def _fingerprint(*parts):
    return zlib.crc32(json.dumps(parts, sort_keys=True, default=str).encode())


def host_pid(container):
    """PID of a podman container's init on this machine, or None when it does not run."""
    result = subprocess.run(["podman", "inspect", "-f", "{{.State.Pid}}", container], capture_output=True, text=True,
                            check=False)
    pid = result.stdout.strip()
    return int(pid) if result.returncode == 0 and pid.isdigit() and pid != "0" else None


def write_node_file(pid, path, data, mode=0o644):
    """Write a file into the node's filesystem (through /proc/<pid>/root), atomically."""
    target = "/proc/%d/root%s" % (pid, path)
    directory = target.rsplit("/", 1)[0]
    subprocess.run(["mkdir", "-p", directory], check=True)
    tmp = target + ".gpufleet-tmp"
    with open(tmp, "wb") as handle:
        handle.write(data if isinstance(data, bytes) else data.encode())
    subprocess.run(["chmod", "%o" % mode, tmp], check=True)
    subprocess.run(["mv", "-f", tmp, target], check=True)


def read_node_file(pid, path):
    try:
        with open("/proc/%d/root%s" % (pid, path), "rb") as handle:
            return handle.read()
    except OSError:
        return None


class Pod:  # pylint: disable=too-many-instance-attributes
    """One pod's sandbox and the containers the lab runs for it on a node."""

    def __init__(self, runtime, pod):
        self.runtime, self.uid = runtime, pod.metadata.uid
        self.key = "%s/%s" % (pod.metadata.namespace, pod.metadata.name)
        self.netns = NETNS / self.uid
        self.forwards = {}      # name -> netns.Forward
        self.urls = {}          # "container/port-name" -> http URL on this machine
        self.containers = {}    # name -> Child
        self.tokens = {}        # projected volume -> (written at, expiration seconds)
        self.notes = set()

    def note(self, message):
        if message not in self.notes:
            self.notes.add(message)
            log("kubelet %s: pod %s: %s" % (self.runtime.node, self.key, message))

    # --- volumes ---

    def volume_source(self, pod, volume):
        """Path on the node where a volume's content is, writing it first where kubelet writes it."""
        pid, core = self.runtime.pid, self.runtime.core
        base = "%s/%s/volumes" % (POD_VOLUMES, self.uid)
        if volume.host_path is not None:
            path, kind = volume.host_path.path, volume.host_path.type or ""
            exists = subprocess.run(["test", "-e", "/proc/%d/root%s" % (pid, path)], check=False).returncode == 0
            if not exists:
                if kind == "DirectoryOrCreate":
                    subprocess.run(["mkdir", "-p", "/proc/%d/root%s" % (pid, path)], check=True)
                elif kind:
                    raise RuntimeError("hostPath %s of type %s does not exist on the node" % (path, kind))
            return path
        if volume.config_map is not None:
            path = "%s/kubernetes.io~configmap/%s" % (base, volume.name)
            data = (core.read_namespaced_config_map(volume.config_map.name, pod.metadata.namespace).data or {})
            items = [(i.key, i.path) for i in volume.config_map.items or []] or [(k, k) for k in data]
            for key, name in items:
                if key in data and read_node_file(pid, "%s/%s" % (path, name)) != data[key].encode():
                    write_node_file(pid, "%s/%s" % (path, name), data[key])
            return path
        if volume.projected is not None:
            path = "%s/kubernetes.io~projected/%s" % (base, volume.name)
            for source in volume.projected.sources or []:
                if source.service_account_token is not None:
                    self.write_token(pod, path, volume.name, source.service_account_token)
                if source.config_map is not None:
                    data = core.read_namespaced_config_map(source.config_map.name, pod.metadata.namespace).data or {}
                    for item in source.config_map.items or []:
                        if read_node_file(pid, "%s/%s" % (path, item.path)) != data[item.key].encode():
                            write_node_file(pid, "%s/%s" % (path, item.path), data[item.key])
                if source.downward_api is not None:
                    for item in source.downward_api.items or []:
                        value = field_value(pod, item.field_ref.field_path) if item.field_ref else ""
                        if read_node_file(pid, "%s/%s" % (path, item.path)) != value.encode():
                            write_node_file(pid, "%s/%s" % (path, item.path), value)
            return path
        if volume.empty_dir is not None:
            path = "%s/kubernetes.io~empty-dir/%s" % (base, volume.name)
            subprocess.run(["mkdir", "-p", "/proc/%d/root%s" % (pid, path)], check=True)
            return path
        raise RuntimeError("volume %s: only hostPath, configMap, projected and emptyDir volumes run in the lab"
                           % volume.name)

    def write_token(self, pod, path, volume, source):
        """A bound service-account token, renewed at 80 % of its life (as kubelet)."""
        written, ttl = self.tokens.get(volume, (0, 0))
        if written and time.time() - written < 0.8 * ttl:
            return
        ttl = source.expiration_seconds or 3607
        token = serviceaccount.request_token(self.runtime.core, pod, ttl, source.audience)
        write_node_file(self.runtime.pid, "%s/%s" % (path, source.path or "token"), token, 0o600)
        self.tokens[volume] = (time.time(), ttl)

    # --- containers ---

    def command(self, pod, container, image, sources):
        """argv that runs one container: the node's mount namespace, the pod's network namespace, a private mount
        namespace with the image's files and the volumes, then the container's env and command."""
        lines = ["set -e"]

        def bind(src, dst, read_only=False):
            lines.append("if [ -d %s ]; then mkdir -p %s; else mkdir -p \"$(dirname %s)\"; touch %s; fi"
                         % tuple(shlex.quote(p) for p in (src, dst, dst, dst)))
            # Recursive, as containerd's CRI binds a hostPath (rbind): a mount of the node's / keeps /dev and /proc.
            lines.append("mount --rbind %s %s" % (shlex.quote(src), shlex.quote(dst)))
            if read_only:
                lines.append("mount -o remount,bind,ro %s" % shlex.quote(dst))
        for dst, src in sorted(image.get("mounts", {}).items()):
            bind(src, dst, True)
        for mount in container.volume_mounts or []:
            src = sources[mount.name]
            if mount.sub_path:
                src = "%s/%s" % (src.rstrip("/"), mount.sub_path)
            if src.rstrip("/") != mount.mount_path.rstrip("/"):
                bind(src, mount.mount_path, bool(mount.read_only))
            elif mount.read_only:
                bind(src, mount.mount_path, True)
        lines.append("cd %s" % shlex.quote(container.working_dir or "/"))
        lines.append('exec "$@"')
        env = dict(image["env"], PATH=image["path"], HOME="/root", HOSTNAME=pod.metadata.name)
        env.update(self.runtime.service_env)
        for item in container.env or []:
            if item.value_from is None:
                env[item.name] = item.value or ""
            elif item.value_from.field_ref is not None:
                env[item.name] = field_value(pod, item.value_from.field_ref.field_path)
            elif item.value_from.config_map_key_ref is not None:
                ref = item.value_from.config_map_key_ref
                data = self.runtime.core.read_namespaced_config_map(ref.name, pod.metadata.namespace).data or {}
                env[item.name] = data.get(ref.key, "")
            else:
                self.note("env %s of container %s: only values, fieldRefs and configMapKeyRefs run in the lab"
                          % (item.name, container.name))
        argv = list(container.command or image["entrypoint"]) + list(container.args or [])
        return (["nsenter", "-t", str(self.runtime.pid), "-m", "--net=%s" % self.netns, "--",
                 "unshare", "-m", "--propagation", "private", "--", "/bin/sh", "-c", "\n".join(lines), "sh",
                 "env", "-i"] + ["%s=%s" % kv for kv in sorted(env.items())] + argv)

    def post_start(self, child, container):
        """Run a container's postStart exec hook in its namespaces; kubelet kills the container when it fails."""
        hook = container.lifecycle.post_start if container.lifecycle else None
        command = getattr(getattr(hook, "_exec", None), "command", None)  # the client names the field `_exec`
        if not command or not child.alive():
            return True
        result = subprocess.run(["nsenter", "-t", str(child.pid()), "-m", "-n", "--"] + list(command),
                                capture_output=True, text=True, check=False, timeout=60)
        if result.returncode != 0:
            self.note("container %s: postStart hook failed (%s): %s" % (container.name, result.returncode,
                                                                        (result.stdout + result.stderr).strip()))
            return False
        return True

    def sync(self, pod):
        runnable = []
        for container in pod.spec.containers:
            image = images.resolve(container.image)
            if image is None:
                continue
            if "refused" in image:
                self.note("container %s: %s" % (container.name, image["refused"]))
                continue
            runnable.append((container, image))
        if not runnable:
            return
        netns.create(self.netns)
        if "api" not in self.forwards:
            port = self.runtime.api_port
            self.forwards["api"] = netns.Forward(self.netns, port, None, port)
        for container, dummy in runnable:
            for port in container.ports or []:
                name = "%s/%s" % (container.name, port.name or port.container_port)
                if name not in self.forwards:
                    self.forwards[name] = netns.Forward(None, 0, self.netns, port.container_port)
                    self.urls[name] = "http://127.0.0.1:%d" % self.forwards[name].port
        try:
            sources = {volume.name: self.volume_source(pod, volume) for volume in pod.spec.volumes or []}
        except Exception as exc:  # pylint: disable=broad-except  # kubelet: the pod waits in ContainerCreating
            self.note("volumes not ready: %s" % exc)
            return
        grace = pod.spec.termination_grace_period_seconds
        grace = 30 if grace is None else grace
        for container, image in runnable:
            child = self.containers.setdefault(container.name, Child(
                "%s %s" % (self.key, container.name),
                LAB / "logs" / "pods" / ("%s_%s_%s.log" % (pod.metadata.namespace, pod.metadata.name,
                                                           container.name))))
            argv = self.command(pod, container, image, sources)
            fingerprint = _fingerprint(self.runtime.pid, container.to_dict(), str(image["root"]))
            if child.ensure(fingerprint, argv, grace=max(1, grace)) and container.lifecycle:
                time.sleep(0.5)
                if not self.post_start(child, container):
                    child.stop(grace=1)

    def status(self):
        return {"node": self.runtime.node, "urls": self.urls,
                "containers": {name: dict(c.identity(), running=c.alive(), restarts=c.restarts,
                                          last_exit=c.last_exit, log=str(c.logfile))
                               for name, c in self.containers.items()}}

    def stop(self):
        for child in self.containers.values():
            child.stop(grace=5)
        for forward in self.forwards.values():
            forward.close()
        netns.remove(self.netns)
        if self.runtime.pid:
            subprocess.run(["rm", "-rf", "/proc/%d/root%s/%s" % (self.runtime.pid, POD_VOLUMES, self.uid)],
                           check=False)


def field_value(pod, path):
    """A fieldRef as kubelet resolves it (the subset that pods of the lab use)."""
    values = {"metadata.name": pod.metadata.name, "metadata.namespace": pod.metadata.namespace,
              "metadata.uid": pod.metadata.uid, "spec.nodeName": pod.spec.node_name,
              "spec.serviceAccountName": pod.spec.service_account_name, "status.hostIP": pod.status.host_ip,
              "status.podIP": pod.status.pod_ip}
    return str(values.get(path) or "")


class NodeRuntime:
    """The lab's kubelet parts for one host-backed node."""

    def __init__(self, node, container, core, api_port):
        self.node, self.container, self.core, self.api_port = node, container, core, api_port
        self.pid = None
        self.devicemanager = Child("lab-devicemanager-%s" % node)
        self.pods = {}
        self.service_env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(api_port),
                            "KUBERNETES_SERVICE_PORT_HTTPS": str(api_port),
                            "KUBERNETES_PORT": "tcp://127.0.0.1:%d" % api_port}

    def sync(self, pods):
        self.pid = host_pid(self.container)
        if self.pid is None:
            self.devicemanager.stop()
            for pod in self.pods.values():
                pod.stop()
            self.pods.clear()
            return
        subprocess.run(["mkdir", "-p", "/proc/%d/root%s" % (self.pid, DEVICE_PLUGINS)], check=True)
        argv = ["nsenter", "-t", str(self.pid), "-m", "--", str((BIN / "kubernetes").resolve() / "lab-devicemanager"),
                "--node", self.node, "--kubeconfig", str(LAB / "kubeconfig")]
        self.devicemanager.ensure(_fingerprint(argv), argv)
        live = {}
        for pod in pods:
            if pod.status.phase != "Running" or pod.metadata.deletion_timestamp is not None:
                continue
            live[pod.metadata.uid] = pod
        for uid in set(self.pods) - set(live):
            self.pods.pop(uid).stop()
        for uid, pod in live.items():
            if uid not in self.pods:
                self.pods[uid] = Pod(self, pod)
            try:
                self.pods[uid].sync(pod)
            except Exception as exc:  # pylint: disable=broad-except  # one pod's trouble stops no other
                self.pods[uid].note("sync failed: %s" % exc)

    def status(self):
        return {"devicemanager": dict(self.devicemanager.identity(), running=self.devicemanager.alive()),
                "pods": {pod.key: pod.status() for pod in self.pods.values() if pod.containers}}

    def stop(self):
        for pod in self.pods.values():
            pod.stop()
        self.pods.clear()
        self.devicemanager.stop()
