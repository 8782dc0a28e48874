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
from ansible_collections.gpufleet.vgpu.plugins.module_utils import _contract
from ansible_collections.gpufleet.vgpu.plugins.module_utils import _markdown
from ansible_collections.gpufleet.vgpu.plugins.module_utils import _vgpu_registration as reg

SMOKE = _contract.SMOKE_LABEL

try:
    from kubernetes import client
    from kubernetes.stream import stream
    HAS_KUBERNETES = True
except ImportError:  # pragma: no cover - vgpu_smoke fails first, with kubernetes.core's message
    HAS_KUBERNETES = False

try:
    from prometheus_client.parser import text_string_to_metric_families
    HAS_PROMETHEUS = True
except ImportError:  # pragma: no cover - vgpu_smoke fails first, with kubernetes.core's message
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


CARD_METRIC = "volcano_vgpu_device_allocated_memory"
MEMORY_LIMIT_ENV = "CUDA_DEVICE_MEMORY_LIMIT_0"


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


def fill_scope(free_by_node, max_pods):
    """The nodes the fill check fills: every node under test with a free vGPU, in name order, as long as their free
    vGPUs together stay within `max_pods` (one pod per vGPU; a fleet of 1000 nodes is not filled at once).

    free_by_node: {node: free vGPUs} of the nodes under test. Returns (nodes, pods, left out: [node])."""
    chosen, total, left_out = [], 0, []
    for name in sorted(free_by_node):
        free = free_by_node[name]
        if free < 1:
            continue
        if total + free > max_pods:
            left_out.append(name)
            continue
        chosen.append(name)
        total += free
    return chosen, total, left_out


def nodes_under_test(gpu_nodes, wanted):
    """(nodes under test, named ones that register no vGPUs) from the GPU nodes' names and the nodes asked for
    (empty: every GPU node)."""
    if not wanted:
        return sorted(gpu_nodes), []
    return sorted(set(gpu_nodes) & set(wanted)), sorted(set(wanted) - set(gpu_nodes))


def node_affinity(nodes):
    """Pod affinity that keeps a smoke pod on the nodes under test (None: anywhere)."""
    if not nodes:
        return None
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": sorted(nodes)}]}]}}}


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
        self.removed_leftovers = []
        # The fleet's capacity while the fill check held every free vGPU of the nodes under test (the picture of a
        # report drawn after the cleanup would always show an empty fleet); None when the fill did not pass.
        self.fill_capacity = None
        # The nodes under test (set by run()): every smoke pod is kept on them, and only their vGPUs count as free.
        self.scope = []
        # The vGPU memory unit and what a request without memory gets, from the plugin's device ConfigMap as the
        # device_plugin role wrote it (an explicit memory_factor wins).
        self.default_memory = ""
        try:
            configmap = self.core.read_namespaced_config_map(_contract.DEVICE_CONFIGMAP, params["plugin_namespace"])
            configmap = {"data": configmap.data, "metadata": {"annotations": configmap.metadata.annotations}}
        except client.exceptions.ApiException:
            configmap = None
        if params.get("memory_factor") is None:
            self.params = dict(params, memory_factor=_contract.memory_factor(configmap) or 1)
        self.default_memory = (((configmap or {}).get("metadata") or {}).get("annotations") or {}).get(
            _contract.DEFAULT_MEMORY, "")

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

    def pod_spec(self, memory_units, scheduler=True, nodes=None):
        limits = {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": str(memory_units)}
        spec = {"containers": [{"name": "cuda", "image": self.params["image"],
                                "command": list(self.params["command"]), "resources": {"limits": limits}}],
                "restartPolicy": "Always", "terminationGracePeriodSeconds": 0}
        if scheduler:
            spec["schedulerName"] = self.params["scheduler_name"]
        affinity = node_affinity(nodes or self.scope)
        if affinity:
            spec["affinity"] = affinity
        return spec

    def create_pod(self, name, memory_units, **kw):
        self.smoke_pods.add(name)
        self.core.create_namespaced_pod(self.namespace, {"metadata": {"name": name, "labels": kw.get("labels", {})},
                                                         "spec": kw.get("spec") or self.pod_spec(memory_units)})

    def pods(self, selector=None):
        return self.core.list_namespaced_pod(self.namespace, label_selector=selector).items

    def gpu_nodes(self):
        """The nodes under test that register vGPUs (all such nodes when no scope is set yet)."""
        nodes = [n for n in self.core.list_node().items
                 if int((n.status.allocatable or {}).get("volcano.sh/vgpu-number", "0") or 0) > 0
                 and (not self.scope or n.metadata.name in self.scope)]
        return nodes

    def free_by_node(self):
        """{node under test: allocatable vGPUs minus those held by live pods} (the scheduler's allocation
        annotations)."""
        free = {n.metadata.name: int(n.status.allocatable["volcano.sh/vgpu-number"]) for n in self.gpu_nodes()}
        for pod in self.core.list_pod_for_all_namespaces().items:
            if pod.status.phase in ("Pending", "Running") and pod.spec.node_name in free:
                free[pod.spec.node_name] -= len(
                    cap.parse_pod_devices((pod.metadata.annotations or {}).get(cap.POD_DEVICES)))
        return free

    def free_vgpus(self):
        return sum(self.free_by_node().values())

    def delete_pods(self, selector):
        for pod in self.pods(selector):
            self.core.delete_namespaced_pod(pod.metadata.name, self.namespace, grace_period_seconds=0)
        return self.wait(lambda: not self.pods(selector) or len(self.pods(selector)), self.params["timeout"])[0]

    # --- checks ---

    def check_vgpu_pod(self):
        memory = self.params["vgpu_memory"]
        self.create_pod("vgpu-case01", memory, labels={SMOKE: "case01"})
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
        nodes, free, left_out = fill_scope(self.free_by_node(), self.params["fill_max_pods"])
        if not nodes:
            if left_out:
                return "skipped", ("%s alone has more free vGPUs than fill_max_pods (%d); name fewer or smaller nodes "
                                   "under test, or raise the bound" % (left_out[0], self.params["fill_max_pods"]))
            return "skipped", "no free vGPU on the nodes under test"
        where = ", ".join(nodes)
        spec = self.pod_spec(self.params["fill_memory"], nodes=nodes)
        for index in range(free):
            self.create_pod("fill-%03d" % index, self.params["fill_memory"], spec=spec,
                            labels={SMOKE: "fill"})
        done, running = self.wait(lambda: [p.status.phase for p in self.pods(SMOKE + "=fill")].count(
            "Running") == free or [p.status.phase for p in self.pods(SMOKE + "=fill")].count("Running"),
            self.params["timeout"])
        if not done:
            return "failed", "%s of %d one-vGPU pods run on %s within %d s" % (
                running, free, where, self.params["timeout"])
        outside = sorted({p.spec.node_name for p in self.pods(SMOKE + "=fill")} - set(nodes))
        if outside:
            return "failed", "fill pods were bound outside %s: on %s" % (where, ", ".join(outside))
        self.create_pod("fill-extra", self.params["fill_memory"], spec=spec, labels={SMOKE: "fill-extra"})

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
            return "failed", "the pod beyond the %d free vGPUs of %s was bound" % (free, where)
        self.fill_capacity = self.capacity_now()
        detail = "%d one-vGPU pods run (all free vGPUs of %s); one more stays Pending, unschedulable" % (free, where)
        if left_out:
            detail += " (not filled, beyond fill_max_pods %d: %s)" % (self.params["fill_max_pods"], ", ".join(left_out))
        return "passed", detail

    def check_metrics(self):
        if not HAS_PROMETHEUS:
            return "failed", "prometheus-client is not installed on the host running the smoke test"
        if not self.pods(SMOKE):
            return "skipped", "no smoke pod holds a vGPU (fill did not run)"
        # The scheduler sets a card's figure when it builds the node's devices (only at a node update after its first
        # session: the plugin's next registration, _vgpu_registration.unseen_nodes) and at each allocation. So the
        # figure is due once every node holding smoke pods re-registered after the running scheduler started; it is
        # waited for on that signal, then compared, both within metrics_settle_seconds.
        state = {"read": None, "unregistered": []}
        deadline = time.time() + self.params["metrics_settle_seconds"]
        holders = {p.spec.node_name for p in self.pods(SMOKE) if p.spec.node_name}

        def registered():
            pods = self.scheduler_pods()
            nodes = {n.metadata.name: self.core.api_client.sanitize_for_serialization(n)
                     for n in self.core.list_node().items if n.metadata.name in holders}
            state["started"] = reg.scheduler_start_time(pods)
            state["unregistered"] = ["%s (last registration %s)" % (name, nodes[name]["metadata"]["annotations"][
                reg.HANDSHAKE]) for name in reg.unseen_nodes(list(nodes.values()), pods)]
            return not state["unregistered"]

        def settled():
            state["read"] = time.strftime("%H:%M:%SZ", time.gmtime())
            metric = metric_values(self.scheduler_metrics(), CARD_METRIC)
            live = [p.to_dict() for p in self.core.list_pod_for_all_namespaces().items
                    if p.status.phase in ("Pending", "Running") and p.spec.node_name]
            for pod in live:  # to_dict() is snake_case; the comparison reads the API's field names
                pod["spec"]["nodeName"] = pod["spec"]["node_name"]
            state["problems"], state["cards"] = compare_allocated_memory(metric, live, self.smoke_pods)
            return not state["problems"]
        started = time.time()
        if not self.wait(registered, max(deadline - time.time(), 1), interval=2)[0]:
            return "failed", ("%s is not due: the scheduler (started %s) has not seen the vGPUs of %s within %d s - "
                              "the plugin re-registers every 30 s" % (
                                  CARD_METRIC, state["started"].strftime("%H:%M:%SZ"),
                                  ", ".join(state["unregistered"]), self.params["metrics_settle_seconds"]))
        if not self.wait(settled, max(deadline - time.time(), 1), interval=2)[0]:
            return "failed", "%s read from %s at %s: %s" % (
                CARD_METRIC, self.params["scheduler_metrics_url"] or self.params["scheduler_service"], state["read"],
                "; ".join(state["problems"]))
        detail = "%s matches the smoke pods' requests on %d cards (after %.0f s)" % (
            CARD_METRIC, state["cards"], time.time() - started)
        missing, checked = self.monitor_series()
        if checked is None:
            return "passed", detail + " (the plugin monitor's :%d series not checked: %s)" % (
                self.params["plugin_metrics_port"], missing)
        if missing:
            return "failed", detail + "; the plugin monitor has no HostGPUMemoryUsage on %s" % ", ".join(missing)
        return "passed", detail + "; the plugin monitor's HostGPUMemoryUsage series are present on %s" % (
            ", ".join(checked))

    def monitor_series(self):
        """(nodes without HostGPUMemoryUsage, nodes checked), or (why not, None) when the monitor cannot be read."""
        urls = self.params["plugin_metrics_urls"] or {}
        nodes = sorted(n.metadata.name for n in self.gpu_nodes())
        missing, checked = [], []
        if urls:
            for node in nodes:
                if node not in urls:
                    missing.append("%s (no monitor URL)" % node)
                    continue
                with open_url(urls[node].rstrip("/") + "/metrics", timeout=30) as response:
                    body = response.read().decode()
                (checked if "HostGPUMemoryUsage" in body else missing).append(node)
            return missing, checked
        if not self.real_gpus:
            return "simulated GPU nodes without plugin_metrics_urls", None
        for pod in self.core.list_namespaced_pod(self.params["plugin_namespace"],
                                                 label_selector="%s=%s" % _contract.PLUGIN_POD_LABEL).items:
            if pod.spec.node_name not in nodes:
                continue
            body = self.core.connect_get_namespaced_pod_proxy_with_path(
                "%s:%d" % (pod.metadata.name, self.params["plugin_metrics_port"]), pod.metadata.namespace, "metrics")
            (checked if "HostGPUMemoryUsage" in body else missing).append(pod.spec.node_name)
        return missing, checked

    def scheduler_pods(self):
        """Volcano's scheduler pods, as the API writes them (reg.scheduler_start_time reads those)."""
        pods = self.core.list_namespaced_pod(self.params["scheduler_namespace"],
                                             label_selector="app=volcano-scheduler").items
        return [self.core.api_client.sanitize_for_serialization(p) for p in pods]

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
            return self.check_memory_limit_recorded()
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

    def check_memory_limit_recorded(self):
        """Simulated GPUs: what kubelet gave the container, as the cluster recorded it (the lab's device manager
        writes the device plugin's Allocate response on the pod), for one vGPU of each card type; the article's
        tensors are judged against that limit."""
        annotation = self.params["device_run_options_annotation"]
        if not annotation:
            return "skipped", ("needs real GPUs, or a simulated cluster that records the containers' device env "
                               "(device_run_options_annotation)")
        cards = {}
        for node in self.gpu_nodes():
            for card in cap.parse_register((node.metadata.annotations or {}).get(cap.REGISTER)):
                cards.setdefault(card["model"], (node.metadata.name, card["memory_units"] // card["split"]))
        names = {}
        for index, (model, (node, units)) in enumerate(sorted(cards.items())):
            spec = self.pod_spec(units)
            spec["nodeSelector"] = {"kubernetes.io/hostname": node}
            names[model] = "limit-%d" % index
            self.create_pod(names[model], units, spec=spec, labels={SMOKE: "limit"})

        def recorded():
            pods = {p.metadata.name: p for p in self.pods(SMOKE + "=limit")}
            have = [n for n, p in pods.items() if p.status.phase == "Running" and annotation in
                    (p.metadata.annotations or {})]
            return len(have) == len(names) or ["%s: %s" % (n, p.status.phase) for n, p in sorted(pods.items())]
        done, last = self.wait(recorded, self.params["timeout"])
        if not done:
            return "failed", "the one-vGPU pods did not run with a recorded allocation within %d s (%s)" % (
                self.params["timeout"], last)
        problems, lines = [], []
        factor, overhead = self.params["memory_factor"], self.params["cuda_context_mib"]
        for model, name in sorted(names.items()):
            node, units = cards[model]
            pod = self.core.read_namespaced_pod(name, self.namespace)
            recorded_options = json.loads(pod.metadata.annotations[annotation])
            envs = recorded_options.get(pod.spec.containers[0].name, {}).get("envs", {})
            limit = envs.get(MEMORY_LIMIT_ENV, "")
            want = units * factor
            if limit != "%dm" % want:
                problems.append("%s on %s: %s=%r, a vGPU of %d units is %d MiB" % (
                    model, node, MEMORY_LIMIT_ENV, limit, units, want))
                continue
            verdicts = ["%d MiB %s" % (mib, "fits" if mib + overhead <= want else "runs out of memory")
                        for mib in self.params["tensor_sizes_mib"]]
            lines.append("%s on %s: one vGPU = %d units, %s=%s; with %d MiB of CUDA context a tensor of %s" % (
                model, node, units, MEMORY_LIMIT_ENV, limit, overhead, ", ".join(verdicts)))
        self.delete_pods(SMOKE + "=limit")
        if problems:
            return "failed", "; ".join(problems)
        return "passed", "; ".join(lines) + " (simulated GPUs: the limit kubelet gave the container, no allocation)"

    def check_gang(self):
        size = self.params["gang_size"]
        free = self.free_vgpus()
        if free < size:
            return "skipped", "only %d free vGPUs, the gang needs %d" % (free, size)
        holders = free - (size - 1)
        # The holder's pods name their PodGroup from the start, as a Volcano Job's pods do.
        self.objects.create_namespaced_custom_object("scheduling.volcano.sh", "v1beta1", self.namespace, "podgroups", {
            "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "metadata": {"name": "holder"},
            "spec": {"minMember": 1, "queue": self.params["queue"]}})
        template = {"metadata": {"labels": {SMOKE: "holder"},
                                 "annotations": {"scheduling.k8s.io/group-name": "holder"}},
                    "spec": self.pod_spec(self.params["fill_memory"])}
        self.apps.create_namespaced_deployment(self.namespace, {
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "holder"},
            "spec": {"replicas": holders, "selector": {"matchLabels": {SMOKE: "holder"}},
                     "template": template}})
        done, running = self.wait(lambda: [p.status.phase for p in self.pods(SMOKE + "=holder")].count(
            "Running") == holders or len(self.pods(SMOKE + "=holder")), self.params["timeout"])
        if not done:
            return "failed", "the holder's %d pods did not run (%s)" % (holders, running)
        self.smoke_pods.update(p.metadata.name for p in self.pods(SMOKE + "=holder"))
        job_template = {"metadata": {"labels": {SMOKE: "gang"}}, "spec": self.pod_spec(
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
        # The article's step: the holder frees one vGPU, so the gang fits exactly.
        self.apps.patch_namespaced_deployment_scale("holder", self.namespace, {"spec": {"replicas": holders - 1}})
        started = time.time()
        done, phases = self.wait(lambda: [p.status.phase for p in self.pods("volcano.sh/job-name=gang")].count(
            "Running") == size or [p.status.phase for p in self.pods("volcano.sh/job-name=gang")],
            self.params["timeout"])
        if not done:
            return "failed", "after the holder freed a vGPU the gang did not run within %d s (%s; %s)" % (
                self.params["timeout"], phases, self.podgroup_status())
        self.smoke_pods.update(p.metadata.name for p in self.pods("volcano.sh/job-name=gang"))
        return "passed", ("no pod bound while %d of %d vGPUs were free for %d s; all %d ran %.0f s after the holder "
                          "freed one (it kept %d)" % (size - 1, size, self.params["gang_hold_seconds"], size,
                                                      time.time() - started, holders - 1))

    def podgroup_status(self):
        """Phase and last condition of the namespace's PodGroups: why Volcano holds a job."""
        groups = self.objects.list_namespaced_custom_object("scheduling.volcano.sh", "v1beta1", self.namespace,
                                                            "podgroups")["items"]
        return ", ".join("PodGroup %s %s: %s" % (
            g["metadata"]["name"], g.get("status", {}).get("phase"),
            ([c.get("message") or c.get("reason") for c in g.get("status", {}).get("conditions") or []] or [""])[-1])
            for g in groups)

    def capacity_now(self):
        """The capacity report (_capacity.full_report) of every node and running pod, as the cluster has them now."""
        serialize = self.core.api_client.sanitize_for_serialization
        nodes = [serialize(n) for n in self.core.list_node().items]
        pods = [serialize(p) for p in self.core.list_pod_for_all_namespaces(
            field_selector="status.phase=Running").items]
        return cap.full_report(nodes, pods, self.params["memory_factor"], self.default_memory)

    # --- the run ---

    def run(self):
        every = self.gpu_nodes()
        scope, missing = nodes_under_test([n.metadata.name for n in every], self.params["nodes"])
        if self.params["nodes"]:
            self.scope = scope
        nodes = [n for n in every if n.metadata.name in scope]
        self.real_gpus = self.params["real_gpus"]
        if self.real_gpus is None:
            self.real_gpus = bool(nodes) and not any(KWOK in (n.metadata.annotations or {}) for n in nodes)
        results = []
        self.removed_leftovers = self.remove_leftovers()
        self.core.create_namespace({"metadata": {"name": self.namespace, "labels": {SMOKE: "true"}}})
        try:
            if not nodes or missing:
                detail = ("nodes under test without volcano.sh/vgpu-number: %s" % ", ".join(missing) if missing
                          else "no node registers volcano.sh/vgpu-number")
                return [{"check": name, "status": "failed", "detail": detail, "seconds": 0}
                        for name in self.params["checks"]]
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
                    self.delete_pods(SMOKE + " in (fill, fill-extra)")
        finally:
            results.append(self.cleanup())
        return results

    def remove_leftovers(self):
        """Delete the namespaces of earlier smoke runs that did not clean up (killed): their pods would hold vGPUs
        that the fill check counts as free. Two smoke runs at once cannot both fill the cluster, so any other
        smoke namespace is a leftover. Returns their names, once they are gone (bounded by `timeout`)."""
        leftovers = [n.metadata.name for n in self.core.list_namespace(label_selector=SMOKE + "=true").items
                     if n.metadata.name != self.namespace]
        for name in leftovers:
            try:
                self.core.delete_namespace(name, propagation_policy="Foreground")
            except client.exceptions.ApiException as exc:
                if exc.status != 404:
                    raise

        def gone():
            remaining = {n.metadata.name for n in
                         self.core.list_namespace(label_selector=SMOKE + "=true").items}
            return not remaining & set(leftovers) or sorted(remaining & set(leftovers))
        done, last = self.wait(gone, self.params["timeout"], interval=1)
        if not done:
            raise RuntimeError("the namespaces of an earlier smoke run are still terminating after %d s: %s"
                               % (self.params["timeout"], ", ".join(last)))
        return leftovers

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
    rows = [(result["check"], symbols.get(result["status"], result["status"]), result["seconds"], result["detail"])
            for result in results]
    lines = ["## Smoke tests", "", "Namespace `%s` (removed at the end)." % namespace, ""]
    lines += _markdown.table(("check", "result", "seconds", "detail"), rows, right=(2,))
    return "\n".join(lines) + "\n"
