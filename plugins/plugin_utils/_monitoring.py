# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the monitoring role ships (controller only): scrape jobs, alert rules and the Grafana dashboard.

Every series comes from a component gpufleet deploys, read in its code:

- vc-scheduler :8080 (Volcano 1.15.1): `volcano_vgpu_device_*{devID, NodeName}`
  (pkg/scheduler/api/devices/nvidia/vgpu/metrics.go), `volcano_unschedule_task_count{job_id}` set by the gang plugin
  at every session close for each job not yet ready (pkg/scheduler/plugins/gang/gang.go; 0 once ready, deleted with
  the job), `volcano_e2e_*` latencies (pkg/scheduler/metrics/metrics.go).
- vc-controller-manager :8081: `volcano_queue_pod_group_<phase>_count{queue_name}` (pkg/controllers/metrics/queue.go).
- the plugin's monitor container :9394 (v1.12.0 cmd/vgpu-monitor/metrics.go): `HostGPUMemoryUsage` and
  `HostCoreUtilization` per GPU NVML sees on the node.
- each GPU node's node_exporter (the site's own), from the textfile gpu_verify's health timer writes:
  `gpufleet_gpu_*{node}` (plugins/module_utils/_gpu_health.py, whose METRICS name them all).

Volcano names a pending pod's job only by its PodGroup: the podgroup controller names the group of a bare pod
`podgroup-<pod uid>`, so that prefix tells single pods from gangs (Volcano Jobs, Kubeflow jobs, hand-made groups). No
Volcano series says which resources a pending pod asks for; the pending alerts cover every pod Volcano schedules.

One job name per component is used by the three ways of scraping (a plain scrape config, ServiceMonitor/PodMonitor,
and the lab's Prometheus), so the rules and the dashboard read the same labels whichever a site uses; a plugin
monitor's series carry the Kubernetes node name as `node`.
"""

from __future__ import annotations

import json
import re

MANAGED_BY = {"app.kubernetes.io/managed-by": "gpufleet.vgpu.monitoring"}
# The podgroup controller's name for the group of a pod that names none (pkg/controllers/podgroup).
BARE_POD_GROUP = "podgroup-.+"
# Recording rule: one series per GPU node of the inventory, valued with the GPUs it should have.
EXPECTED = "gpufleet:gpu_node_expected_gpus"
RULE_GROUP = "gpufleet-vgpu"


# Prometheus' duration syntax (model.ParseDuration): units largest first, each at most once, not empty.
DURATION = re.compile(r"^(\d+y)?(\d+w)?(\d+d)?(\d+h)?(\d+m)?(\d+s)?(\d+ms)?$")
THRESHOLDS = ("down", "pending", "gang", "gpu_missing", "gpu_unhealthy")


def seconds(duration):
    """Seconds of a Prometheus duration (DURATION-checked), for expressions that compare ages."""
    units = {"y": 365 * 86400, "w": 7 * 86400, "d": 86400, "h": 3600, "m": 60, "s": 1, "ms": 0.001}
    total = 0
    for number, unit in re.findall(r"(\d+)(ms|[ywdhms])", duration):
        total += int(number) * units[unit]
    return int(total) if total == int(total) else total


def problems(s):
    """Messages naming the role variable, its value and what is allowed; [] when the settings are usable."""
    found = []
    for key in THRESHOLDS:
        value = s["thresholds"].get(key)
        if not isinstance(value, str) or not value or not DURATION.match(value):
            found.append("monitoring_alert_for.%s: %r is not a Prometheus duration (such as 90s, 5m, 1h30m)"
                         % (key, value))
    unknown = sorted(set(s["thresholds"]) - set(THRESHOLDS))
    if unknown:
        found.append("monitoring_alert_for: unknown key(s) %s; allowed: %s" % (", ".join(map(str, unknown)),
                                                                               ", ".join(THRESHOLDS)))
    for key in ("scrape_interval", "rule_interval", "gpu_health_max_age"):
        if not isinstance(s[key], str) or not s[key] or not DURATION.match(s[key]) or not seconds(s[key]):
            found.append("monitoring_%s: %r is not a Prometheus duration above zero (such as 30s, 1m)"
                         % (key, s[key]))
    for node, count in sorted(s["gpu_nodes"].items()):
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            found.append("monitoring_gpu_nodes.%s: %r is not a GPU count (an integer >= 1)" % (node, count))
    return found


def _sel(job, extra=""):
    return '{job="%s"%s}' % (job, extra)


def scrape_configs(s):
    """Prometheus scrape_configs entries (kubernetes_sd) for a Prometheus without the Operator."""
    def service(job, namespace, name):
        return {"job_name": job,
                "kubernetes_sd_configs": [{"role": "endpoints", "namespaces": {"names": [namespace]}}],
                "relabel_configs": [
                    {"source_labels": ["__meta_kubernetes_service_name", "__meta_kubernetes_endpoint_port_name"],
                     "regex": "%s;metrics" % name, "action": "keep"},
                    {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"}]}
    label = "__meta_kubernetes_pod_label_" + "".join(c if c.isalnum() else "_" for c in s["plugin_pod_label"][0])
    return [
        service(s["scheduler_job"], s["volcano_namespace"], s["scheduler_service"]),
        service(s["controllers_job"], s["volcano_namespace"], s["controllers_service"]),
        {"job_name": s["monitor_job"],
         "kubernetes_sd_configs": [{"role": "pod", "namespaces": {"names": [s["plugin_namespace"]]}}],
         "relabel_configs": [
             {"source_labels": [label, "__meta_kubernetes_pod_container_port_name"],
              "regex": "%s;metrics" % s["plugin_pod_label"][1], "action": "keep"},
             {"source_labels": ["__meta_kubernetes_pod_node_name"], "target_label": "node"},
             {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"}]},
    ]


def operator_monitors(s, labels):
    """ServiceMonitors (scheduler, controllers) and a PodMonitor (plugin monitor) with the same job names."""
    meta_labels = dict(MANAGED_BY, **labels)

    def job(name):
        return {"targetLabel": "job", "replacement": name}

    def service_monitor(name, job_name, app):
        return {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
                "metadata": {"name": name, "namespace": s["volcano_namespace"], "labels": meta_labels},
                "spec": {"selector": {"matchLabels": {"app": app}},
                         "namespaceSelector": {"matchNames": [s["volcano_namespace"]]},
                         "endpoints": [{"port": "metrics", "interval": s["scrape_interval"],
                                        "relabelings": [job(job_name)]}]}}
    return [
        service_monitor("gpufleet-volcano-scheduler", s["scheduler_job"], "volcano-scheduler"),
        service_monitor("gpufleet-volcano-controllers", s["controllers_job"], "volcano-controller"),
        {"apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor",
         "metadata": {"name": "gpufleet-vgpu-monitor", "namespace": s["plugin_namespace"], "labels": meta_labels},
         "spec": {"selector": {"matchLabels": {s["plugin_pod_label"][0]: s["plugin_pod_label"][1]}},
                  "namespaceSelector": {"matchNames": [s["plugin_namespace"]]},
                  "podMetricsEndpoints": [{"port": "metrics", "interval": s["scrape_interval"], "relabelings": [
                      job(s["monitor_job"]),
                      {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"}]}]}},
    ]


def expected_series(gpu_nodes):
    """PromQL: one series per node {node=...} valued with its expected GPU count (the inventory as a vector)."""
    return " or ".join('label_replace(vector(%d), "node", "%s", "", "")' % (count, node)
                       for node, count in sorted(gpu_nodes.items()))


def alerts(s):
    """[(name, expr, for, severity, summary, description)] - the one list rules() and the tests read."""
    sched, mon = s["scheduler_job"], s["monitor_job"]
    t = s["thresholds"]
    found = [
        ("GpufleetVolcanoSchedulerDown", "up%s == 0 or absent(up%s)" % (_sel(sched), _sel(sched)), t["down"],
         "critical", "The Volcano scheduler does not answer",
         "No vGPU pod or gang is placed while vc-scheduler is down (job %s)." % sched),
        ("GpufleetVolcanoJobPending",
         'volcano_unschedule_task_count%s > 0' % _sel(sched, ', job_id=~"%s"' % BARE_POD_GROUP), t["pending"],
         "warning", "A pod waits for Volcano",
         "Pod group {{ $labels.job_id }} has had {{ $value }} unschedulable pod for %s; its events name what it "
         "lacks (vGPUs, vGPU memory, cores)." % t["pending"]),
        ("GpufleetGangWaiting",
         'volcano_unschedule_task_count%s > 0' % _sel(sched, ', job_id!~"%s"' % BARE_POD_GROUP), t["gang"],
         "warning", "A gang waits for enough free resources",
         "Pod group {{ $labels.job_id }} has waited %s with {{ $value }} of its minimum members unschedulable; "
         "none of its pods holds a GPU meanwhile." % t["gang"]),
    ]
    if s["gpu_nodes"]:
        found += [
            ("GpufleetVGPUPluginDown", "%s unless on(node) (up%s == 1)" % (EXPECTED, _sel(mon)), t["down"],
             "critical", "A GPU node's vGPU plugin does not answer",
             "The vGPU plugin's monitor on node {{ $labels.node }} is down or gone: its vGPUs are not registered "
             "or not watched (job %s)." % mon),
            ("GpufleetGPUMissing",
             # A node whose monitor answers but reports no GPU at all counts 0, not nothing; a node whose monitor
             # is down is GpufleetVGPUPluginDown's.
             "(%s > on(node) (count by (node) (HostGPUMemoryUsage%s) or %s * 0)) and on(node) (up%s == 1)"
             % (EXPECTED, _sel(mon), EXPECTED, _sel(mon)), t["gpu_missing"],
             "critical", "A GPU node sees fewer GPUs than the inventory says",
             "Node {{ $labels.node }} should have {{ $value }} GPUs; NVML on it reports fewer (a GPU fallen off "
             "the bus, or lost to an Xid). Its vGPUs are gone with it."),
        ]
    if s["gpu_health"]:
        found += health_alerts(s)
    return found


def health_alerts(s):
    """The alerts on gpu_verify's health timer (series of _gpu_health.METRICS, through node_exporter)."""
    t, age = s["thresholds"], seconds(s["gpu_health_max_age"])
    journal = "'journalctl -u gpufleet-gpu-health' on the node names each finding and its next step"
    stale = "time() - max by (node) (gpufleet_gpu_check_timestamp_seconds) > %s" % age
    if s["gpu_nodes"]:
        # A GPU node of the inventory whose check never reached Prometheus (timer off, node_exporter not reading
        # the textfile directory, or not scraped) counts as stale too.
        stale = "(%s) or (%s unless on(node) gpufleet_gpu_check_timestamp_seconds)" % (stale, EXPECTED)
    return [
        ("GpufleetGPUUnhealthy", "gpufleet_gpu_healthy == 0", t["gpu_unhealthy"], "critical",
         "A GPU failed its health check",
         "GPU {{ $labels.gpu }} ({{ $labels.pci_bus_id }}) on node {{ $labels.node }} failed gpu_verify's check: "
         "unreachable (fallen off the bus, Xid), retired pages or a row remapping pending, or uncorrectable ECC "
         "errors; %s." % journal),
        ("GpufleetGPUNodeUnhealthy",
         # The node's verdict failed with no GPU to blame: NVML down, fewer GPUs than expected, the wrong driver.
         "gpufleet_gpu_node_healthy == 0 unless on(node) (gpufleet_gpu_healthy == 0)", t["gpu_unhealthy"],
         "critical", "A GPU node failed its health check",
         "Node {{ $labels.node }} failed gpu_verify's check (NVML unavailable, fewer GPUs than the inventory "
         "says, or not the driver it installs); %s." % journal),
        ("GpufleetGPUXid",
         # The catalog's actions after which the card is not fit for work; the series lasts the boot.
         'gpufleet_gpu_xid_events{action=~"reset_gpu|reboot"} > 0', t["gpu_unhealthy"], "critical",
         "The NVIDIA driver logged an Xid that calls for a GPU reset or a reboot",
         "GPU {{ $labels.gpu }} ({{ $labels.pci_bus_id }}) on node {{ $labels.node }} logged Xid {{ $labels.code }} "
         "{{ $value }} time(s) this boot; NVIDIA's Xid catalog calls for: {{ $labels.action }}. Drain the node, then "
         "reset the GPU or reboot it (a reboot clears the alert); %s." % journal),
        ("GpufleetGPUHealthCheckStale", stale, t["down"], "warning",
         "A GPU node's health check is not reporting",
         "No GPU health check from node {{ $labels.node }} for over %s: the gpufleet-gpu-health timer is stopped "
         "or failing, or node_exporter does not read its textfile directory." % s["gpu_health_max_age"]),
    ]


def rules(s):
    """The rules file (groups), as Prometheus and a PrometheusRule's spec read it."""
    entries = []
    if s["gpu_nodes"]:
        entries.append({"record": EXPECTED, "expr": expected_series(s["gpu_nodes"])})
    for name, expr, wait, severity, summary, description in alerts(s):
        entries.append({"alert": name, "expr": expr, "for": wait,
                        "labels": dict({"severity": severity}, **s["alert_labels"]),
                        "annotations": {"summary": summary, "description": description}})
    return {"groups": [{"name": RULE_GROUP, "interval": s["rule_interval"], "rules": entries}]}


def prometheus_rule(s, labels):
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
            "metadata": {"name": "gpufleet-vgpu", "namespace": s["volcano_namespace"],
                         "labels": dict(MANAGED_BY, **labels)},
            "spec": rules(s)}


def panels(s):
    """[(title, kind, expr, legend, unit)] of the dashboard - also the queries the lab test evaluates."""
    sched, ctl, mon = _sel(s["scheduler_job"]), _sel(s["controllers_job"]), _sel(s["monitor_job"])
    pending = _sel(s["scheduler_job"], ', job_id=~"%s"' % BARE_POD_GROUP)
    gangs = _sel(s["scheduler_job"], ', job_id!~"%s"' % BARE_POD_GROUP)
    return [
        ("Components up", "stat", 'up{job=~"%s|%s|%s"}' % (s["scheduler_job"], s["controllers_job"],
                                                           s["monitor_job"]),
         "{{job}} {{node}}", "none"),
        ("vGPUs in use per node", "timeseries", "sum by (NodeName) (volcano_vgpu_device_shared_number%s)" % sched,
         "{{NodeName}}", "none"),
        ("vGPU memory allocated per node", "timeseries",
         "sum by (NodeName) (volcano_vgpu_device_allocated_memory%s) / sum by (NodeName) "
         "(volcano_vgpu_device_memory_limit%s)" % (sched, sched), "{{NodeName}}", "percentunit"),
        ("vGPU memory allocated per GPU (units)", "table",
         "volcano_vgpu_device_allocated_memory%s" % sched, "{{NodeName}} {{devID}}", "none"),
        ("vGPU memory per GPU (units)", "table", "volcano_vgpu_device_memory_limit%s" % sched,
         "{{NodeName}} {{devID}}", "none"),
        ("GPU cores allocated per GPU", "timeseries", "volcano_vgpu_device_allocated_cores%s" % sched,
         "{{NodeName}} {{devID}}", "percent"),
        ("GPU memory used per GPU (NVML)", "timeseries", "HostGPUMemoryUsage%s" % mon, "{{node}} {{deviceuuid}}",
         "bytes"),
        ("Pods waiting for Volcano", "stat", "sum(volcano_unschedule_task_count%s) or vector(0)" % pending,
         "pods", "none"),
        ("Gangs waiting", "stat", "count(volcano_unschedule_task_count%s > 0) or vector(0)" % gangs, "gangs",
         "none"),
        ("PodGroups by phase", "timeseries",
         'sum by (__name__) ({__name__=~"volcano_queue_pod_group_(inqueue|pending|running|unknown)_count", '
         'job="%s"})' % s["controllers_job"], "{{__name__}}", "none"),
        ("Job scheduling duration", "table", "volcano_e2e_job_scheduling_duration%s" % sched,
         "{{job_namespace}}/{{job_name}}", "ms"),
        ("Scheduling cycle latency p99", "timeseries",
         "histogram_quantile(0.99, sum by (le) (rate(volcano_e2e_scheduling_latency_milliseconds_bucket%s[5m])))"
         % sched, "p99", "ms"),
    ] + (health_panels() if s["gpu_health"] else [])


def health_panels():
    return [
        ("GPU health per GPU (1 = passed)", "table", "gpufleet_gpu_healthy", "{{node}} GPU {{gpu}} {{pci_bus_id}}",
         "none"),
        ("GPU health findings per node", "table", "gpufleet_gpu_findings", "{{node}} {{severity}}", "none"),
        ("Age of the last GPU health check", "stat", "time() - gpufleet_gpu_check_timestamp_seconds", "{{node}}",
         "s"),
        ("PCIe link width per GPU", "table", "gpufleet_gpu_pcie_link_width", "{{node}} GPU {{gpu}}", "none"),
    ]


def dashboard(s):
    """Grafana dashboard JSON model (schema 39) reading the Prometheus data source chosen in its variable."""
    source = {"type": "prometheus", "uid": "${datasource}"}
    found = []
    for index, (title, kind, expr, legend, unit) in enumerate(panels(s)):
        panel = {"id": index + 1, "title": title, "type": kind, "datasource": source,
                 "gridPos": {"h": 8, "w": 12, "x": 12 * (index % 2), "y": 8 * (index // 2)},
                 "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                 "targets": [{"refId": "A", "datasource": source, "expr": expr, "legendFormat": legend,
                              "instant": kind in ("stat", "table")}]}
        found.append(panel)
    return {"uid": s["dashboard_uid"], "title": s["dashboard_title"], "schemaVersion": 39, "version": 1,
            "editable": True, "time": {"from": "now-6h", "to": "now"}, "refresh": "30s",
            "tags": ["gpufleet", "vgpu", "volcano"], "panels": found,
            "templating": {"list": [{"name": "datasource", "label": "Prometheus", "type": "datasource",
                                     "query": "prometheus", "current": {}, "hide": 0}]}}


def dashboard_configmap(s, labels):
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "gpufleet-vgpu-dashboard", "namespace": s["dashboard_namespace"],
                         "labels": dict(MANAGED_BY, **labels)},
            "data": {"gpufleet-vgpu.json": json.dumps(dashboard(s), indent=1, sort_keys=True)}}


def bundle(settings, labels=None, dashboard_labels=None):
    """Everything the monitoring role renders: {errors} alone when a setting is invalid."""
    errors = problems(settings)
    if errors:
        return {"errors": errors}
    return {"errors": [], "scrape_configs": scrape_configs(settings),
            "rules": rules(settings), "dashboard": dashboard(settings),
            "operator": operator_monitors(settings, labels or {})
            + [prometheus_rule(settings, labels or {})],
            "dashboard_configmap": dashboard_configmap(settings, dashboard_labels or {}),
            "alerts": [alert[0] for alert in alerts(settings)],
            "queries": [panel[2] for panel in panels(settings)]}
