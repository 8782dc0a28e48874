"""gpu_verify's health timer under each test host's systemd: enabled and waiting, its first run (when the timer
started) wrote the fixture's verdict as textfile metrics, and the journal names the finding."""

import time

from prometheus_client.parser import text_string_to_metric_families

TEXTFILE = "/var/lib/node_exporter/textfile_collector/gpufleet_gpu_health.prom"


def metrics(host):
    deadline = time.time() + 60
    while not host.file(TEXTFILE).exists and time.time() < deadline:
        time.sleep(2)
    found = {}
    for family in text_string_to_metric_families(host.file(TEXTFILE).content_string):
        for sample in family.samples:
            found.setdefault(sample.name, []).append((sample.labels, sample.value))
    return found


def test_the_timer_is_enabled_and_waiting(host):
    timer = host.service("gpufleet-gpu-health.timer")
    assert timer.is_enabled and timer.is_running


def test_the_timers_run_wrote_the_fixtures_verdict(host):
    name = host.backend.get_hostname()
    found = metrics(host)
    [(labels, healthy)] = found["gpufleet_gpu_node_healthy"]
    assert labels == {"node": name}
    unhealthy = sorted(labels["gpu"] for labels, value in found["gpufleet_gpu_healthy"] if value == 0)
    if name == "gf-gv-lost":
        assert (healthy, unhealthy) == (0, ["3"])
        assert "GPU 3: GPU_IS_LOST" in host.check_output("journalctl -u gpufleet-gpu-health.service --no-pager")
    else:
        assert (healthy, unhealthy) == (1, [])
    assert len(found["gpufleet_gpu_healthy"]) == 5
