"""B2: scheduling quality of the real Volcano scheduler on the article's cluster, against an offline packing bound.

For each split count, the cluster roles deploy the plugin (playbooks/cluster.yml on the lab); then each scheduler
configuration is put into the scheduler's ConfigMap and the scheduler's Deployment is rolled (as the volcano role
rolls it in a cluster); once the scheduler has seen every node's registration (what the volcano role waits for),
each seeded trace is submitted at once, repeated, one run after another: single vGPU pods and Volcano gang jobs.
Nothing else touches the scheduler or the plugin during a run.
"""

import json
import threading
import time

import yaml
from ansible_collections.gpufleet.vgpu.plugins.module_utils import _capacity, _vgpu_registration
from kubernetes import client, watch

import common
import packing
import workload as tr

SEED = 20261129
# No new binding for this long = the scheduler has placed what it will. Nothing frees capacity during a run, and in
# the 60 runs of the last 30 s setting the latest binding came 2.74 s after submission: 10 s keeps a margin of more
# than 3x and takes B2 from about 32 s to about 12 s per run.
SETTLE_S = 10
RUN_CAP_S = 240
LABEL = "bench.gpufleet.io/job"

ARTICLE_CONF = """actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
- plugins:
  - name: drf
  - name: deviceshare
    arguments:
      deviceshare.VGPUEnable: true
  - name: predicates
  - name: proportion
  - name: nodeorder
  - name: binpack
"""


def chart_default_conf(chart_dir):
    """The chart's own scheduler configuration with deviceshare (VGPUEnable) added to its second tier."""
    conf = yaml.safe_load((chart_dir / "config" / "volcano-scheduler.conf").read_text())
    conf["tiers"][-1]["plugins"].append({"name": "deviceshare", "arguments": {"deviceshare.VGPUEnable": True}})
    return yaml.safe_dump(conf, sort_keys=False)


class Run:
    """One trace on one configuration: submit, watch bindings, settle, measure, clean up."""

    def __init__(self, api, namespace, jobs):
        self.core, self.custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        self.namespace, self.jobs = namespace, jobs
        self.submitted, self.bound_at, self.last_bind = {}, {}, time.time()
        self.stop = threading.Event()

    def watch_bindings(self):
        while not self.stop.is_set():
            stream = watch.Watch()
            try:
                for event in stream.stream(self.core.list_namespaced_pod, self.namespace, timeout_seconds=5):
                    pod = event["object"]
                    if pod.spec.node_name and pod.metadata.name not in self.bound_at:
                        self.bound_at[pod.metadata.name] = time.time()
                        self.last_bind = time.time()
                    if self.stop.is_set():
                        break
            except Exception:  # pylint: disable=broad-except  # a dropped watch is reopened
                time.sleep(0.2)

    def pod_spec(self, memory_units):
        return {"schedulerName": "volcano", "terminationGracePeriodSeconds": 0, "containers": [{
            "name": "cuda", "image": "registry.invalid/cuda:12", "resources": {"limits": {
                "volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": str(memory_units)}}}]}

    def submit(self):
        self.core.create_namespace({"metadata": {"name": self.namespace}})
        for job in self.jobs:
            self.submitted[job["name"]] = time.time()
            labels = {LABEL: job["name"]}
            if len(job["units"]) == 1:
                self.core.create_namespaced_pod(self.namespace, {
                    "metadata": {"name": job["name"], "labels": labels}, "spec": self.pod_spec(job["units"][0])})
                continue
            self.custom.create_namespaced_custom_object("batch.volcano.sh", "v1alpha1", self.namespace, "jobs", {
                "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": job["name"]},
                "spec": {"minAvailable": len(job["units"]), "schedulerName": "volcano", "queue": "default",
                         "tasks": [{"name": "w", "replicas": len(job["units"]), "template": {
                             "metadata": {"labels": labels},
                             "spec": dict(self.pod_spec(job["units"][0]), restartPolicy="Never")}}]}})

    def settle(self):
        expected = sum(len(job["units"]) for job in self.jobs)
        started = time.time()
        while time.time() - started < RUN_CAP_S:
            if len(self.bound_at) >= expected or time.time() - self.last_bind >= SETTLE_S:
                break
            time.sleep(1)
        return time.time() - started

    def measure(self, registers):
        """Placement figures from the pods' device allocations against the registered GPUs (_capacity's view)."""
        bound, latencies, allocations = {}, [], []
        for pod in self.core.list_namespaced_pod(self.namespace).items:
            job = (pod.metadata.labels or {}).get(LABEL)
            if not pod.spec.node_name or not job:
                continue
            bound[job] = bound.get(job, 0) + 1
            if pod.metadata.name in self.bound_at:
                latencies.append(self.bound_at[pod.metadata.name] - self.submitted[job])
            allocations.append((pod.metadata.annotations or {}).get(_capacity.POD_DEVICES))
        gpus = _capacity.free_by_gpu(registers, [])
        free = _capacity.free_by_gpu(registers, allocations)
        placed_units = sum(g["memory"] for g in gpus.values()) - sum(f["memory"] for f in free.values())
        used_slots = sum(g["slots"] for g in gpus.values()) - sum(f["slots"] for f in free.values())
        figures = tr.placement_figures(self.jobs, bound, free)
        phases, reasons = self.podgroups(job["name"] for job in self.jobs
                                         if bound.get(job["name"], 0) < len(job["units"]))
        return dict(figures, placed_units=placed_units, pods_bound=sum(bound.values()),
                    podgroup_phases=phases, podgroup_reasons=reasons,
                    vgpus_used=round(used_slots / float(sum(g["slots"] for g in gpus.values())), 4),
                    memory_used=round(placed_units / float(sum(g["memory"] for g in gpus.values())), 4),
                    jobs_bound=sum(1 for job in self.jobs if bound.get(job["name"], 0) == len(job["units"])),
                    latency_p50_s=_round(tr.percentile(latencies, 0.5)),
                    latency_p99_s=_round(tr.percentile(latencies, 0.99)),
                    latency_max_s=_round(max(latencies) if latencies else None))

    def podgroups(self, jobs):
        """({job: its PodGroup's phase}, {job: the scheduler's last Unschedulable message}) for the jobs named.
        Pending means Volcano's enqueue action has not admitted it (the overcommit and proportion plugins' gates),
        Inqueue that allocate found no place for it. A gang's PodGroup belongs to its Volcano Job; a single pod's,
        made by Volcano's controller, to the pod (named as its job)."""
        wanted, phases, reasons = set(jobs), {}, {}
        for group in self.custom.list_namespaced_custom_object("scheduling.volcano.sh", "v1beta1", self.namespace,
                                                               "podgroups")["items"]:
            for owner in group["metadata"].get("ownerReferences") or []:
                if owner.get("kind") in ("Job", "Pod") and owner.get("name") in wanted:
                    status = group.get("status") or {}
                    phases[owner["name"]] = status.get("phase")
                    messages = [c.get("message") for c in status.get("conditions") or []
                                if c.get("type") == "Unschedulable" and c.get("message")]
                    if messages:
                        reasons[owner["name"]] = messages[-1][:300]
        return phases, reasons

    def cleanup(self):
        self.stop.set()
        self.core.delete_namespace(self.namespace)
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                self.core.read_namespace(self.namespace)
            except client.exceptions.ApiException as exc:
                if exc.status == 404:
                    return
                raise
            time.sleep(1)


def _round(value):
    return None if value is None else round(value, 2)


def registrations(core):
    """The plugin's node-vgpu-register annotations of all nodes."""
    return [(node.metadata.annotations or {}).get(_capacity.REGISTER) for node in core.list_node().items]


def set_scheduler_conf(lab, core, text, timeout=120):
    """Put a configuration into the scheduler's ConfigMap, roll the scheduler's Deployment (every run starts on a
    fresh scheduler and cache, as after the volcano role's rollout) and wait as the volcano role waits: until the lab
    runs it and it has seen every GPU node's registration (the plugin's next one after its first session, within
    its 30 s period). Returns the seconds that took."""
    name, key = "volcano-scheduler-configmap", "volcano-scheduler.conf"
    text = "%s\n# gpufleet bench %.0f\n" % (text.rstrip("\n"), time.time())
    before = _scheduler_pid(lab)
    started = time.time()
    core.patch_namespaced_config_map(name, "volcano-system", {"data": {key: text}})
    client.AppsV1Api(core.api_client).patch_namespaced_deployment("volcano-scheduler", "volcano-system", {
        "spec": {"template": {"metadata": {"annotations": {"bench.gpufleet.io/run": "%.0f" % time.time()}}}}})
    while time.time() - started < timeout:
        conf = lab.dir / "scheduler" / key
        pid = _scheduler_pid(lab)
        if conf.exists() and conf.read_text() == text and pid and pid != before:
            break
        time.sleep(1)
    else:
        raise RuntimeError("vc-scheduler did not restart with the new configuration within %d s" % timeout)
    serialize = core.api_client.sanitize_for_serialization
    while time.time() - started < timeout:
        pods = [serialize(p) for p in core.list_namespaced_pod("volcano-system",
                                                               label_selector="app=volcano-scheduler").items]
        nodes = [serialize(n) for n in core.list_node().items]
        if _vgpu_registration.scheduler_started(pods) and not _vgpu_registration.unseen_nodes(nodes, pods):
            return time.time() - started
        time.sleep(1)
    raise RuntimeError("the GPU nodes did not re-register after the scheduler's start within %d s" % timeout)


def _scheduler_pid(lab):
    try:
        return json.loads((lab.dir / "children.json").read_text())["vc-scheduler"].get("pid")
    except (OSError, ValueError, KeyError):
        return None


def run(out_dir, splits=(2, 4), seeds=(0, 1, 2, 3, 4), repeats=2):
    lab = common.Lab("b2").up()
    try:
        api = lab.api()
        core = client.CoreV1Api(api)
        chart = common.pathlib.Path(lab.info["volcano_chart"])
        results, bounds, configs_seen = [], [], {}
        for split in splits:
            seconds, rc, recap = lab.playbook("cluster.yml", common.ROOT / "inventories" / "lab",
                                              extra={"device_plugin_vgpu": {"split": split}})
            if rc != 0:
                raise RuntimeError("cluster.yml with split %d failed: %s" % (split, recap))
            common.log("split %d deployed in %.0f s" % (split, seconds))
            registers = _wait_registered(core, split)
            gpus = _capacity.free_by_gpu(registers, [])
            factor = _memory_factor(core)
            slots = sum(g["slots"] for g in gpus.values())
            memory_mib = sum(g["memory"] for g in gpus.values()) * factor
            deployed = core.read_namespaced_config_map("volcano-scheduler-configmap", "volcano-system").data[
                "volcano-scheduler.conf"]
            configs = (("gpufleet-default", deployed), ("article", ARTICLE_CONF),
                       ("chart-default+deviceshare", chart_default_conf(chart)))
            configs_seen.update({"%s (split %d)" % (name, split) if name == "gpufleet-default" else name: text
                                 for name, text in configs})
            traces = {}
            for seed in seeds:
                jobs = tr.make_trace(SEED + split + 1000 * seed, slots, memory_mib)
                for job in jobs:
                    job["units"] = [tr.units(mib, factor) for mib in job["pods"]]
                started = time.time()
                cards, units = list(gpus.values()), [job["units"] for job in jobs]
                bound = packing.packing_bound(cards, units)
                bound.update(split=split, seed=seed, seconds=round(time.time() - started, 1),
                             # What an online gang scheduler places in Volcano's order (singles, then gangs; best
                             # fit), and under two largest-first policies: the scheduler's and the policy's headroom.
                             online=packing.online_placement(cards, units),
                             online_largest_first=packing.online_placement(cards, units, packing.largest_first(units)),
                             online_singles_largest_first=packing.online_placement(
                                 cards, units, packing.largest_first(units, singles_only=True)),
                             gpus=cards, jobs=[{"name": job["name"], "mib": job["pods"], "units": job["units"]}
                                               for job in jobs])
                bounds.append(bound)
                traces[seed] = (jobs, bound)
                common.log("packing bound split %d seed %d: %s" % (split, seed, bound))
            # One rollout per configuration, as the volcano role rolls the scheduler on a change of it; the traces
            # then run one after another on that scheduler, each in a namespace of its own, removed before the next.
            for name, text in configs:
                ready_s = set_scheduler_conf(lab, core, text)
                for seed in seeds:
                    jobs, bound = traces[seed]
                    for repeat in range(repeats):
                        results.append(_one_run(api, core, registers, jobs, bound, name, dict(
                            split=split, seed=seed, repeat=repeat, memory_factor=factor, slots=slots,
                            scheduler_ready_s=round(ready_s, 1))))
            # Back to what the role deployed, for the next split.
            set_scheduler_conf(lab, core, deployed)
        return common.write_result(out_dir, "b2-scheduling", {
            "seed": SEED, "seeds": list(seeds), "repeats": repeats, "runs": results, "bounds": bounds,
            "solver": packing.SETTINGS, "settle_s": SETTLE_S, "run_cap_s": RUN_CAP_S, "lab": lab.settings(),
            "workload": {"memory_mix": tr.MEMORY_MIX, "gang_share": tr.GANG_SHARE, "gang_max_mib": tr.GANG_MAX_MIB,
                         "gang_pods": [2, 5], "overload": 1.5},
            "configs": configs_seen})
    finally:
        lab.down()


def _one_run(api, core, registers, jobs, bound, name, where):
    """One trace under one configuration: its row of figures."""
    bench = Run(api, "bench-b2-%s-s%d-%d-%d" % (name.split("+", maxsplit=1)[0], where["split"], where["seed"],
                                                where["repeat"]), jobs)
    watcher = threading.Thread(target=bench.watch_bindings, daemon=True)
    watcher.start()
    bench.submit()
    settle = bench.settle()
    figures = bench.measure(registers)
    bench.cleanup()
    row = dict(figures, config=name, seconds=round(settle, 1),
               bound_units=bound["bound"], bound_optimal=bound["optimal"], bound_gap=bound["gap"],
               fraction_of_bound=round(figures["placed_units"] / float(bound["bound"]), 4) if bound["bound"] else None,
               pods=sum(len(j["units"]) for j in jobs), jobs=len(jobs),
               gangs=sum(1 for j in jobs if len(j["units"]) > 1), **where)
    common.log("B2 split %d seed %d repeat %d %s: %.1f%% of the optimum, %d partial gangs, %d pending that fit, "
               "p99 %s s" % (where["split"], where["seed"], where["repeat"], name,
                             100 * (row["fraction_of_bound"] or 0), len(row["partial_gangs"]),
                             len(row["pending_fit_now"]), row["latency_p99_s"]))
    return row


def _memory_factor(core):
    text = core.read_namespaced_config_map("volcano-vgpu-device-config", "kube-system").data
    conf = yaml.safe_load(next(iter(text.values())))
    return int(conf["nvidia"]["gpuMemoryFactor"])


def _wait_registered(core, split, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        registers = registrations(core)
        gpus = _capacity.free_by_gpu(registers, [])
        if len(gpus) == 10 and all(g["slots"] == split for g in gpus.values()):
            return registers
        time.sleep(2)
    raise RuntimeError("the GPU nodes did not register split %d within %d s" % (split, timeout))
