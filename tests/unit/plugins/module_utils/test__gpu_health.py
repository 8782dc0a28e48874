"""gpu_verify's health check as metrics: which series a verdict becomes (the check itself runs against the fake
libnvidia-ml.so.1 in tests/integration/test_gpu_health.py, under systemd in molecule gpu_verify and in the lab)."""

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ansible_collections.gpufleet.vgpu.plugins.module_utils import _gpu_health, _gpu_policy, _nvml


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
    verdict = _gpu_policy.evaluate("rig01", inv, {"expected_count": 2})
    found = _gpu_health.samples("rig01", inv, verdict, {"expected_count": 2}, 5.5)
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
