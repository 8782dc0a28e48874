"""The lab controller (`lab.py controller`, started by `up`): one loop that runs what the cluster describes.

Each pass: Volcano's Deployments as local processes (volcano.py), the kubelet parts of the host-backed GPU nodes
(kubelet.py), and the stand-in plugin of GPU nodes without a host (emulator.py). Its state for tests and the
inventories is $LAB/children.json. A step that fails is logged and the loop goes on: nothing here restarts a
component to get a test through; a component restarts only when what it was started from changes, or after it
exited (kubelet's back-off).
"""

import signal
import time

from . import emulator, kube, kubelet, prometheus, volcano
from .paths import LAB, log, read_json, write_json


class Controller:
    def __init__(self):
        from kubernetes import client  # pylint: disable=import-outside-toplevel

        api = kube.api()
        self.core = client.CoreV1Api(api)
        state = read_json(LAB / "state.json")
        self.api_port = int(state["ports"]["apiserver"])
        hosts = read_json(LAB / "lab.json").get("hosts", {}) if state.get("hosts_ready") else {}
        self.volcano = volcano.Volcano(api)
        self.nodes = {name: kubelet.NodeRuntime(name, container, self.core, self.api_port)
                      for name, container in sorted(hosts.items())}
        self.emulator = emulator.Emulator(api)
        url = read_json(LAB / "lab.json").get("prometheus_url")
        self.reloader = prometheus.Reloader(url) if url else None

    def sync_nodes(self):
        for name, runtime in self.nodes.items():
            runtime.sync(self.core.list_pod_for_all_namespaces(field_selector="spec.nodeName=%s" % name).items)
        emulated = {n.metadata.name: n for n in self.core.list_node().items
                    if emulator.GPUS in (n.metadata.annotations or {}) and n.metadata.name not in self.nodes}
        self.emulator.sync(emulated)

    def save(self):
        state = self.volcano.status()
        state["nodes"] = {name: runtime.status() for name, runtime in self.nodes.items()}
        # node -> URL of the vGPU plugin's monitor (:9394) on it, for the smoke test and monitoring.
        state["plugin_monitors"] = {name: url for name, node in state["nodes"].items()
                                    for pod in node["pods"].values() for port, url in pod["urls"].items()
                                    if port.startswith("monitor/")}
        write_json(LAB / "children.json", state)
        if self.reloader:
            prometheus.write_targets(state)

    def run(self):
        running = {"on": True}
        signal.signal(signal.SIGTERM, lambda *a: running.update(on=False))
        while running["on"]:
            took = {}
            for step in (self.volcano.sync, self.sync_nodes) + ((self.reloader.sync,) if self.reloader else ()):
                started = time.time()
                try:
                    step()
                except Exception as exc:  # pylint: disable=broad-except  # keep controlling; the log tells
                    log("controller: %s failed: %s" % (getattr(step, "__name__", step), exc))
                took[getattr(step, "__name__", str(step))] = time.time() - started
            if sum(took.values()) > 10:
                log("controller: slow pass (%s)" % ", ".join("%s %.1f s" % kv for kv in sorted(took.items())))
            self.save()
            time.sleep(1)
        for runtime in self.nodes.values():
            runtime.stop()
        self.volcano.stop()
        self.save()


def named_children(lab_dir=LAB):
    """[(name, {pid, started})] of every process the controller of the lab in `lab_dir` runs: Volcano's by their
    names, each node's device manager and plugin containers as "node <what>" (the benchmarks add up a name's CPU)."""
    state = read_json(lab_dir / "children.json")
    found = [(name, c) for name, c in state.items() if name not in ("nodes", "plugin_monitors") and isinstance(c, dict)]
    for node in state.get("nodes", {}).values():
        found.append(("node devicemanager", node.get("devicemanager", {})))
        for pod in node.get("pods", {}).values():
            found.extend(("node %s" % name, c) for name, c in pod.get("containers", {}).items())
    return [(name, c) for name, c in found if c.get("pid")]


def children(lab_dir=LAB):
    """{pid, started} of every process the controller of the lab in `lab_dir` runs (read by `down`, `status`, the
    tests and the benchmarks)."""
    return [c for dummy, c in named_children(lab_dir)]
