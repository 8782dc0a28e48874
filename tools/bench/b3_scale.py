"""B3: a simulated fleet far larger than any test machine (kwok nodes with 8 GPUs each, 24 GB and 16 GB mixed).

Per fleet size: the converge time of the device_plugin role and of the volcano role after it (playbooks/cluster.yml
--tags device_plugin,volcano: volcano rolls the scheduler onto the device ConfigMap device_plugin wrote), the time
until every node has registered its vGPUs, the time until Volcano has bound 10 single-vGPU pods per node and the
same count of plain pods (no device) as the baseline, and the lab's peak resident memory (all its processes). The
nodes have no podman host, so the lab's stand-in for the plugin registers them (tools/lab/gpufleet_lab/emulator.py,
checked against the real binary by tests/lab/test_plugin.py), re-registering every 30 s as the plugin does.

Binding is timed apart from creating the pods: the pods name PodGroups (as Volcano's Job controller's pods do) that
are created only once every pod exists, so the scheduler starts on all of them at once, and the rate is the
scheduler's, not the API server's rate of creating pods on this machine. Bound pods are counted from one watch, not
by listing: decoding 10,000 pods every few seconds would take a core of this 2-core machine from the scheduler
being measured. A run that has not bound every pod BIND_DEADLINE_S after the release stops there, with what it
bound and the count every TIMELINE_STEP_S seconds (the rate's course shows whether it was slowing down).
"""

import concurrent.futures
import json
import threading
import time

import yaml
from kubernetes import client, watch

import common

PODS_PER_NODE = 10
BIND_DEADLINE_S = 900   # a run stops this long after the release, with what it bound by then
TIMELINE_STEP_S = 10
GROUP_SIZE = 100
MODELS = ({"model": "NVIDIA GeForce RTX 4090", "memory_mib": 24564, "group": "rtx4090"},
          {"model": "NVIDIA GeForce RTX 4070 SUPER", "memory_mib": 16376, "group": "rtx4070s"})


def fleet(work, count):
    """nodes file for the lab and an inventory whose gpu_nodes are those nodes (never contacted: the cluster roles
    run on the controller; device_plugin_gpus stands in for gpu_verify's reading)."""
    work.mkdir(parents=True, exist_ok=True)
    names = ["gpu%04d" % i for i in range(count)]
    nodes = [{"name": "master0", "control_plane": True}]
    groups = {m["group"]: {"hosts": {}} for m in MODELS}
    for i, name in enumerate(names):
        model = MODELS[i % 2]
        nodes.append({"name": name, "labels": {"gpufleet.io/gpu-model": model["group"]},
                      "gpus": {"count": 8, "model": model["model"], "memory_mib": model["memory_mib"]}})
        groups[model["group"]]["hosts"][name] = None
    (work / "nodes.yml").write_text(yaml.safe_dump({"nodes": nodes}))
    inventory = work / "inventory"
    (inventory / "group_vars").mkdir(parents=True, exist_ok=True)
    (inventory / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {
        "kube_control": {"hosts": {"localhost": {"ansible_connection": "local",
                                                 "ansible_python_interpreter": "{{ ansible_playbook_python }}"}}},
        "gpu_nodes": {"children": groups}}}}))
    lab_all = common.ROOT / "inventories" / "lab" / "group_vars" / "all.yml"
    (inventory / "group_vars" / "all.yml").write_text(lab_all.read_text())
    for model in MODELS:
        (inventory / "group_vars" / ("%s.yml" % model["group"])).write_text(yaml.safe_dump({
            "device_plugin_vgpu": {"split": 2},
            "device_plugin_gpus": {"count": 8, "model": model["model"], "memory_mib": model["memory_mib"]}}))
    return work / "nodes.yml", inventory, names


class Sampler(threading.Thread):
    """Peak resident memory of the lab's processes, sampled every second."""

    def __init__(self, lab):
        super().__init__(daemon=True)
        self.lab, self.peak, self.done = lab, 0.0, threading.Event()

    def run(self):
        while not self.done.is_set():
            try:
                self.peak = max(self.peak, self.lab.rss_mib())
            except (OSError, ValueError):
                pass
            self.done.wait(1)


def registered(core, names):
    want = set(names)
    done = {n.metadata.name for n in core.list_node().items
            if n.metadata.name in want and int((n.status.allocatable or {}).get("volcano.sh/vgpu-number", 0)) > 0}
    return len(done)


VGPU = {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "1000"}
PLAIN = {"cpu": "10m"}


class BoundPods(threading.Thread):
    """The names of a namespace's pods that have a node, kept from a watch resumed from the last resourceVersion
    (bookmarks keep it fresh while nothing binds) each time the 60 s timeout ends it; when the watch fails (an
    expired resourceVersion, a dropped connection), from a list and a new watch. Raw JSON: the client's model
    classes would cost as much CPU as the listing this replaces."""

    RETRIES = 10

    def __init__(self, api, namespace, expected):
        super().__init__(daemon=True)
        self.core, self.namespace, self.expected = client.CoreV1Api(api), namespace, expected
        self.bound, self.version, self.error, self.done = set(), None, None, threading.Event()
        self.all_bound_at = None  # taken as the event arrives: 100 pods bind in well under the poll's 0.5 s
        self.failures = 0

    def saw(self, pod):
        if (pod.get("spec") or {}).get("nodeName"):
            self.bound.add(pod["metadata"]["name"])
            if self.all_bound_at is None and len(self.bound) >= self.expected:
                self.all_bound_at = time.time()

    def resync(self):
        listing = json.loads(self.core.list_namespaced_pod(self.namespace, _preload_content=False).data)
        for pod in listing["items"]:
            self.saw(pod)
        self.version = listing["metadata"]["resourceVersion"]

    def run(self):
        while not self.done.is_set():
            try:
                if self.version is None:
                    self.resync()
                # The kubernetes client raises KeyError on a watch ERROR event when deserialize is off.
                for event in watch.Watch().stream(self.core.list_namespaced_pod, self.namespace, deserialize=False,
                                                  resource_version=self.version, allow_watch_bookmarks=True,
                                                  timeout_seconds=60):
                    self.version = event["object"]["metadata"]["resourceVersion"]
                    if event["type"] != "BOOKMARK":
                        self.saw(event["object"])
                    if self.done.is_set():
                        return
            except Exception as exc:  # pylint: disable=broad-except  # listed again; count() reports a lasting one
                self.version, self.failures = None, self.failures + 1
                if self.failures > self.RETRIES:
                    self.error = exc
                    return
                time.sleep(1)

    def count(self):
        if self.error:
            raise RuntimeError("counting the bound pods of %s failed: %s" % (self.namespace, self.error))
        return len(self.bound)


def throughput(api, core, count, limits, namespace):
    """Create `count` pods asking for `limits` (8 threads), each naming one of count/GROUP_SIZE PodGroups of
    minMember 1 that do not exist yet; then create the PodGroups and time until Volcano has bound every pod, or
    until BIND_DEADLINE_S."""
    core.create_namespace({"metadata": {"name": namespace}})
    counter = BoundPods(api, namespace, count)
    counter.start()
    custom = client.CustomObjectsApi(api)
    groups = (count + GROUP_SIZE - 1) // GROUP_SIZE
    spec = {"schedulerName": "volcano", "terminationGracePeriodSeconds": 0, "containers": [{
        "name": "cuda", "image": "registry.invalid/cuda:12", "resources": {"limits": limits, "requests": limits}}]}
    local = threading.local()

    def create(i):
        if not hasattr(local, "core"):
            local.core = client.CoreV1Api(api)
        local.core.create_namespaced_pod(namespace, {"metadata": {
            "name": "p%05d" % i, "annotations": {"scheduling.k8s.io/group-name": "g%03d" % (i // GROUP_SIZE)}},
            "spec": spec})

    started = time.time()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(create, range(count)))
    created = time.time() - started
    released = time.time()
    for index in range(groups):
        custom.create_namespaced_custom_object("scheduling.volcano.sh", "v1beta1", namespace, "podgroups", {
            "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "metadata": {"name": "g%03d" % index},
            "spec": {"minMember": 1, "queue": "default"}})
    bound, seconds, timeline, next_step = 0, None, [], released
    try:
        while time.time() - released < BIND_DEADLINE_S:
            bound = counter.count()
            if bound >= count and counter.all_bound_at is not None:
                seconds = counter.all_bound_at - released
                break
            now = time.time()
            if now >= next_step:
                timeline.append([round(now - released, 1), bound])
                next_step += TIMELINE_STEP_S
            time.sleep(0.5)
    finally:
        counter.done.set()
    span = seconds if seconds is not None else time.time() - released
    if not timeline or timeline[-1] != [round(span, 1), bound]:
        timeline.append([round(span, 1), bound])
    return {"pods": count, "bound": bound, "create_seconds": round(created, 1), "all_bound": bound >= count,
            "bind_seconds": round(span, 1), "pods_per_s": round(bound / span, 2) if span else None,
            "timeline": timeline}


def clear(core, namespace, timeout=1800):
    """Remove the baseline's pods before the vGPU pods come. Deleted at once (grace period 0, as `kubectl delete
    --force` does): a graceful delete waits for kwok to confirm each pod, about 4 minutes for 10,000 pods here,
    which measure nothing."""
    core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
    core.delete_namespace(namespace)
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            core.read_namespace(namespace)
        except client.exceptions.ApiException as exc:
            if exc.status == 404:
                return
            raise
        time.sleep(2)
    raise RuntimeError("namespace %s not gone within %d s" % (namespace, timeout))


def one(out_work, count):
    nodes_file, inventory, names = fleet(out_work / ("n%d" % count), count)
    lab = common.Lab("b3", nodes_file=nodes_file)
    lab.up()
    sampler = Sampler(lab)
    sampler.start()
    try:
        api = lab.api()
        core = client.CoreV1Api(api)
        started = time.time()
        reg = {"seconds": None}

        def watch_registration():
            while time.time() - started < 1800:
                if registered(core, names) == len(names):
                    reg["seconds"] = time.time() - started
                    return
                time.sleep(1)

        watcher = threading.Thread(target=watch_registration, daemon=True)
        watcher.start()
        # volcano after device_plugin: it rolls the scheduler onto the device ConfigMap device_plugin wrote.
        converge, rc, recap = lab.playbook("cluster.yml", inventory, tags="device_plugin,volcano")
        if rc != 0:
            raise RuntimeError("device_plugin and volcano converge on %d nodes failed: %s" % (count, recap))
        rerun, rc2, recap2 = lab.playbook("cluster.yml", inventory, tags="device_plugin,volcano")
        watcher.join(600)
        plain = throughput(api, core, PODS_PER_NODE * count, PLAIN, "bench-b3-plain")
        clear(core, "bench-b3-plain")
        vgpu = throughput(api, core, PODS_PER_NODE * count, VGPU, "bench-b3-vgpu")
        row = {"nodes": count, "gpus": 8 * count, "vgpus": 16 * count, "lab_up_s": round(lab.up_seconds, 1),
               "converge_s": round(converge, 1), "rerun_s": round(rerun, 1), "rerun_changed": recap2.get("changed"),
               "registered_s": round(reg["seconds"], 1) if reg["seconds"] else None, "throughput": vgpu,
               "plain": plain, "vgpu_to_plain": round(vgpu["pods_per_s"] / plain["pods_per_s"], 3)
               if vgpu["pods_per_s"] and plain["pods_per_s"] else None, "lab": lab.settings()}
        time.sleep(2)
        row["peak_rss_mib"] = sampler.peak
        common.log("B3 %d nodes: %s" % (count, row))
        return row
    finally:
        sampler.done.set()
        lab.down()


def run(out_dir, sizes=(10, 100, 1000)):
    rows = []
    for count in sizes:
        rows.append(one(out_dir / "b3-work", count))
        # Written after every size: a larger fleet that fails keeps the smaller ones' figures.
        result = common.write_result(out_dir, "b3-scale", {
            "pods_per_node": PODS_PER_NODE, "bind_deadline_s": BIND_DEADLINE_S, "group_size": GROUP_SIZE,
            "timeline_step_s": TIMELINE_STEP_S, "runs": rows})
    return result
