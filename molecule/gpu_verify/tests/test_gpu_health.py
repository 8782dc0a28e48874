"""gpu_verify's health timer under each test host's systemd: enabled and waiting, its first run (when the timer
started) wrote the fixture's verdict as textfile metrics, and the journal names the finding."""

import shlex
import time

import pytest

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


def test_an_xid_in_the_kernel_log_fails_its_card_at_the_next_run(host):
    """rig01 reads its kernel log from a file (gpu_verify_xid_source): a GSP timeout logged for GPU 1, with NVML
    still answering, makes the timer's next run fail that card and export the event."""
    if host.backend.get_hostname() != "gf-gv-rig01":
        pytest.skip("only rig01 reads its kernel log from a file")
    bus = {labels["gpu"]: labels["pci_bus_id"] for labels, value in metrics(host)["gpufleet_gpu_healthy"]}["1"]
    domain, bus_no, device = bus.split(".")[0].split(":")
    line = ("Dec  5 10:01:00 gf-gv-rig01 kernel: [ 8123.456789] NVRM: Xid (PCI:%s:%s:%s): 119, pid=2364, "
            "name=python3, Timeout after 6s of waiting for RPC response from GPU1 GSP!" % (domain[-4:], bus_no, device))
    host.run_test("printf '%%s\\n' %s >> /var/log/gpufleet-test-kern.log" % shlex.quote(line))
    host.run_test("systemctl start gpufleet-gpu-health.service")
    deadline, events = time.time() + 60, []
    while not events and time.time() < deadline:
        events = list(metrics(host).get("gpufleet_gpu_xid_events", []))
        time.sleep(1)
    assert [(labels["gpu"], labels["code"], labels["action"], value) for labels, value in events] == [
        ("1", "119", "reset_gpu", 1.0)]
    unhealthy = [labels["gpu"] for labels, value in metrics(host)["gpufleet_gpu_healthy"] if value == 0]
    assert unhealthy == ["1"]
    assert "Xid 119 (GSP RPC timeout)" in host.check_output("journalctl -u gpufleet-gpu-health.service --no-pager")
