# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The article's five manual checks, run against a cluster through the Kubernetes API.

Everything is created in one namespace with a random suffix, which is deleted at the end whatever happened. Each
check returns passed, failed, or skipped with the reason.
"""

from __future__ import annotations

import json
import random
import string
import time

from ansible.module_utils.urls import open_url

from ansible_collections.gpufleet.vgpu.plugins.module_utils import _capacity as cap
from ansible_collections.gpufleet.vgpu.plugins.module_utils import _vgpu_plugin as vgpu

try:
    from kubernetes import client
    from kubernetes.stream import stream
    HAS_KUBERNETES = True
except ImportError:  # pragma: no cover - reported by the module
    HAS_KUBERNETES = False

try:
    from prometheus_client.parser import text_string_to_metric_families
    HAS_PROMETHEUS = True
except ImportError:  # pragma: no cover - reported by the module
    HAS_PROMETHEUS = False

CHECKS = ("vgpu_pod", "fill", "metrics", "memory_limit", "gang")
KWOK = "kwok.x-k8s.io/node"


def describe(exc):
    """One line for an exception: the API's own message for Kubernetes API errors."""
    body = getattr(exc, "body", None)
    if body:
        try:
            return "API error %s: %s" % (getattr(exc, "status", "?"), json.loads(body).get("message", body))
        except ValueError:
            pass
    return ("%s: %s" % (type(exc).__name__, exc)).splitlines()[0]


def metric_values(text, name):
    """{(devID, NodeName): value} of one metric in Prometheus text format (prometheus-client's parser); samples of
    the same card (per-pod metrics) are summed."""
    values = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                key = (sample.labels.get("devID"), sample.labels.get("NodeName"))
                values[key] = values.get(key, 0) + sample.value
    return values


# Volcano before 1.15 adds the card's running total to volcano_vgpu_device_allocated_memory for every pod
# (AddPodMetrics: Add(UsedMem) instead of Set), so the card figure is over-counted there; its per-pod metric is right.
CARD_METRIC = "volcano_vgpu_device_allocated_memory"
POD_METRIC = "volcano_vgpu_device_memory_allocation_for_a_certain_pod"
CARD_METRIC_FIXED = (1, 15, 0)
# First version assumed not to double-count a gang member's vGPU while trying the gang [inferred: not verified on 1.15].
GANG_EXACT_FIT_FIXED = (1, 15, 0)


def compare_allocated_memory(metric, pods, smoke_names):
    """Problems where the scheduler's allocated memory per card differs from the sum of the pods' requests.

    Only cards that hold nothing but smoke pods are compared (others may carry workloads of their own)."""
    per_card, foreign = {}, set()
    for pod in pods:
        for device in cap.parse_pod_devices(((pod.get("metadata") or {}).get("annotations") or {}).get(cap.POD_DEVICES)):
            key = (device["uuid"], pod["spec"]["nodeName"])
            per_card[key] = per_card.get(key, 0) + device["memory_units"]
            if pod["metadata"]["name"] not in smoke_names:
                foreign.add(key)
    problems = []
    for key in sorted(set(per_card) - foreign):
        have = metric.get(key)
        if have is None or int(have) != per_card[key]:
            problems.append("card %s on %s: scheduler says %s, the smoke pods requested %d"
                            % (key[0], key[1], "nothing" if have is None else int(have), per_card[key]))
    return problems, len(set(per_card) - foreign)


class Smoke:  # pylint: disable=too-many-instance-attributes
    """One smoke run. `params` are the module's options."""

    def __init__(self, api_client, params):
        self.params = params
        self.core = client.CoreV1Api(api_client)
        self.apps = client.AppsV1Api(api_client)
        self.objects = client.CustomObjectsApi(api_client)
        suffix = "".join(random.choice(string.ascii_lowercase + string.digits) for dummy in range(6))
        self.namespace = "%s-%s" % (params["namespace_prefix"], suffix)
        self.real_gpus = None
        self.smoke_pods = set()

    # --- helpers ---

    def wait(self, predicate, timeout, interval=1.0):
        deadline = time.time() + timeout
        last = None
        while time.time() < deadline:
            last = predicate()
            if last is True:
                return True, last
            time.sleep(interval)
        return False, last

    def pod_spec(self, memory_units, scheduler=True):
        limits = {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": str(memory_units)}
        spec = {"containers": [{"name": "cuda", "image": self.params["image"],
                                "command": list(self.params["command"]), "resources": {"limits": limits}}],
                "restartPolicy": "Always", "terminationGracePeriodSeconds": 0}
        if scheduler:
            spec["schedulerName"] = self.params["scheduler_name"]
        return spec

    def create_pod(self, name, memory_units, **kw):
        self.smoke_pods.add(name)
        self.core.create_namespaced_pod(self.namespace, {"metadata": {"name": name, "labels": kw.get("labels", {})},
                                                         "spec": kw.get("spec") or self.pod_spec(memory_units)})

    def pods(self, selector=None):
        return self.core.list_namespaced_pod(self.namespace, label_selector=selector).items

    def gpu_nodes(self):
        nodes = [n for n in self.core.list_node().items
                 if int((n.status.allocatable or {}).get("volcano.sh/vgpu-number", "0") or 0) > 0]
        return nodes

    def free_vgpus(self):
        """Allocatable vGPUs minus those held by live pods (from the scheduler's allocation annotations)."""
        total = sum(int(n.status.allocatable["volcano.sh/vgpu-number"]) for n in self.gpu_nodes())
        held = 0
        for pod in self.core.list_pod_for_all_namespaces().items:
            if pod.status.phase in ("Pending", "Running") and pod.spec.node_name:
                held += len(cap.parse_pod_devices((pod.metadata.annotations or {}).get(cap.POD_DEVICES)))
        return total - held

    def delete_pods(self, selector):
        for pod in self.pods(selector):
            self.core.delete_namespaced_pod(pod.metadata.name, self.namespace, grace_period_seconds=0)
        return self.wait(lambda: not self.pods(selector) or len(self.pods(selector)), self.params["timeout"])[0]

    # --- checks ---

    def check_vgpu_pod(self):
        memory = self.params["vgpu_memory"]
        self.create_pod("vgpu-case01", memory, labels={"gpufleet.io/smoke": "case01"})
        done, phase = self.wait(lambda: self.core.read_namespaced_pod("vgpu-case01", self.namespace).status.phase
                                == "Running" or self.core.read_namespaced_pod("vgpu-case01", self.namespace).status.phase,
                                self.params["timeout"])
        if not done:
            return "failed", "the vGPU pod did not run within %d s (phase %s)" % (self.params["timeout"], phase)
        pod = self.core.read_namespaced_pod("vgpu-case01", self.namespace)
        devices = cap.parse_pod_devices((pod.metadata.annotations or {}).get(cap.POD_DEVICES))
        gpu_nodes = {n.metadata.name for n in self.gpu_nodes()}
        if pod.spec.node_name not in gpu_nodes or len(devices) != 1 or devices[0]["memory_units"] != memory:
            return "failed", "pod on %s with devices %r; wanted one vGPU of %d units on a GPU node" % (
                pod.spec.node_name, devices, memory)
        detail = "on %s, GPU %s, %d memory units" % (pod.spec.node_name, devices[0]["uuid"], memory)
        if not self.real_gpus:
            return "passed", detail + " (simulated GPU nodes: nvidia-smi and CUDA_DEVICE_MEMORY_LIMIT_0 not checked)"
        out = self.exec(pod.metadata.name, ["sh", "-c", "echo limit=$CUDA_DEVICE_MEMORY_LIMIT_0; nvidia-smi "
                                            "--query-gpu=memory.total --format=csv,noheader,nounits"])
        lines = out.strip().splitlines()
        limit = lines[0].split("=", 1)[1] if lines and lines[0].startswith("limit=") else ""
        shown = lines[-1].strip() if len(lines) > 1 else ""
        want = memory * self.params["memory_factor"]
        if not limit or not shown.isdigit() or abs(int(shown) - want) > max(2, want // 100):
            return "failed", detail + "; CUDA_DEVICE_MEMORY_LIMIT_0=%r, nvidia-smi shows %r MiB, wanted %d MiB" % (
                limit, shown, want)
        return "passed", detail + "; nvidia-smi shows %s MiB, CUDA_DEVICE_MEMORY_LIMIT_0=%s" % (shown, limit)

    def exec(self, pod, command):
        return stream(self.core.connect_get_namespaced_pod_exec, pod, self.namespace, command=command,
                      stderr=True, stdin=False, stdout=True, tty=False)

    def check_fill(self):
        free = self.free_vgpus()
        if free < 1:
            return "skipped", "no free vGPU in the cluster"
        for index in range(free):
            self.create_pod("fill-%03d" % index, self.params["fill_memory"], labels={"gpufleet.io/smoke": "fill"})
        done, running = self.wait(lambda: [p.status.phase for p in self.pods("gpufleet.io/smoke=fill")].count(
            "Running") == free or [p.status.phase for p in self.pods("gpufleet.io/smoke=fill")].count("Running"),
            self.params["timeout"])
        if not done:
            return "failed", "%s of %d one-vGPU pods run within %d s" % (running, free, self.params["timeout"])
        self.create_pod("fill-extra", self.params["fill_memory"], labels={"gpufleet.io/smoke": "fill-extra"})

        def unschedulable():
            pod = self.core.read_namespaced_pod("fill-extra", self.namespace)
            if pod.spec.node_name:
                return "bound to %s" % pod.spec.node_name
            return any(c.type == "PodScheduled" and c.status == "False" for c in pod.status.conditions or [])
        done, last = self.wait(unschedulable, 60)
        if not done:
            return "failed", "%d pods run, but the one more was not held as unschedulable (%s)" % (free, last)
        time.sleep(5)  # several scheduling cycles: it must stay unbound
        if self.core.read_namespaced_pod("fill-extra", self.namespace).spec.node_name:
            return "failed", "the pod beyond the cluster's %d vGPUs was bound" % free
        return "passed", "%d one-vGPU pods run (all free vGPUs); one more stays Pending, unschedulable" % free

    def check_metrics(self):
        if not HAS_PROMETHEUS:
            return "failed", "prometheus-client is not installed on the host running the smoke test"
        if not self.pods("gpufleet.io/smoke"):
            return "skipped", "no smoke pod holds a vGPU (fill did not run)"
        # Volcano 1.10 counts a freshly bound pod twice until the node's next resync (the device plugin's handshake
        # causes one at least every 30 s); the check waits for the scheduler's figures to settle, bounded.
        state = {}

        version = self.volcano_version()
        name = CARD_METRIC if version is None or version >= CARD_METRIC_FIXED else POD_METRIC

        def settled():
            metric = metric_values(self.scheduler_metrics(), name)
            live = [p.to_dict() for p in self.core.list_pod_for_all_namespaces().items
                    if p.status.phase in ("Pending", "Running") and p.spec.node_name]
            for pod in live:  # to_dict() is snake_case; the comparison reads the API's field names
                pod["spec"]["nodeName"] = pod["spec"]["node_name"]
            state["problems"], state["cards"] = compare_allocated_memory(metric, live, self.smoke_pods)
            return not state["problems"]
        started = time.time()
        done, dummy = self.wait(settled, self.params["metrics_settle_seconds"], interval=2)
        if not done:
            return "failed", "; ".join(state["problems"])
        cards = state["cards"]
        detail = "%s matches the smoke pods' requests on %d cards (after %.0f s)" % (name, cards, time.time() - started)
        if name == POD_METRIC:
            detail += " (Volcano %s over-counts %s, fixed in 1.15: the per-pod metric is compared)" % (
                ".".join(map(str, version)), CARD_METRIC)
        if not self.real_gpus:
            return "passed", detail + " (simulated GPU nodes: the plugin monitor's :9394 series not checked)"
        missing = []
        for pod in self.core.list_namespaced_pod(self.params["plugin_namespace"],
                                                 label_selector="gpufleet.io/component=device-plugin").items:
            body = self.core.connect_get_namespaced_pod_proxy_with_path(
                "%s:%d" % (pod.metadata.name, self.params["plugin_metrics_port"]), pod.metadata.namespace, "metrics")
            if "HostGPUMemoryUsage" not in body:
                missing.append(pod.spec.node_name)
        if missing:
            return "failed", detail + "; the plugin monitor has no HostGPUMemoryUsage on %s" % ", ".join(missing)
        return "passed", detail + "; the plugin monitor's :%d series are present" % self.params["plugin_metrics_port"]

    def volcano_version(self):
        """Version of the scheduler's image tag, or None."""
        for deploy in self.apps.list_namespaced_deployment(self.params["scheduler_namespace"],
                                                           label_selector="app=volcano-scheduler").items:
            return vgpu.image_version(deploy.spec.template.spec.containers[0].image)
        return None

    def scheduler_metrics(self):
        if self.params["scheduler_metrics_url"]:
            with open_url(self.params["scheduler_metrics_url"], timeout=30) as response:
                return response.read().decode()
        # Through the apiserver's service proxy: no port-forward, no NodePort needed.
        return self.core.connect_get_namespaced_service_proxy_with_path(
            "%s:%d" % (self.params["scheduler_service"], self.params["scheduler_metrics_port"]),
            self.params["scheduler_namespace"], "metrics")

    def check_memory_limit(self):
        if not self.real_gpus:
            return "skipped", "needs real GPUs: the GPU nodes are simulated (no CUDA to allocate memory with)"
        units = self.params["vgpu_memory"]
        limit_mib = units * self.params["memory_factor"]
        outcome = {}
        for name, mib in (("alloc-under", limit_mib // 2), ("alloc-over", limit_mib + limit_mib // 2)):
            spec = self.pod_spec(units)
            spec["restartPolicy"] = "Never"
            spec["containers"][0].update(image=self.params["alloc_image"], command=list(self.params["alloc_command"]),
                                         env=[{"name": "ALLOC_MIB", "value": str(mib)}])
            self.create_pod(name, units, spec=spec)
        for name in ("alloc-under", "alloc-over"):
            done, phase = self.wait(lambda n=name: self.core.read_namespaced_pod(n, self.namespace).status.phase
                                    in ("Succeeded", "Failed"), self.params["timeout"])
            pod = self.core.read_namespaced_pod(name, self.namespace)
            log = self.core.read_namespaced_pod_log(name, self.namespace) if done else ""
            outcome[name] = (pod.status.phase, log)
        under, over = outcome["alloc-under"], outcome["alloc-over"]
        oom = any(word in over[1].lower() for word in ("out of memory", "oom"))
        if under[0] == "Succeeded" and over[0] == "Failed" and oom:
            return "passed", "%d MiB allocated under the %d MiB limit; %d MiB failed with OOM" % (
                limit_mib // 2, limit_mib, limit_mib + limit_mib // 2)
        return "failed", "under the limit: %s; over the limit: %s (OOM in log: %s)" % (under[0], over[0], oom)

    def check_gang(self):
        size = self.params["gang_size"]
        free = self.free_vgpus()
        if free < size:
            return "skipped", "only %d free vGPUs, the gang needs %d" % (free, size)
        holders = free - (size - 1)
        # The holder's pods name their PodGroup from the start (Volcano 1.10's cache otherwise can keep a vGPU of a
        # pod it saw before the controller annotated it).
        self.objects.create_namespaced_custom_object("scheduling.volcano.sh", "v1beta1", self.namespace, "podgroups", {
            "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "metadata": {"name": "holder"},
            "spec": {"minMember": 1, "queue": self.params["queue"]}})
        template = {"metadata": {"labels": {"gpufleet.io/smoke": "holder"},
                                 "annotations": {"scheduling.k8s.io/group-name": "holder"}},
                    "spec": self.pod_spec(self.params["fill_memory"])}
        self.apps.create_namespaced_deployment(self.namespace, {
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "holder"},
            "spec": {"replicas": holders, "selector": {"matchLabels": {"gpufleet.io/smoke": "holder"}},
                     "template": template}})
        done, running = self.wait(lambda: [p.status.phase for p in self.pods("gpufleet.io/smoke=holder")].count(
            "Running") == holders or len(self.pods("gpufleet.io/smoke=holder")), self.params["timeout"])
        if not done:
            return "failed", "the holder's %d pods did not run (%s)" % (holders, running)
        self.smoke_pods.update(p.metadata.name for p in self.pods("gpufleet.io/smoke=holder"))
        job_template = {"metadata": {"labels": {"gpufleet.io/smoke": "gang"}}, "spec": self.pod_spec(
            self.params["fill_memory"], scheduler=False)}
        self.objects.create_namespaced_custom_object("batch.volcano.sh", "v1alpha1", self.namespace, "jobs", {
            "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "gang"},
            "spec": {"minAvailable": size, "schedulerName": self.params["scheduler_name"], "queue": self.params["queue"],
                     "tasks": [{"name": "worker", "replicas": size, "template": job_template}]}})
        done, created = self.wait(lambda: len(self.pods("volcano.sh/job-name=gang")) == size
                                  or len(self.pods("volcano.sh/job-name=gang")), 60)
        if not done:
            return "failed", "the Volcano Job created %s of %d pods" % (created, size)
        time.sleep(self.params["gang_hold_seconds"])
        bound = [p.metadata.name for p in self.pods("volcano.sh/job-name=gang") if p.spec.node_name]
        if bound:
            return "failed", "with %d vGPUs free the gang of %d bound %s: not all-or-nothing" % (
                size - 1, size, ", ".join(sorted(bound)))
        # Volcano before 1.15 refuses a gang that fits exactly: while it tries the gang, each member's vGPU is taken
        # twice on the node's device state (deviceshare's allocation, then the predicates plugin's allocate event;
        # vc-scheduler.log: "AllocateToPod failed not enough gpu fitted"), seen in 1.10. There the holder frees all
        # its vGPUs; from 1.15 (the version gpufleet deploys) exactly one, as in the article.
        version = self.volcano_version()
        keep = holders - 1 if version is None or version >= GANG_EXACT_FIT_FIXED else 0
        self.apps.patch_namespaced_deployment_scale("holder", self.namespace, {"spec": {"replicas": keep}})
        started = time.time()
        done, phases = self.wait(lambda: [p.status.phase for p in self.pods("volcano.sh/job-name=gang")].count(
            "Running") == size or [p.status.phase for p in self.pods("volcano.sh/job-name=gang")],
            self.params["timeout"])
        if not done:
            return "failed", "after the holder freed a vGPU the gang did not run within %d s (%s; %s)" % (
                self.params["timeout"], phases, self.podgroup_status())
        self.smoke_pods.update(p.metadata.name for p in self.pods("volcano.sh/job-name=gang"))
        return "passed", "no pod bound while %d of %d vGPUs were free for %d s; all %d ran %.0f s after %s" % (
            size - 1, size, self.params["gang_hold_seconds"], size, time.time() - started,
            "one more was freed" if keep else "the holder freed its %d (Volcano < 1.15 refuses exact fits)" % holders)

    def podgroup_status(self):
        """Phase and last condition of the namespace's PodGroups: why Volcano holds a job."""
        groups = self.objects.list_namespaced_custom_object("scheduling.volcano.sh", "v1beta1", self.namespace,
                                                            "podgroups")["items"]
        return ", ".join("PodGroup %s %s: %s" % (
            g["metadata"]["name"], g.get("status", {}).get("phase"),
            ([c.get("message") or c.get("reason") for c in g.get("status", {}).get("conditions") or []] or [""])[-1])
            for g in groups)

    # --- the run ---

    def run(self):
        nodes = self.gpu_nodes()
        self.real_gpus = self.params["real_gpus"]
        if self.real_gpus is None:
            self.real_gpus = bool(nodes) and not any(KWOK in (n.metadata.annotations or {}) for n in nodes)
        results = []
        self.core.create_namespace({"metadata": {"name": self.namespace, "labels": {"gpufleet.io/smoke": "true"}}})
        try:
            if not nodes:
                return [{"check": name, "status": "failed", "detail": "no node registers volcano.sh/vgpu-number",
                         "seconds": 0} for name in self.params["checks"]]
            for name in CHECKS:
                if name not in self.params["checks"]:
                    continue
                started = time.time()
                try:
                    status, detail = getattr(self, "check_" + name)()
                except Exception as exc:  # pylint: disable=broad-except  # a failed check, reported, not a crash
                    status, detail = "failed", describe(exc)
                results.append({"check": name, "status": status, "detail": detail,
                                "seconds": round(time.time() - started, 1)})
                if name == "metrics" or (name == "fill" and "metrics" not in self.params["checks"]):
                    self.delete_pods("gpufleet.io/smoke in (fill, fill-extra)")
        finally:
            results.append(self.cleanup())
        return results

    def cleanup(self):
        started = time.time()
        try:
            self.core.delete_namespace(self.namespace, propagation_policy="Foreground")
        except client.exceptions.ApiException as exc:
            if exc.status != 404:
                return {"check": "cleanup", "status": "failed", "detail": str(exc), "seconds": 0}

        def gone():
            try:
                self.core.read_namespace(self.namespace)
                return False
            except client.exceptions.ApiException as exc:
                return exc.status == 404
        done, dummy = self.wait(gone, self.params["timeout"], interval=2)
        return {"check": "cleanup", "status": "passed" if done else "failed",
                "detail": "namespace %s %s" % (self.namespace, "removed" if done else "still terminating"),
                "seconds": round(time.time() - started, 1)}


def markdown(results, namespace):
    symbols = {"passed": "passed", "failed": "**FAILED**", "skipped": "skipped"}
    lines = ["## Smoke tests", "", "Namespace `%s` (removed at the end)." % namespace, "",
             "| check | result | seconds | detail |", "|---|---|---:|---|"]
    for result in results:
        lines.append("| %s | %s | %s | %s |" % (result["check"], symbols.get(result["status"], result["status"]),
                                                result["seconds"], result["detail"].replace("|", "\\|")))
    return "\n".join(lines) + "\n"
