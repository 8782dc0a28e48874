"""B3: a simulated fleet far larger than any test machine (kwok nodes with 8 GPUs each, 24 GB and 16 GB mixed).

Per fleet size: the device_plugin role's converge time (playbooks/cluster.yml --tags device_plugin), the time
until every node has registered its vGPUs, Volcano's throughput binding 10 single-vGPU pods per node, and the lab's
peak resident memory (all its processes). The nodes have no podman host, so the lab's stand-in for the plugin
registers them (tools/lab/gpufleet_lab/emulator.py, checked against the real binary by tests/lab/test_plugin.py),
re-registering every 30 s as the plugin does.
"""

import concurrent.futures
import threading
import time

import yaml
from kubernetes import client

import common

PODS_PER_NODE = 10
BIND_WINDOW_S = 90
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


def throughput(api, core, count, group_size=100):
    """Create `count` single-vGPU pods (8 threads) and time until Volcano has bound all of them. The pods name
    PodGroups of minMember 1 created first, as Volcano's own Job controller does."""
    namespace = "bench-b3"
    core.create_namespace({"metadata": {"name": namespace}})
    custom = client.CustomObjectsApi(api)
    groups = (count + group_size - 1) // group_size
    for index in range(groups):
        custom.create_namespaced_custom_object("scheduling.volcano.sh", "v1beta1", namespace, "podgroups", {
            "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "metadata": {"name": "g%03d" % index},
            "spec": {"minMember": 1, "queue": "default"}})
    spec = {"schedulerName": "volcano", "terminationGracePeriodSeconds": 0, "containers": [{
        "name": "cuda", "image": "registry.invalid/cuda:12",
        "resources": {"limits": {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "1000"}}}]}
    local = threading.local()

    def create(i):
        if not hasattr(local, "core"):
            local.core = client.CoreV1Api(api)
        local.core.create_namespaced_pod(namespace, {"metadata": {
            "name": "p%05d" % i, "annotations": {"scheduling.k8s.io/group-name": "g%03d" % (i // group_size)}},
            "spec": spec})

    started = time.time()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(create, range(count)))
    created = time.time() - started
    # The rate is measured over a bounded window, not by waiting for every pod: a slow binder (Volcano up to 1.15.0
    # answered each node's vGPU handshake through a 5 requests/s client, volcano-sh/volcano#5361) must not stall
    # the benchmark; 1.15.1, which gpufleet deploys, has no handshake path.
    deadline = started + created + BIND_WINDOW_S
    bound = 0
    while time.time() < deadline:
        pods = core.list_namespaced_pod(namespace, resource_version="0").items
        bound = sum(1 for p in pods if p.spec.node_name)
        if bound >= count:
            break
        time.sleep(2)
    seconds = time.time() - started
    return {"pods": count, "bound": bound, "create_seconds": round(created, 1), "bind_seconds": round(seconds, 1),
            "pods_per_s": round(bound / seconds, 2), "all_bound": bound >= count,
            "hours_for_all": round(count / (bound / seconds) / 3600.0, 2) if bound else None}


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
        converge, rc, recap = lab.playbook("cluster.yml", inventory, tags="device_plugin")
        if rc != 0:
            raise RuntimeError("device_plugin converge on %d nodes failed: %s" % (count, recap))
        rerun, rc2, recap2 = lab.playbook("cluster.yml", inventory, tags="device_plugin")
        watcher.join(600)
        tput = throughput(api, core, PODS_PER_NODE * count)
        log_file = lab.dir / "logs" / "vc-scheduler.log"
        # Nodes whose handshake Volcano judged stale (>60 s unanswered): their vGPUs vanish until the next one.
        leaves = sum(1 for line in log_file.read_text(errors="replace").splitlines() if " leave" in line) \
            if log_file.exists() else None
        row = {"nodes": count, "gpus": 8 * count, "vgpus": 16 * count, "lab_up_s": round(lab.up_seconds, 1),
               "handshake_leaves": leaves,
               "converge_s": round(converge, 1), "rerun_s": round(rerun, 1), "rerun_changed": recap2.get("changed"),
               "registered_s": round(reg["seconds"], 1) if reg["seconds"] else None, "throughput": tput}
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
            "pods_per_node": PODS_PER_NODE, "bind_window_s": BIND_WINDOW_S, "runs": rows})
    return result
