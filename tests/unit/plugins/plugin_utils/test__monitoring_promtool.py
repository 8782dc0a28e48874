"""promtool (Debian's prometheus package, tests/harness/prometheus.sh) checks the rules and the scrape config the
monitoring role writes, and runs the rules against series as vc-scheduler and the plugin monitor export them."""

import re
import subprocess

import pytest
import yaml

from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _monitoring

from test__monitoring import SETTINGS

from helpers import ROOT

SCHED = 'job="gpufleet-volcano-scheduler"'
MON = 'job="gpufleet-vgpu-monitor"'
# The site's own node_exporter job, whatever its name: the health series carry the node themselves.
NODE = 'job="node-exporter", instance="10.0.0.11:9100", node="rig01"'
GPU3 = NODE + ', gpu="3", uuid="GPU-7c1d", pci_bus_id="00000000:61:00.0"'


@pytest.fixture(scope="module")
def promtool():
    found = subprocess.run(["bash", str(ROOT / "tests" / "harness" / "prometheus.sh")], capture_output=True,
                           text=True, check=False)
    assert found.returncode == 0, found.stderr
    return found.stdout.strip() + "/promtool"


def run(promtool, *args, cwd=None):
    done = subprocess.run([promtool, *args], capture_output=True, text=True, check=False, cwd=cwd)
    return done.returncode, done.stdout + done.stderr


def write_rules(tmp_path):
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(_monitoring.rules(SETTINGS), sort_keys=False))
    return tmp_path / "rules.yml"


def test_rules_and_the_operator_resources_spec_pass_promtool_check(promtool, tmp_path):
    rc, out = run(promtool, "check", "rules", str(write_rules(tmp_path)))
    assert rc == 0 and "SUCCESS: 10 rules found" in out, out
    (tmp_path / "spec.yml").write_text(yaml.safe_dump(_monitoring.prometheus_rule(SETTINGS, {})["spec"]))
    rc, out = run(promtool, "check", "rules", str(tmp_path / "spec.yml"))
    assert rc == 0, out


def test_scrape_config_passes_promtool_check_config(promtool, tmp_path):
    """Debian builds Prometheus without its Kubernetes discovery (2.42.0+ds: "field kubernetes_sd_configs not
    found"), so promtool checks everything but that block - the relabel rules, their regexes and actions - with a
    static target in its place; the block itself is checked against Prometheus' documented fields."""
    write_rules(tmp_path)
    jobs = _monitoring.scrape_configs(SETTINGS)
    for job in jobs:
        [sd] = job.pop("kubernetes_sd_configs")
        assert set(sd) == {"role", "namespaces"} and sd["role"] in ("endpoints", "pod"), sd
        assert list(sd["namespaces"]) == ["names"], sd
        job["static_configs"] = [{"targets": ["127.0.0.1:9"]}]
    config = {"global": {"scrape_interval": "30s"}, "rule_files": ["rules.yml"], "scrape_configs": jobs}
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    rc, out = run(promtool, "check", "config", str(tmp_path / "prometheus.yml"))
    assert rc == 0, out


def annotations(name, labels, value):
    """The alert's annotations as Prometheus renders them for these labels and value."""
    [(summary, description)] = [(a[4], a[5]) for a in _monitoring.alerts(SETTINGS) if a[0] == name]
    description = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], description)
    return {"summary": summary, "description": description.replace("{{ $value }}", str(value))}


def alert(name, severity, value, **labels):
    return {"exp_labels": dict(labels, severity=severity), "exp_annotations": annotations(name, labels, value)}


# (what, input series, [(eval time, alert, [expected alerts])]) - each alert fires in its case and in no other.
CASES = [
    ("the scheduler down, then back", [("up{%s}" % SCHED, "0x6 1x4")], [
        ("4m", "GpufleetVolcanoSchedulerDown", []),
        ("6m", "GpufleetVolcanoSchedulerDown",
         [alert("GpufleetVolcanoSchedulerDown", "critical", 0, job="gpufleet-volcano-scheduler")]),
        ("8m", "GpufleetVolcanoSchedulerDown", []),
    ]),
    ("the scheduler never scraped", [("up{%s}" % MON, "1x10")], [
        ("6m", "GpufleetVolcanoSchedulerDown",
         [alert("GpufleetVolcanoSchedulerDown", "critical", 1, job="gpufleet-volcano-scheduler")]),
    ]),
    ("rig02's monitor down, rig01's up and every GPU there", [
        ("up{%s, node=\"rig01\"}" % MON, "1x10"), ("up{%s, node=\"rig02\"}" % MON, "0x10"),
        ("up{%s}" % SCHED, "1x10"),
    ] + [("HostGPUMemoryUsage{%s, node=\"rig01\", deviceidx=\"%d\"}" % (MON, i), "0x10") for i in range(5)], [
        ("6m", "GpufleetVGPUPluginDown", [alert("GpufleetVGPUPluginDown", "critical", 5, node="rig02")]),
        ("6m", "GpufleetGPUMissing", []),
        ("6m", "GpufleetVolcanoSchedulerDown", []),
    ]),
    ("rig01's monitor gone from the targets", [("up{%s, node=\"rig02\"}" % MON, "1x10")] + [
        ("HostGPUMemoryUsage{%s, node=\"rig02\", deviceidx=\"%d\"}" % (MON, i), "0x10") for i in range(5)], [
        ("6m", "GpufleetVGPUPluginDown", [alert("GpufleetVGPUPluginDown", "critical", 5, node="rig01")]),
    ]),
    ("rig01 sees 4 of its 5 GPUs, rig02 none at all, both monitors up", [
        ("up{%s, node=\"rig01\"}" % MON, "1x10"), ("up{%s, node=\"rig02\"}" % MON, "1x10"),
    ] + [("HostGPUMemoryUsage{%s, node=\"rig01\", deviceidx=\"%d\"}" % (MON, i), "0x10") for i in range(4)], [
        ("1m", "GpufleetGPUMissing", []),
        ("3m", "GpufleetGPUMissing", [alert("GpufleetGPUMissing", "critical", 5, node="rig01"),
                                      alert("GpufleetGPUMissing", "critical", 5, node="rig02")]),
        ("3m", "GpufleetVGPUPluginDown", []),
    ]),
    ("a bare pod and a gang wait; a placed gang reads 0", [
        ("volcano_unschedule_task_count{%s, job_id=\"podgroup-8f1c\"}" % SCHED, "1x20"),
        ("volcano_unschedule_task_count{%s, job_id=\"resnet-ddp\"}" % SCHED, "3x20"),
        ("volcano_unschedule_task_count{%s, job_id=\"placed\"}" % SCHED, "0x20"),
    ], [
        ("14m", "GpufleetVolcanoJobPending", []),
        ("16m", "GpufleetVolcanoJobPending", [alert("GpufleetVolcanoJobPending", "warning", 1,
                                                    job="gpufleet-volcano-scheduler", job_id="podgroup-8f1c")]),
        ("16m", "GpufleetGangWaiting", [alert("GpufleetGangWaiting", "warning", 3,
                                              job="gpufleet-volcano-scheduler", job_id="resnet-ddp")]),
    ]),
]


# gpu_verify's health timer: the check's time stamp advances a minute a minute (time() in promtool's evaluation).
HEALTHY_RIG02 = [("gpufleet_gpu_check_timestamp_seconds{%s}" % NODE.replace("rig01", "rig02"), "0+60x20"),
                 ("gpufleet_gpu_node_healthy{%s}" % NODE.replace("rig01", "rig02"), "1x20")]
CASES += [
    ("rig01's GPU 3 fallen off the bus, its other GPUs healthy", [
        ("gpufleet_gpu_check_timestamp_seconds{%s}" % NODE, "0+60x20"),
        ("gpufleet_gpu_node_healthy{%s}" % NODE, "0x20"), ("gpufleet_gpu_healthy{%s}" % GPU3, "0x20"),
        ("gpufleet_gpu_healthy{%s}" % GPU3.replace('"3"', '"0"'), "1x20")] + HEALTHY_RIG02, [
        ("30s", "GpufleetGPUUnhealthy", []),
        ("2m", "GpufleetGPUUnhealthy", [alert("GpufleetGPUUnhealthy", "critical", 0, job="node-exporter",
                                              instance="10.0.0.11:9100", node="rig01", gpu="3", uuid="GPU-7c1d",
                                              pci_bus_id="00000000:61:00.0")]),
        ("2m", "GpufleetGPUNodeUnhealthy", []),
        ("2m", "GpufleetGPUHealthCheckStale", []),
    ]),
    ("rig01's GPU 3 logged a GSP timeout (Xid 119) and an application's page fault (Xid 31)", [
        ("gpufleet_gpu_xid_events{%s, code=\"119\", action=\"reset_gpu\"}" % GPU3, "1x20"),
        ("gpufleet_gpu_xid_events{%s, code=\"31\", action=\"restart_app\"}" % GPU3, "2x20")] + HEALTHY_RIG02, [
        ("30s", "GpufleetGPUXid", []),
        ("2m", "GpufleetGPUXid", [alert("GpufleetGPUXid", "critical", 1, job="node-exporter",
                                        instance="10.0.0.11:9100", node="rig01", gpu="3", uuid="GPU-7c1d",
                                        pci_bus_id="00000000:61:00.0", code="119", action="reset_gpu")]),
    ]),
    ("NVML down on rig01 (no GPU to blame)", [
        ("gpufleet_gpu_check_timestamp_seconds{%s}" % NODE, "0+60x20"),
        ("gpufleet_gpu_node_healthy{%s}" % NODE, "0x20")] + HEALTHY_RIG02, [
        ("2m", "GpufleetGPUNodeUnhealthy", [alert("GpufleetGPUNodeUnhealthy", "critical", 0, job="node-exporter",
                                                  instance="10.0.0.11:9100", node="rig01")]),
        ("2m", "GpufleetGPUUnhealthy", []),
    ]),
    ("rig01's check stuck at time 0, rig02's never scraped", [
        ("gpufleet_gpu_check_timestamp_seconds{%s}" % NODE, "0x20"),
        ("gpufleet_gpu_node_healthy{%s}" % NODE, "1x20")], [
        ("4m", "GpufleetGPUHealthCheckStale", []),
        ("6m", "GpufleetGPUHealthCheckStale", [alert("GpufleetGPUHealthCheckStale", "warning", 5, node="rig02")]),
        ("16m", "GpufleetGPUHealthCheckStale", [alert("GpufleetGPUHealthCheckStale", "warning", 960, node="rig01"),
                                                alert("GpufleetGPUHealthCheckStale", "warning", 5, node="rig02")]),
    ]),
]


def test_each_alert_fires_in_its_case_and_only_there(promtool, tmp_path):
    write_rules(tmp_path)
    tests = [{"name": what, "interval": "1m",
              "input_series": [{"series": series, "values": values} for series, values in series_list],
              "alert_rule_test": [{"eval_time": at, "alertname": name, "exp_alerts": expected}
                                  for at, name, expected in checks]}
             for what, series_list, checks in CASES]
    (tmp_path / "tests.yml").write_text(yaml.safe_dump({"rule_files": ["rules.yml"], "evaluation_interval": "1m",
                                                       "tests": tests}, sort_keys=False))
    rc, out = run(promtool, "test", "rules", "tests.yml", cwd=tmp_path)
    assert rc == 0, out
    # Every alert of the rules is exercised above.
    exercised = {check[1] for case in CASES for check in case[2]}
    assert exercised == {a[0] for a in _monitoring.alerts(SETTINGS)}
