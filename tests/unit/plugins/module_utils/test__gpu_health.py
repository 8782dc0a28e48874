"""gpu_verify's health check as metrics: which series a verdict becomes (the check itself runs against the fake
libnvidia-ml.so.1 in tests/integration/test_gpu_health.py, under systemd in molecule gpu_verify and in the lab)."""

import copy

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ansible_collections.gpufleet.vgpu.plugins.module_utils import _gpu_health, _gpu_policy, _nvml, _xid


def gpu(index, **fields):
    record = {"index": index, "uuid": "GPU-%d" % index, "name": "NVIDIA GeForce RTX 4090",
              "pci_bus_id": "00000000:%02X:00.0" % (index + 1), "memory_total_mib": 24564, "query_errors": {},
              "diagnosis": None, "pcie_link_width_current": 16, "pcie_link_width_max": 16,
              "ecc_uncorrected_volatile": None, "retired_pages_pending": None, "remapped_rows_pending": None,
              "remapped_rows_failure": None}
    record.update(fields)
    return record


def inventory(*gpus, driver="570.133.20"):
    return {"ok": True, "diagnosis": None, "driver_version": driver, "gpu_count": len(gpus), "gpus": list(gpus)}


def series(node, inv, expect):
    verdict = _gpu_policy.evaluate(node, inv, expect)
    found = {}
    for metric, labels, value in _gpu_health.samples(node, inv, verdict, expect, 1767225600):
        found.setdefault(metric, {})[labels.get("gpu", "")] = value
    return found


LOST = dict(gpu(1), uuid=None, name=None, diagnosis=_nvml.diagnose(15, gpu_index=1))
# (case, inventory, expect, node healthy, {gpu: healthy}, {metric: {gpu: value}})
CASES = [
    ("healthy", inventory(gpu(0), gpu(1)), {"expected_count": 2}, 1, {"0": 1, "1": 1},
     {"gpufleet_gpu_visible": {"": 2}, "gpufleet_gpu_expected": {"": 2}, "gpufleet_gpu_driver_ok": {"": 1}}),
    ("GPU 1 lost", inventory(gpu(0), LOST), {}, 0, {"0": 1, "1": 0}, {"gpufleet_gpu_findings": {"": 0}}),
    ("a card missing", inventory(gpu(0)), {"expected_count": 2}, 0, {"0": 1}, {"gpufleet_gpu_visible": {"": 1}}),
    ("the wrong branch", inventory(gpu(0), driver="550.54.15"), {"driver_branch": "570"}, 0, {"0": 1},
     {"gpufleet_gpu_driver_ok": {"": 0}}),
    ("ECC and a failed remapping", inventory(gpu(0, ecc_uncorrected_volatile=3, remapped_rows_failure=True)), {}, 0,
     {"0": 0}, {"gpufleet_gpu_remapped_rows_failed": {"0": 1}}),
    ("retired pages pending, not judged", inventory(gpu(0, retired_pages_pending=True)),
     {"fail_on_retired_pages_pending": False}, 1, {"0": 1}, {"gpufleet_gpu_retired_pages_pending": {"0": 1}}),
    ("a narrow link is a warning", inventory(gpu(0, pcie_link_width_current=8)), {}, 1, {"0": 1},
     {"gpufleet_gpu_pcie_link_width": {"0": 8}, "gpufleet_gpu_pcie_link_width_max": {"0": 16}}),
]


@pytest.mark.parametrize(("case", "inv", "expect", "node_ok", "gpus", "others"), CASES, ids=[c[0] for c in CASES])
def test_samples(case, inv, expect, node_ok, gpus, others):
    found = series("rig01", inv, expect)
    assert found["gpufleet_gpu_node_healthy"] == {"": node_ok}
    assert found["gpufleet_gpu_healthy"] == gpus
    assert found["gpufleet_gpu_nvml_up"] == {"": 1} and found["gpufleet_gpu_check_timestamp_seconds"] == {"": 1767225600}
    for metric, wanted in others.items():
        assert {k: v for k, v in found[metric].items() if k in wanted} == wanted, metric


def test_nvml_down_writes_only_the_node_series():
    inv = {"ok": False, "diagnosis": _nvml.diagnose(9), "gpus": [], "gpu_count": 0}
    verdict = _gpu_policy.evaluate("rig01", inv, {"expected_count": 5})
    found = _gpu_health.samples("rig01", inv, verdict, {"expected_count": 5}, 0)
    assert sorted({metric for metric, dummy, dummy in found}) == [
        "gpufleet_gpu_check_timestamp_seconds", "gpufleet_gpu_expected", "gpufleet_gpu_findings",
        "gpufleet_gpu_node_healthy", "gpufleet_gpu_nvml_up"]
    assert ("gpufleet_gpu_nvml_up", {"node": "rig01", "error": "DRIVER_NOT_LOADED"}, 0) in found


def test_every_metric_is_declared_and_rendered_with_its_labels():
    inv = inventory(gpu(0, ecc_uncorrected_volatile=0, ecc_uncorrected_aggregate=1, retired_pages_pending=False,
                        remapped_rows_pending=False, remapped_rows_failure=False), LOST)
    xid = {"source": "kmsg", "error": "", "events": _xid.remember(
        {}, [_xid.parse("NVRM: Xid (PCI:0000:01:00): 119, pid=2364, name=python3, Timeout after 6s of waiting for "
                        "RPC response from GPU0 GSP!")], 5.0)}
    verdict = _gpu_policy.evaluate("rig01", inv, {"expected_count": 2}, xid["events"])
    found = _gpu_health.samples("rig01", inv, verdict, {"expected_count": 2}, 5.5, xid)
    assert {metric for metric, dummy, dummy in found} == set(_gpu_health.METRICS)
    text = generate_latest(_gpu_health.registry(found)).decode("utf-8")
    parsed = {(s.name, tuple(sorted(s.labels.items()))): s.value
              for family in text_string_to_metric_families(text) for s in family.samples}
    assert len(parsed) == len(found)
    for metric, labels, value in found:
        assert parsed[(metric, tuple(sorted(labels.items())))] == value
    # A lost GPU is named by its index; NVML gave no UUID for it.
    assert parsed[("gpufleet_gpu_healthy", (("gpu", "1"), ("node", "rig01"), ("pci_bus_id", "00000000:02:00.0"),
                                            ("uuid", "")))] == 0


def test_units_run_the_check_from_the_installed_package_every_interval():
    units = _gpu_health.units("/opt/h/config.json", "/opt/gpufleet/venv/bin/python", "/opt/h", "5min")
    service, timer = units["gpufleet-gpu-health.service"], units["gpufleet-gpu-health.timer"]
    assert "Environment=PYTHONPATH=/opt/h\n" in service
    assert ("ExecStart=/opt/gpufleet/venv/bin/python -m ansible_collections.gpufleet.vgpu.plugins.module_utils."
            "_gpu_health /opt/h/config.json\n") in service
    assert "OnActiveSec=0\n" in timer and "OnUnitActiveSec=5min\n" in timer and "WantedBy=timers.target" in timer


def test_main_wants_one_config():
    assert _gpu_health.main([]) == 2


def FakeNvml(inv):  # pylint: disable=invalid-name
    """Stands in for pynvml: the autouse fixture below makes _nvml.collect() return this inventory."""
    return copy.deepcopy(inv)


@pytest.fixture(autouse=True)
def _inventory_as_collected(monkeypatch):
    monkeypatch.setattr(_nvml, "collect", copy.deepcopy)
    monkeypatch.setattr(_nvml, "is_wsl", lambda: False)


GSP_TIMEOUT = ("[ 8123.456789] NVRM: Xid (PCI:0000:02:00): 119, pid=2364, name=python3, Timeout after 6s of waiting "
               "for RPC response from GPU1 GSP! Expected function 76 (GSP_RM_CONTROL) (0x20801348 0x4).")


def test_an_xid_with_nvml_still_answering_fails_the_card_and_is_exported(tmp_path):
    # NVML answers for both cards; only the kernel log knows that GPU 1 timed out.
    log = tmp_path / "kern.log"
    log.write_text("Dec  5 10:00:00 rig01 kernel: earlier boot line\n")
    config = {"node": "rig01", "expect": {"expected_count": 2}, "xid_source": str(log)}
    state = {}
    nvml = FakeNvml(inventory(gpu(0), gpu(1)))
    verdict, found, state = _gpu_health.check(nvml, config, 100.0, state)
    assert verdict["ok"] and state["xid"]["error"] == ""
    with log.open("a") as handle:
        handle.write("Dec  5 10:01:00 rig01 kernel: " + GSP_TIMEOUT + "\n")
    verdict, found, state = _gpu_health.check(nvml, config, 160.0, state)
    assert not verdict["ok"] and [g["ok"] for g in verdict["gpus"]] == [True, False]
    assert "GPU 1 (00000000:02:00.0): Xid 119 (GSP RPC timeout) 1 time(s) this boot" in verdict["failures"][0]
    assert "nvidia-smi -r -i 1" in verdict["failures"][0]
    events = [(labels, value) for metric, labels, value in found if metric == "gpufleet_gpu_xid_events"]
    assert events == [({"node": "rig01", "gpu": "1", "uuid": "GPU-1", "pci_bus_id": "00000000:02:00.0",
                        "code": "119", "action": "reset_gpu"}, 1)]
    # A later run that finds nothing new keeps the event for the rest of the boot.
    verdict, found, state = _gpu_health.check(nvml, config, 220.0, state)
    assert not verdict["ok"] and state["xid"]["events"]["0000:02:00 119"]["count"] == 1


def test_a_card_gone_fails_without_an_inventory_count_and_keeps_its_identity(tmp_path):
    config = {"node": "rig01", "expect": {}, "xid_source": str(tmp_path / "kern.log")}
    (tmp_path / "kern.log").write_text("")
    verdict, found, state = _gpu_health.check(FakeNvml(inventory(gpu(0), gpu(1), gpu(2))), config, 1.0, {})
    assert verdict["ok"] and [g["pci_bus_id"] for g in state["baseline"]["gpus"]] == [
        "00000000:01:00.0", "00000000:02:00.0", "00000000:03:00.0"]
    # GPU 1 fell off the bus; GPU 2 (now index 1) answers UNKNOWN to every query.
    unknown = dict(gpu(1), uuid=None, pci_bus_id=None, name=None, query_errors={"memory": "UNKNOWN"})
    verdict, found, state = _gpu_health.check(FakeNvml(inventory(gpu(0), unknown)), config, 2.0, state)
    assert not verdict["ok"]
    assert verdict["failures"][0].startswith("2 GPU(s) visible, 3 when the node last passed its check")
    assert "set gpu_verify_expected_count: 2" in verdict["failures"][0]
    healthy = {labels["gpu"]: labels for metric, labels, value in found if metric == "gpufleet_gpu_healthy"}
    assert healthy["1"]["uuid"] == "GPU-1" and healthy["1"]["pci_bus_id"] == "00000000:02:00.0"
    # The baseline stays what last passed.
    assert len(state["baseline"]["gpus"]) == 3
    # An inventory count wins: the operator said 2 on purpose.
    verdict = _gpu_policy.evaluate("rig01", inventory(gpu(0), gpu(1)), {"expected_count": 2}, {}, state["baseline"])
    assert verdict["ok"]


def test_a_wsl_host_is_named_as_such():
    inv = dict(inventory(gpu(0, name="NVIDIA GeForce RTX 4070 Laptop GPU"), driver="566.36"), wsl=True)
    verdict = _gpu_policy.evaluate("laptop", inv, {"expected_count": 8})
    assert verdict["failures"] == [verdict["failures"][0]] and "WSL host" in verdict["failures"][0]
    assert "missing from the bus" not in verdict["line"]


def test_state_survives_a_torn_write(tmp_path):
    path = str(tmp_path / "state.json")
    assert _gpu_health.load_state(path) == {}
    _gpu_health.save_state(path, {"baseline": None, "xid": {"events": {}}})
    assert _gpu_health.load_state(path) == {"baseline": None, "xid": {"events": {}}}
    (tmp_path / "state.json").write_text("{half")
    assert _gpu_health.load_state(path) == {}
