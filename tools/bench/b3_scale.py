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

The vGPU pods bind under each of several variants on the same lab (VARIANTS), one after the other: the stock images
with the role's settings, the scheduler built with tools/upstream/volcano's patches (the lab's --volcano-fix, as a
site deploys it: volcano_scheduler_image_tag), the stand-in plugin writing its Node only when its registration
changed (as the plugin's main branch does), and for the settings sweeps the scheduler's node worker threads, log
level and share of the nodes it looks for per pod, alone or over one of those builds (variant()). Each variant is
applied as a site would (playbooks/cluster.yml --tags volcano: the role rolls the scheduler and waits until it has
seen every vGPU node), and each run records what the scheduler received and did while the pods bound: the Node
updates (a watch, sorted by what changed), the scheduler's CPU seconds, the machine's busy cores split among the
lab's processes, the benchmark and the rest (cpu_use: a rest well above zero is another load on the machine), CPU
profiles (its --enable-pprof endpoint) taken PROFILE_AT seconds after the release, and from its own /metrics what its
sessions and its API requests took meanwhile (WAITS: time a CPU profile does not show, such as the pod PATCH of every
vGPU allocation, which the session waits for).
"""

import concurrent.futures
import json
import os
import re
import resource
import subprocess
import threading
import time
import urllib.request

import yaml
import urllib3
from gpufleet_lab import images
from kubernetes import client, watch
from prometheus_client.parser import text_string_to_metric_families

import common

PODS_PER_NODE = 10
SCHEDULER = "vc-scheduler"  # Volcano's scheduler among the lab's processes (Lab.processes)
BIND_DEADLINE_S = 900   # a run stops this long after the release, with what it bound by then
TIMELINE_STEP_S = 10
PROFILE_AT = (30, 300)  # seconds after the release at which a CPU profile of the scheduler starts, while binding
PROFILE_S = 30
PROFILE_TOP = 25        # functions kept per profile (by cumulative time)
# Where a vGPU scheduler's time goes, by the function whose cumulative time tells it (each profile records them).
PROFILE_FOCUS = (
    ("node updates", "volcano.sh/volcano/pkg/scheduler/cache.(*SchedulerCache).AddOrUpdateNode"),
    ("session snapshot", "volcano.sh/volcano/pkg/scheduler/cache.(*SchedulerCache).Snapshot"),
    ("vGPU metrics reset", "volcano.sh/volcano/pkg/scheduler/api/devices/nvidia/vgpu.ResetDeviceMetrics"),
    ("allocate: predicates", "volcano.sh/volcano/pkg/scheduler/actions/allocate.(*Action).predicate"),
    ("vGPU allocation (pod annotation patch)",
     "volcano.sh/volcano/pkg/scheduler/api/devices/nvidia/vgpu.(*GPUDevices).Allocate"),
    ("binding", "volcano.sh/volcano/pkg/scheduler/cache.(*SchedulerCache).Bind"),
    ("logging", "k8s.io/klog/v2.(*loggingT).printDepth"),
    ("garbage collection", "runtime.gcBgMarkWorker"),
)
# The chart's --enable-pprof: the profiles' endpoint, the one setting B3 adds to the role's.
PPROF = {"custom": {"scheduler_pprof_enable": True}}
FIX_TAG = images.volcano_version() + images.VOLCANO_FIX_SUFFIX
VARIANTS = {
    "stock": {"label": "stock images, the role's settings"},
    "fixed": {"label": "scheduler with tools/upstream/volcano's patches",
              "vars": {"volcano_scheduler_image_tag": FIX_TAG}},
    "quiet-plugin": {"label": "stock images, the plugin writing its Node only when its registration changed",
                     "plugin_register": "on-change"},
}
DEFAULT_VARIANTS = ("stock", "fixed", "quiet-plugin")
# The variants whose binds a run of more than one round measures again, each round after plain pods of its own: the
# goal's ratio (fixed against plain) moved from 0.76 to 0.45 between two single runs of one commit on a shared 2-core
# machine, so it is judged on the median round. The stock scheduler on 1000 nodes runs to the deadline (900 s), and
# quiet-plugin answers a question no goal asks: those run once.
DEFAULT_REPEAT_VARIANTS = ("fixed",)
# The scheduler settings a variant may add, each a volcano role variable: w1-v2 is 1 node worker thread at log level 2;
# p10 has the scheduler look for 10% of the nodes (at least Volcano's 100) that fit a pod, instead of its adaptive
# share (50% minus 1% per 125 nodes, at least 5%).
SETTINGS = {"w": "volcano_scheduler_node_worker_threads", "v": "volcano_scheduler_log_level",
            "p": "volcano_scheduler_percentage_nodes_to_find"}
SETTING = re.compile(r"^(?P<key>[wvp])(?P<value>\d+)$")


def setting_label(key, value):
    if key == "w":
        return "%d node worker thread%s" % (value, "" if value == 1 else "s")
    if key == "v":
        return "log level %d" % value
    return "%d%% of the nodes found per pod" % value if value else "Volcano's adaptive share of the nodes found per pod"


def variant(name):
    """{label, vars, plugin_register} of a variant name: one of VARIANTS, settings (w<threads>-v<level>-p<percent>,
    any of them, e.g. w1-v2 or p10: the stock images with those settings), or both joined by '+' (fixed+p10)."""
    if "+" in name:
        base, _sep, settings = name.partition("+")
    elif name in VARIANTS:
        base, settings = name, ""
    else:
        base, settings = "stock", name
    allowed = ("allowed: %s; settings w<node worker threads>-v<log level>-p<percentage of nodes to find>, any of "
               "them, alone or after a variant and '+', e.g. fixed+p10" % ", ".join(VARIANTS))
    if base not in VARIANTS or (base != name and not settings):
        raise SystemExit("unknown B3 variant %r (%s)" % (name, allowed))
    found = dict(VARIANTS[base])
    extra, labels = dict(found.get("vars", {})), []
    for token in settings.split("-") if settings else ():
        match = SETTING.match(token)
        if not match:
            raise SystemExit("unknown B3 variant %r: %r is no setting (%s)" % (name, token, allowed))
        extra[SETTINGS[match.group("key")]] = int(match.group("value"))
        labels.append(setting_label(match.group("key"), int(match.group("value"))))
    label = found["label"] if not labels else "%s, %s" % (
        found["label"].replace(", the role's settings", ""), ", ".join(labels))
    extra = dict(extra, volcano_chart_values=PPROF)
    extra.setdefault("volcano_scheduler_image_tag", "")
    return {"name": name, "label": label, "vars": extra, "plugin_register": found.get("plugin_register", "periodic")}


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
    (inventory / "group_vars" / "all.yml").write_text(lab_all.read_text() + "\n" + yaml.safe_dump(
        {"volcano_chart_values": PPROF}))
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
        # pod name -> its node: how many nodes the pods took tells how tightly the scheduler packed them.
        self.bound, self.version, self.error, self.done = {}, None, None, threading.Event()
        self.all_bound_at = None  # taken as the event arrives: 100 pods bind in well under the poll's 0.5 s
        self.failures = 0

    def saw(self, pod):
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            self.bound[pod["metadata"]["name"]] = node
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

    def nodes_used(self):
        return len(set(list(self.bound.values())))  # list(): one step under the GIL while the watch adds


class NodeUpdates(threading.Thread):
    """The Node updates the scheduler receives (its informer watches the same), counted from a watch and sorted by
    what changed since the node's previous version: the plugin's registration (register annotation), its
    handshake, allocatable, gpufleet's own annotations, or anything else (kwok's heartbeat, labels)."""

    KINDS = ("register", "handshake", "allocatable", "gpufleet", "other")

    def __init__(self, api):
        super().__init__(daemon=True)
        self.core, self.done = client.CoreV1Api(api), threading.Event()
        self.seen, self.counts, self.started, self.error = {}, dict.fromkeys(self.KINDS, 0), None, None

    @staticmethod
    def facets(node):
        annotations = node["metadata"].get("annotations") or {}
        return {"register": annotations.get("volcano.sh/node-vgpu-register"),
                "handshake": annotations.get("volcano.sh/node-vgpu-handshake"),
                "allocatable": (node.get("status") or {}).get("allocatable"),
                "gpufleet": {k: v for k, v in annotations.items() if k.startswith("gpufleet.io/")}}

    def run(self):
        try:
            listing = json.loads(self.core.list_node(_preload_content=False).data)
            for node in listing["items"]:
                self.seen[node["metadata"]["name"]] = self.facets(node)
            version = listing["metadata"]["resourceVersion"]
            self.started = time.time()
            while not self.done.is_set():
                for event in watch.Watch().stream(self.core.list_node, deserialize=False, resource_version=version,
                                                  allow_watch_bookmarks=True, timeout_seconds=30):
                    node = event["object"]
                    version = node["metadata"]["resourceVersion"]
                    if event["type"] == "MODIFIED":
                        now, before = self.facets(node), self.seen.get(node["metadata"]["name"]) or {}
                        kind = next((k for k in self.KINDS[:-1] if now[k] != before.get(k)), "other")
                        self.counts[kind] += 1
                        self.seen[node["metadata"]["name"]] = now
                    if self.done.is_set():
                        return
        except Exception as exc:  # pylint: disable=broad-except  # reported with the figures, which then lack it
            self.error = str(exc)

    def result(self):
        self.done.set()
        seconds = time.time() - self.started if self.started else None
        total = sum(self.counts.values())
        return {"by_change": self.counts, "total": total, "seconds": round(seconds, 1) if seconds else None,
                "per_s": round(total / seconds, 2) if seconds else None, "error": self.error}


# The scheduler's own histograms (its /metrics: Volcano's, and client-go's request latency, which Volcano registers),
# read before and after the pods bind: how many observations and how many seconds each added meanwhile. Per entry:
# the histogram, the labels that pick its series, and the unit of its sums.
WAITS = (
    ("sessions", "volcano_e2e_scheduling_latency_milliseconds", {}, 0.001),
    ("allocate action", "volcano_action_scheduling_latency_milliseconds", {"action": "allocate"}, 0.001),
    ("PATCH requests", "rest_client_request_duration_seconds", {"verb": "PATCH"}, 1.0),
    ("POST requests", "rest_client_request_duration_seconds", {"verb": "POST"}, 1.0),
)


def histogram_totals(text):
    """{label: (count, seconds)} of WAITS from a /metrics text (series that match summed, e.g. over hosts)."""
    totals = {label: [0.0, 0.0] for label, dummy, dummy2, dummy3 in WAITS}
    for family in text_string_to_metric_families(text):
        for label, name, labels, unit in WAITS:
            if family.name != name:
                continue
            for sample in family.samples:
                if any(sample.labels.get(key) != value for key, value in labels.items()):
                    continue
                if sample.name == name + "_count":
                    totals[label][0] += sample.value
                elif sample.name == name + "_sum":
                    totals[label][1] += sample.value * unit
    return {label: tuple(values) for label, values in totals.items()}


def waits(before, after, window_s):
    """{label: {count, seconds, mean_ms, share}} added between two histogram_totals(); share: the seconds over the
    window (above 1 where requests overlap)."""
    found = {}
    for label, (count, seconds) in after.items():
        count, seconds = count - before.get(label, (0, 0))[0], seconds - before.get(label, (0, 0))[1]
        found[label] = {"count": int(round(count)), "seconds": round(seconds, 2),
                        "mean_ms": round(1000 * seconds / count, 1) if count else None,
                        "share": round(seconds / window_s, 3) if window_s else None}
    return found


def scrape(url):
    """The text of a /metrics endpoint, or None when it cannot be read."""
    try:
        with urllib.request.urlopen(url, timeout=30) as response:  # noqa: S310 (the lab's loopback)
            return response.read().decode()
    except OSError:
        return None


def cpu_seconds(pid):
    """User + system CPU seconds of a process so far (/proc/<pid>/stat), or None when it is gone."""
    try:
        fields = open("/proc/%d/stat" % pid, encoding="ascii").read().rsplit(")", 1)[1].split()
    except (OSError, TypeError):
        return None
    return (int(fields[11]) + int(fields[12])) / float(os.sysconf("SC_CLK_TCK"))


def pprof_top(path):
    """{duration_s, samples_s, functions: [{function, flat_pct, cum_pct}], focus: {label: cum_pct}} of a CPU
    profile: the PROFILE_TOP functions with the most cumulative time (go tool pprof -top -cum), and the cumulative
    share of each PROFILE_FOCUS function (0 when it did not run); or {error}."""
    result = subprocess.run(["go", "tool", "pprof", "-top", "-cum", "-nodecount=100000", "-nodefraction=0", str(path)],
                            capture_output=True, text=True, check=False)
    if result.returncode != 0:
        return {"error": result.stderr.strip()[-500:]}
    found = {"functions": []}
    match = re.search(r"Duration: ([\d.]+)(m?s), Total samples = ([\d.]+)(m?s)", result.stdout)
    if match:
        scale = {"s": 1.0, "ms": 0.001}
        found["duration_s"] = round(float(match.group(1)) * scale[match.group(2)], 2)
        found["samples_s"] = round(float(match.group(3)) * scale[match.group(4)], 2)
    every = []
    for line in result.stdout.splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[1].endswith("%") and parts[4].endswith("%"):
            every.append({"function": parts[5].replace(" (inline)", ""), "flat_pct": float(parts[1][:-1]),
                          "cum_pct": float(parts[4][:-1])})
    found["functions"] = every[:PROFILE_TOP]
    cumulative = {row["function"]: row["cum_pct"] for row in every}
    found["focus"] = {label: cumulative.get(function, 0.0) for label, function in PROFILE_FOCUS}
    return found


class Probe:
    """What the scheduler received and did while the pods bound: Node updates, its waits, CPU profiles (its CPU
    seconds come with the machine's, from throughput's CPU window: scheduler_cpu)."""

    def __init__(self, lab, api, work):
        self.lab, self.api, self.work = lab, api, work
        self.updates = self.metrics_url = self.before = None
        self.profiles, self.threads = [], []

    def released(self, released, counter, deadline):
        self.updates = NodeUpdates(self.api)
        self.updates.start()
        scheduler = self.lab.scheduler()
        self.metrics_url = scheduler.get("metrics_url")
        text = scrape(self.metrics_url) if self.metrics_url else None
        self.before = histogram_totals(text) if text else None
        url = (scheduler.get("metrics_url") or "").replace("/metrics", "/debug/pprof/profile?seconds=%d" % PROFILE_S)
        for at in profile_starts(deadline):
            thread = threading.Thread(target=self.profile, args=(url, released, at, counter), daemon=True)
            thread.start()
            self.threads.append(thread)

    def profile(self, url, released, at, counter):
        # Wakes when the run ends: a profile of a scheduler with nothing left to bind is not taken.
        if counter.done.wait(max(0.0, released + at - time.time())) or counter.all_bound_at is not None:
            return
        record = {"at_s": at, "bound_at_start": counter.count()}
        try:
            path = self.work / ("profile-%d.pb.gz" % at)
            with urllib.request.urlopen(url, timeout=PROFILE_S + 60) as response:
                path.write_bytes(response.read())
            record.update(pprof_top(path))
        except OSError as exc:
            record["error"] = str(exc)
        record["bound_at_end"] = counter.count()
        self.profiles.append(record)

    def result(self, bind_seconds):
        text = scrape(self.metrics_url) if self.metrics_url and self.before is not None else None
        for thread in self.threads:
            thread.join(PROFILE_S + 90)
        return {"scheduler_waits": waits(self.before, histogram_totals(text), bind_seconds) if text else None,
                "node_updates": self.updates.result() if self.updates else None,
                "profiles": sorted(self.profiles, key=lambda p: p["at_s"])}


def machine_ticks():
    """(busy, all) clock ticks of the machine's CPUs together since boot (/proc/stat): busy is all but idle and
    iowait, so it holds steal, the time a hypervisor gave this machine's CPUs to another: CPU the lab did not get."""
    with open("/proc/stat", encoding="ascii") as stat:
        fields = [int(value) for value in stat.readline().split()[1:9]]
    return fields[0] + fields[1] + fields[2] + sum(fields[5:8]), sum(fields)


def own_cpu_seconds():
    """User + system CPU seconds of this process (every thread: the pod creation, the watch that counts)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def cpu_sample(processes):
    """What cpu_use compares: the time, the machine's ticks, this process's CPU and each named group of processes'
    (None when one of its processes is gone: a group that restarted in the window has no figure)."""
    groups = {}
    for name, pids in processes.items():
        seconds = [cpu_seconds(pid) for pid in pids]
        groups[name] = None if None in seconds else sum(seconds)
    return {"at": time.time(), "machine": machine_ticks(), "bench": own_cpu_seconds(), "groups": groups}


def cpu_use(before, after, cpus):
    """Cores used over the window between two cpu_samples: the machine's busy cores, each lab group's, the
    benchmark's own, and what is left: "other", the cores that neither the lab nor the benchmark took
    (another load on the machine, or kernel work charged to no process; a share small enough to be rounding shows as
    0, never below). The lab shares the machine's cores with whatever else runs, so a window with other cores busy
    measured a slower lab."""
    seconds = after["at"] - before["at"]
    if seconds <= 0:
        raise ValueError("a CPU window must end after it starts (%r s)" % seconds)
    busy, total = (a - b for a, b in zip(after["machine"], before["machine"]))
    machine = cpus * busy / total if total else 0.0
    lab = {name: (after["groups"][name] - start) / seconds for name, start in before["groups"].items()
           if start is not None and after["groups"].get(name) is not None}
    bench = (after["bench"] - before["bench"]) / seconds
    return {"seconds": round(seconds, 1), "machine_cores": round(machine, 2), "bench_cores": round(bench, 2),
            "lab_cores": {name: round(cores, 2) for name, cores in lab.items()},
            "other_cores": round(max(0.0, machine - sum(lab.values()) - bench), 2)}


def scheduler_cpu(window):
    """The scheduler's CPU over a cpu_use window, in the fields the page's tables read (None where its process
    restarted in the window)."""
    cores = window["lab_cores"].get(SCHEDULER)
    return {"scheduler_cpu_s": None if cores is None else round(cores * window["seconds"], 1),
            "scheduler_cpu_per_s": cores}


def profile_starts(deadline):
    """When the CPU profiles start: PROFILE_AT, each moved earlier so that it ends by the deadline (the counter of
    bound pods stops there, so a profile past it would show no bind). Starts that coincide are taken once."""
    latest = max(0, deadline - PROFILE_S)
    return tuple(sorted({min(at, latest) for at in PROFILE_AT}))


def throughput(api, core, count, limits, namespace, deadline=BIND_DEADLINE_S, probe=None, processes=None):
    """Create `count` pods asking for `limits` (8 threads), each naming one of count/GROUP_SIZE PodGroups of
    minMember 1 that do not exist yet; then create the PodGroups and time until Volcano has bound every pod, or
    until `deadline` seconds. A probe sees the release and gives its figures at the end; `processes` ({name: [pid]},
    the lab's) has where the machine's CPU went over the same window measured (cpu_use)."""
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
    window = cpu_sample(processes) if processes is not None else None
    if probe:
        probe.released(released, counter, deadline)
    for index in range(groups):
        custom.create_namespaced_custom_object("scheduling.volcano.sh", "v1beta1", namespace, "podgroups", {
            "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "metadata": {"name": "g%03d" % index},
            "spec": {"minMember": 1, "queue": "default"}})
    bound, seconds, timeline, next_step = 0, None, [], released
    try:
        while time.time() - released < deadline:
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
    if window is not None:
        window = cpu_use(window, cpu_sample(processes), os.cpu_count())
    span = seconds if seconds is not None else time.time() - released
    if not timeline or timeline[-1] != [round(span, 1), bound]:
        timeline.append([round(span, 1), bound])
    result = {"pods": count, "bound": bound, "create_seconds": round(created, 1), "all_bound": bound >= count,
              "bind_seconds": round(span, 1), "pods_per_s": round(bound / span, 2) if span else None,
              "deadline_s": deadline, "timeline": timeline, "nodes_used": counter.nodes_used()}
    if window is not None:
        result.update(scheduler_cpu(window), cpu=window)
    if probe:
        result.update(probe.result(span))
    return result


def clear(core, namespace, timeout=1800):
    """Remove the baseline's pods before the vGPU pods come. Deleted at once (grace period 0, as `kubectl delete
    --force` does): a graceful delete waits for kwok to confirm each pod, about 4 minutes for 10,000 pods here,
    which measure nothing."""
    deadline = time.time() + timeout
    while True:
        try:
            core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
            break
        except (client.exceptions.ApiException, urllib3.exceptions.HTTPError) as exc:
            # 10,000 pods under a busy scheduler outlast the API server's 60 s request timeout: it answers 504, or
            # closes the connection without an answer, and goes on deleting. Ask again for what is left.
            if getattr(exc, "status", None) not in (None, 500, 503, 504) or time.time() > deadline:
                raise
            time.sleep(5)
    core.delete_namespace(namespace)
    while time.time() < deadline:
        try:
            core.read_namespace(namespace)
        except client.exceptions.ApiException as exc:
            if exc.status == 404:
                return
            raise
        time.sleep(2)
    raise RuntimeError("namespace %s not gone within %d s" % (namespace, timeout))


def one(out_work, count, variants, deadline, rounds=1, repeat_variants=DEFAULT_REPEAT_VARIANTS):
    """One fleet size: converge and rerun, the plain pods and every variant once, then rounds 2..`rounds` of the plain
    pods and the `repeat_variants` again (row["repeats"])."""
    work = out_work / ("n%d" % count)
    nodes_file, inventory, names = fleet(work, count)
    chosen = [variant(name) for name in variants]
    lab = common.Lab("b3", nodes_file=nodes_file,
                     options=["--volcano-fix"] if any(v["vars"]["volcano_scheduler_image_tag"] for v in chosen) else [])
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
        plain = throughput(api, core, PODS_PER_NODE * count, PLAIN, "bench-b3-plain", processes=lab.processes())
        clear(core, "bench-b3-plain")
        row = {"nodes": count, "gpus": 8 * count, "vgpus": 16 * count, "lab_up_s": round(lab.up_seconds, 1),
               "converge_s": round(converge, 1), "rerun_s": round(rerun, 1), "rerun_changed": recap2.get("changed"),
               "rerun_changed_tasks": recap2.get("changed_tasks"),
               "registered_s": round(reg["seconds"], 1) if reg["seconds"] else None, "plain": plain, "variants": []}
        for chosen_variant in chosen:
            row["variants"].append(bind_variant(lab, api, core, inventory, count, chosen_variant, deadline,
                                                work / chosen_variant["name"], plain))
        again = [v for v in chosen if v["name"] in repeat_variants]
        for number in range(2, rounds + 1) if again else ():
            # Plain pods again just before, so that each round's ratio is of two binds minutes apart.
            plain_again = throughput(api, core, PODS_PER_NODE * count, PLAIN, "bench-b3-plain",
                                     processes=lab.processes())
            clear(core, "bench-b3-plain")
            row.setdefault("repeats", []).append({"round": number, "plain": plain_again, "variants": [
                bind_variant(lab, api, core, inventory, count, v, deadline, work / ("%s-round%d" % (v["name"], number)),
                             plain_again) for v in again]})
        time.sleep(2)
        row["peak_rss_mib"] = sampler.peak
        common.log("B3 %d nodes: %s" % (count, json.dumps(row)[:2000]))
        return row
    finally:
        sampler.done.set()
        lab.down()


def bind_variant(lab, api, core, inventory, count, chosen, deadline, work, plain):
    """Apply a variant as a site would (the volcano role rolls the scheduler and waits until it has seen every vGPU
    node), then time the vGPU pods' binding under it, probed."""
    work.mkdir(parents=True, exist_ok=True)
    lab.set_option("plugin-register=%s" % chosen["plugin_register"])
    applied, rc, recap = lab.playbook("cluster.yml", inventory, extra=chosen["vars"], tags="volcano")
    if rc != 0:
        raise RuntimeError("applying B3 variant %s on %d nodes failed: %s" % (chosen["name"], count, recap))
    vgpu = throughput(api, core, PODS_PER_NODE * count, VGPU, "bench-b3-vgpu", deadline=deadline,
                      probe=Probe(lab, api, work), processes=lab.processes())
    settings = lab.settings()
    clear(core, "bench-b3-vgpu")
    result = {"variant": chosen["name"], "label": chosen["label"], "vars": chosen["vars"],
              "apply_s": round(applied, 1), "apply_changed": recap.get("changed"), "lab": settings,
              "throughput": vgpu, "vgpu_to_plain": round(vgpu["pods_per_s"] / plain["pods_per_s"], 3)
              if vgpu["pods_per_s"] and plain["pods_per_s"] else None}
    common.log("B3 %d nodes, %s: %d of %d bound in %.0f s (%s binds/s)" % (
        count, chosen["name"], vgpu["bound"], vgpu["pods"], vgpu["bind_seconds"], vgpu["pods_per_s"]))
    return result


def run(out_dir, sizes=(10, 100, 1000), variants=DEFAULT_VARIANTS, deadline=BIND_DEADLINE_S, name="b3-scale", rounds=1,
        repeat_variants=DEFAULT_REPEAT_VARIANTS):
    for chosen in list(variants) + list(repeat_variants):
        variant(chosen)  # an unknown name stops before any lab starts
    if rounds < 1:
        raise SystemExit("B3 rounds must be >= 1, got %r" % (rounds,))
    rows = []
    for count in sizes:
        rows.append(one(out_dir / "b3-work", count, variants, deadline, rounds, repeat_variants))
        # Written after every size: a larger fleet that fails keeps the smaller ones' figures.
        result = common.write_result(out_dir, name, {
            "pods_per_node": PODS_PER_NODE, "bind_deadline_s": deadline, "group_size": GROUP_SIZE,
            "timeline_step_s": TIMELINE_STEP_S, "profile_at_s": list(profile_starts(deadline)), "profile_s": PROFILE_S,
            "variants": {v: variant(v)["label"] for v in variants}, "rounds": rounds,
            "repeat_variants": [v for v in repeat_variants if v in variants], "runs": rows})
    return result
