"""The monitoring role's scrape jobs, rules and dashboard (promtool checks them in test__monitoring_promtool.py, the
lab's Prometheus evaluates them in tests/lab/test_monitoring.py)."""

import copy
import json

import pytest

from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _monitoring

SETTINGS = {
    "scheduler_job": "gpufleet-volcano-scheduler", "controllers_job": "gpufleet-volcano-controllers",
    "monitor_job": "gpufleet-vgpu-monitor", "volcano_namespace": "volcano-system",
    "scheduler_service": "volcano-scheduler-service", "controllers_service": "volcano-controllers-service",
    "plugin_namespace": "kube-system", "plugin_pod_label": ["gpufleet.io/component", "device-plugin"],
    "dashboard_namespace": "volcano-system", "dashboard_uid": "gpufleet-vgpu", "dashboard_title": "gpufleet",
    "scrape_interval": "30s", "rule_interval": "30s",
    "thresholds": {"down": "5m", "pending": "15m", "gang": "15m", "gpu_missing": "2m", "gpu_unhealthy": "1m"},
    "alert_labels": {}, "gpu_nodes": {"rig01": 5, "rig02": 5}, "gpu_health": True, "gpu_health_max_age": "10m",
}


def settings(**changes):
    found = copy.deepcopy(SETTINGS)
    for key, value in changes.items():
        if key in found["thresholds"] or key.startswith("threshold_"):
            found["thresholds"][key.replace("threshold_", "")] = value
        else:
            found[key] = value
    return found


@pytest.mark.parametrize("changes, message", [
    ({"threshold_down": "5 minutes"}, "monitoring_alert_for.down: '5 minutes' is not a Prometheus duration"),
    ({"threshold_pending": 15}, "monitoring_alert_for.pending: 15 is not a Prometheus duration"),
    ({"threshold_gang": "m5"}, "monitoring_alert_for.gang: 'm5'"),
    ({"threshold_gang": ""}, "monitoring_alert_for.gang: ''"),
    ({"threshold_wait": "5m"}, "monitoring_alert_for: unknown key(s) wait; allowed: down, pending, gang, gpu_missing, gpu_unhealthy"),
    ({"rule_interval": "30"}, "monitoring_rule_interval: '30' is not a Prometheus duration"),
    ({"gpu_health_max_age": "0s"}, "monitoring_gpu_health_max_age: '0s' is not a Prometheus duration above zero"),
    ({"threshold_gpu_unhealthy": "1 min"}, "monitoring_alert_for.gpu_unhealthy: '1 min'"),
    ({"gpu_nodes": {"rig01": 0}}, "monitoring_gpu_nodes.rig01: 0 is not a GPU count"),
    ({"gpu_nodes": {"rig01": "five"}}, "monitoring_gpu_nodes.rig01: 'five' is not a GPU count"),
    ({"gpu_nodes": {"rig01": True}}, "monitoring_gpu_nodes.rig01: True is not a GPU count"),
])
def test_bad_settings_are_named(changes, message):
    found = _monitoring.problems(settings(**changes))
    assert any(message in problem for problem in found), found


@pytest.mark.parametrize("duration", ["90s", "5m", "1h30m", "1d", "500ms", "2w"])
def test_prometheus_durations_pass(duration):
    assert _monitoring.problems(settings(threshold_down=duration)) == []


def test_expected_series_is_one_series_per_node():
    assert _monitoring.expected_series({"rig02": 5, "rig01": 4}) == (
        'label_replace(vector(4), "node", "rig01", "", "") or label_replace(vector(5), "node", "rig02", "", "")')


def names_of(found):
    return [rule.get("alert") or rule.get("record") for rule in found["groups"][0]["rules"]]


def test_rules_without_gpu_nodes_leave_the_node_alerts_out():
    health = ["GpufleetGPUUnhealthy", "GpufleetGPUNodeUnhealthy", "GpufleetGPUXid", "GpufleetGPUHealthCheckStale"]
    assert names_of(_monitoring.rules(settings(gpu_nodes={}))) == [
        "GpufleetVolcanoSchedulerDown", "GpufleetVolcanoJobPending", "GpufleetGangWaiting"] + health
    assert names_of(_monitoring.rules(SETTINGS)) == [
        _monitoring.EXPECTED, "GpufleetVolcanoSchedulerDown", "GpufleetVolcanoJobPending", "GpufleetGangWaiting",
        "GpufleetVGPUPluginDown", "GpufleetGPUMissing"] + health
    # Without inventory a stale check is one that stopped; with it, also one that never reached Prometheus.
    stale = {a[0]: a[1] for a in _monitoring.alerts(settings(gpu_nodes={}))}["GpufleetGPUHealthCheckStale"]
    assert stale == "time() - max by (node) (gpufleet_gpu_check_timestamp_seconds) > 600"
    assert "unless on(node)" in {a[0]: a[1] for a in _monitoring.alerts(SETTINGS)}["GpufleetGPUHealthCheckStale"]


def test_health_alerts_and_panels_only_with_the_health_timer():
    off = settings(gpu_health=False)
    assert not [name for name in names_of(_monitoring.rules(off)) if "GPUUnhealthy" in name or "Health" in name]
    assert not [p for p in _monitoring.panels(off) if "gpufleet_gpu_" in p[2]]
    assert len([p for p in _monitoring.panels(SETTINGS) if "gpufleet_gpu_" in p[2]]) == 4


@pytest.mark.parametrize("duration, wanted", [("10m", 600), ("1h30m", 5400), ("90s", 90), ("1d", 86400),
                                              ("1500ms", 1.5), ("2w", 1209600)])
def test_seconds(duration, wanted):
    assert _monitoring.seconds(duration) == wanted


def test_rules_carry_thresholds_and_labels():
    group = _monitoring.rules(settings(threshold_gang="1h", alert_labels={"team": "ml"}))["groups"][0]
    assert group["name"] == "gpufleet-vgpu" and group["interval"] == "30s"
    by_name = {rule.get("alert") or rule["record"]: rule for rule in group["rules"]}
    assert by_name["GpufleetGangWaiting"]["for"] == "1h"
    assert by_name["GpufleetGangWaiting"]["labels"] == {"severity": "warning", "team": "ml"}
    assert "has waited 1h" in by_name["GpufleetGangWaiting"]["annotations"]["description"]
    assert by_name["GpufleetVGPUPluginDown"]["labels"]["severity"] == "critical"
    assert by_name[_monitoring.EXPECTED]["expr"].count("label_replace") == 2


def test_pending_pods_and_gangs_are_told_apart_by_the_podgroup_name():
    by_name = {a[0]: a[1] for a in _monitoring.alerts(SETTINGS)}
    assert 'job_id=~"podgroup-.+"' in by_name["GpufleetVolcanoJobPending"]
    assert 'job_id!~"podgroup-.+"' in by_name["GpufleetGangWaiting"]


def test_one_job_name_whichever_way_prometheus_scrapes():
    jobs = [c["job_name"] for c in _monitoring.scrape_configs(SETTINGS)]
    assert jobs == ["gpufleet-volcano-scheduler", "gpufleet-volcano-controllers", "gpufleet-vgpu-monitor"]
    monitor = _monitoring.scrape_configs(SETTINGS)[2]
    assert monitor["relabel_configs"][0] == {
        "source_labels": ["__meta_kubernetes_pod_label_gpufleet_io_component",
                          "__meta_kubernetes_pod_container_port_name"],
        "regex": "device-plugin;metrics", "action": "keep"}
    assert {"source_labels": ["__meta_kubernetes_pod_node_name"], "target_label": "node"} in monitor["relabel_configs"]
    resources = _monitoring.operator_monitors(SETTINGS, {"release": "kps"})
    assert [(r["kind"], r["metadata"]["namespace"]) for r in resources] == [
        ("ServiceMonitor", "volcano-system"), ("ServiceMonitor", "volcano-system"), ("PodMonitor", "kube-system")]
    jobs = [e["relabelings"][0]["replacement"] for r in resources
            for e in r["spec"].get("endpoints", []) + r["spec"].get("podMetricsEndpoints", [])]
    assert jobs == ["gpufleet-volcano-scheduler", "gpufleet-volcano-controllers", "gpufleet-vgpu-monitor"]
    assert all(r["metadata"]["labels"]["release"] == "kps" for r in resources)
    assert resources[2]["spec"]["selector"] == {"matchLabels": {"gpufleet.io/component": "device-plugin"}}


def test_dashboard_has_one_target_per_panel_and_a_datasource_variable():
    board = _monitoring.dashboard(SETTINGS)
    assert board["uid"] == "gpufleet-vgpu" and board["templating"]["list"][0]["type"] == "datasource"
    exprs = [panel["targets"][0]["expr"] for panel in board["panels"]]
    assert exprs == [panel[2] for panel in _monitoring.panels(SETTINGS)]
    assert len({panel["id"] for panel in board["panels"]}) == len(board["panels"])
    # No two panels on the same place of the grid.
    places = [(p["gridPos"]["x"], p["gridPos"]["y"]) for p in board["panels"]]
    assert len(set(places)) == len(places)
    configmap = _monitoring.dashboard_configmap(SETTINGS, {"grafana_dashboard": "1"})
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(configmap["data"]["gpufleet-vgpu.json"]) == board
