"""Table tests for the GPU verdict logic (no Ansible, no NVML)."""

import pytest

from ansible_collections.gpufleet.vgpu.plugins.module_utils._gpu_policy import (
    evaluate,
    fleet_summary,
    validate_expect,
    version_tuple,
)
from ansible_collections.gpufleet.vgpu.plugins.module_utils._nvml import diagnose


def gpu(index=0, **kw):
    base = {
        "index": index, "name": "NVIDIA GeForce RTX 4090", "pci_bus_id": "00000000:%02X:00.0" % (index + 1),
        "memory_total_mib": 24564, "pcie_link_width_current": 16, "pcie_link_width_max": 16,
        "persistence_mode": True, "retired_pages_pending": None, "remapped_rows_pending": None,
        "remapped_rows_failure": None, "ecc_uncorrected_volatile": None, "mig_mode_current": None,
        "mig_mode_pending": None, "diagnosis": None,
    }
    base.update(kw)
    return base


def inv(*gpus, driver="570.133.20"):
    return {"ok": True, "diagnosis": None, "driver_version": driver, "gpu_count": len(gpus), "gpus": list(gpus)}


@pytest.mark.parametrize(
    ("text", "expected"),
    [("570", (570,)), ("570.133.20", (570, 133, 20)), (" 535.54 ", (535, 54))],
)
def test_version_tuple(text, expected):
    assert version_tuple(text) == expected


@pytest.mark.parametrize("text", ["", "latest", "570.x", None, "5..1"])
def test_version_tuple_rejects(text):
    with pytest.raises(ValueError):
        version_tuple(text)


@pytest.mark.parametrize(
    ("expect", "fragment"),
    [
        ({"expected_count": -1}, "expected_count must be an integer >= 0"),
        ({"expected_count": True}, "expected_count must be an integer >= 0"),
        ({"model_pattern": "RTX (4090"}, "model_pattern is not a valid regular expression"),
        ({"min_driver": "new"}, "min_driver must look like"),
        ({"min_memory_mib": -5}, "min_memory_mib must be an integer >= 0"),
        ({"colour": "green"}, "unknown expectation(s) colour"),
    ],
)
def test_validate_expect(expect, fragment):
    errors = validate_expect(expect)
    assert len(errors) == 1 and fragment in errors[0], errors


def test_validate_expect_accepts_defaults():
    assert validate_expect({"expected_count": 5, "model_pattern": "RTX 40[79]0", "min_driver": "550.54"}) == []


CASES = [
    # (id, inventory, expect, ok, first failure fragment or None, warnings)
    ("healthy", inv(gpu(0), gpu(1)), {"expected_count": 2, "model_pattern": "4090"}, True, None, 0),
    ("count low", inv(gpu(0)), {"expected_count": 2}, False, "1 GPU(s) visible, inventory expects 2 — a card is missing", 0),
    ("count high", inv(gpu(0), gpu(1)), {"expected_count": 1}, False, "2 GPU(s) visible, inventory expects 1", 0),
    ("model", inv(gpu(0, name="NVIDIA GeForce RTX 4070 SUPER")), {"model_pattern": "4090"}, False,
     "GPU 0 (00000000:01:00.0): model 'NVIDIA GeForce RTX 4070 SUPER' does not match '4090'", 0),
    ("memory", inv(gpu(0, memory_total_mib=16376)), {"min_memory_mib": 24000}, False,
     "16376 MiB of memory, expected at least 24000 MiB", 0),
    ("driver old", inv(gpu(0), driver="535.216.03"), {"min_driver": "550"}, False, "driver 535.216.03 is older", 0),
    ("driver equal", inv(gpu(0), driver="550.0"), {"min_driver": "550"}, True, None, 0),
    ("lost", inv(gpu(0), {"index": 1, "diagnosis": diagnose(15, 1)}), {}, False, "GPU 1: GPU_IS_LOST", 0),
    ("remap pending", inv(gpu(0, remapped_rows_pending=True)), {}, False, "a row remapping is pending", 0),
    ("remap failure", inv(gpu(0, remapped_rows_pending=True, remapped_rows_failure=True)), {}, False,
     "row remapping failed — the GPU needs an RMA", 0),
    ("remap ignored", inv(gpu(0, remapped_rows_pending=True)), {"fail_on_remapped_rows": False}, True, None, 0),
    ("pages pending", inv(gpu(0, retired_pages_pending=True)), {}, False, "retired pages are pending", 0),
    ("ecc", inv(gpu(0, ecc_uncorrected_volatile=3)), {}, False, "3 uncorrectable ECC errors", 0),
    ("ecc ignored", inv(gpu(0, ecc_uncorrected_volatile=3)), {"fail_on_uncorrected_ecc": False}, True, None, 0),
    ("pcie x8", inv(gpu(0, pcie_link_width_current=8)), {}, True, None, 1),
    ("pcie unknown", inv(gpu(0, pcie_link_width_current=None)), {}, True, None, 0),
    ("persistence off", inv(gpu(0, persistence_mode=False)), {}, True, None, 1),
    ("persistence off, no warning", inv(gpu(0, persistence_mode=False)), {"warn_on_persistence_off": False}, True, None, 0),
    ("mig pending", inv(gpu(0, mig_mode_current=False, mig_mode_pending=True)), {}, True, None, 1),
    ("driver not loaded", {"ok": False, "diagnosis": diagnose(9), "gpus": []}, {"expected_count": 5}, False,
     "NVML unavailable: DRIVER_NOT_LOADED", 0),
    ("no diagnosis", {"ok": False, "diagnosis": None, "gpus": []}, {}, False, "NVML unavailable for an unknown reason", 0),
]


@pytest.mark.parametrize(("case", "inventory", "expect", "ok", "failure", "warnings"), CASES, ids=[c[0] for c in CASES])
def test_evaluate(case, inventory, expect, ok, failure, warnings):
    verdict = evaluate("rig01", inventory, expect)
    assert verdict["ok"] is ok, (case, verdict)
    assert len(verdict["warnings"]) == warnings, verdict["warnings"]
    if failure:
        assert failure in verdict["failures"][0]
        assert verdict["line"].startswith("rig01: FAILED: ")
    else:
        assert verdict["failures"] == [] and verdict["line"].startswith("rig01: OK: ")


def test_evaluate_counts_further_failures_on_the_line():
    verdict = evaluate("rig01", inv(gpu(0, remapped_rows_pending=True), gpu(1, retired_pages_pending=True)), {})
    assert verdict["line"].endswith("(+1 more)")


def test_evaluate_rejects_bad_expectations():
    with pytest.raises(ValueError, match="min_driver"):
        evaluate("rig01", inv(gpu(0)), {"min_driver": "x"})


def test_fleet_summary():
    good = evaluate("rig01", inv(gpu(0, pcie_link_width_current=8)), {})
    bad = evaluate("rig02", inv(gpu(0)), {"expected_count": 5})
    summary = fleet_summary([good, bad, None])
    assert summary["nodes_ok"] == ["rig01"] and summary["nodes_failed"] == ["rig02"]
    assert summary["lines"][0] == "fleet: 1 node(s) OK, 1 failed"
    assert summary["lines"][1].startswith("  rig02: 1 GPU(s) visible, inventory expects 5")
    assert summary["lines"][2].startswith("  rig01: warning: GPU 0")


# Faults as nvidia-smi shows them on real nodes: "[Unknown Error]" / "[GPU requires reset]" / timeouts in single
# fields of one GPU, the rest of the card answering.
@pytest.mark.parametrize(("errors", "wanted"), [
    ({"memory": "TIMEOUT"}, "GPU 2 (00000000:03:00.0): NVML TIMEOUT reading memory — the GPU did not answer"),
    ({"pci": "UNKNOWN", "name": "UNKNOWN"}, "GPU 2: NVML UNKNOWN reading name, pci — the GPU answered an NVML query "
                                            "with an unknown error"),
    ({"temperature": "NO_PERMISSION"}, "NVML NO_PERMISSION reading temperature"),
])
def test_a_query_error_fails_naming_the_gpu_and_the_error(errors, wanted):
    unread = {"memory": "memory_total_mib", "name": "name", "pci": "pci_bus_id", "temperature": "temperature_c"}
    broken = gpu(2, query_errors=errors, **{unread[field]: None for field in errors})
    verdict = evaluate("rig01", inv(gpu(0), gpu(1), broken), {"model_pattern": "RTX 4090", "min_memory_mib": 24000})
    assert not verdict["ok"]
    assert any(wanted in f for f in verdict["failures"]), verdict["failures"]
    # No misleading follow-ups from a field that could not be read.
    assert not any("None MiB" in f or "model ''" in f for f in verdict["failures"]), verdict["failures"]


def test_a_per_gpu_unknown_error_is_worded_for_the_gpu_with_its_index():
    found = diagnose(999, gpu_index=3)
    assert "unknown error (a hung or failing GPU)" in found["cause"] and "-i 3" in found["next_step"]
    assert "userspace" in diagnose(999)["cause"]   # NVML's init failure keeps its own wording


@pytest.mark.parametrize(("driver", "branch", "ok"), [
    ("570.133.20", "570", True),
    ("550.144.03", "570", False),
    ("570.133.20", "", True),
])
def test_driver_branch(driver, branch, ok):
    verdict = evaluate("rig01", inv(gpu(0), driver=driver), {"driver_branch": branch})
    assert verdict["ok"] is ok
    if not ok:
        assert "driver 550.144.03 is loaded, but the inventory expects branch 570" in verdict["failures"][0]


@pytest.mark.parametrize(("mig", "mode", "fragment"), [
    (True, "off", "MIG mode is on, but the device plugin's mode needs it off"),
    (False, "on", "MIG mode is off, but the device plugin's mig mode needs it on"),
    (True, "on", None),
    (None, "off", None),     # GeForce: no MIG, never judged on it
    (True, "", None),
])
def test_mig_mode(mig, mode, fragment):
    verdict = evaluate("rig01", inv(gpu(0, mig_mode_current=mig, mig_mode_pending=mig)), {"mig_mode": mode})
    if fragment is None:
        assert verdict["ok"], verdict
        assert ("MIG on for GPU 0" in verdict["line"]) is bool(mig)
    else:
        assert not verdict["ok"] and fragment in verdict["failures"][0]


@pytest.mark.parametrize(("expect", "fragment"), [
    ({"driver_branch": "570.1"}, "driver_branch must be a driver branch such as '570'"),
    ({"mig_mode": "maybe"}, "mig_mode must be one of on, off"),
])
def test_validate_new_expectations(expect, fragment):
    errors = validate_expect(expect)
    assert len(errors) == 1 and fragment in errors[0], errors
