"""nvml_info and gpu_verify through the real pynvml and the fake libnvidia-ml.so.1, one fixture per case."""

import json
import pathlib
import subprocess
import sys

import pytest

from helpers import ROOT, failed_messages, run_playbook

PLAYBOOK = pathlib.Path(__file__).parent / "playbooks" / "gpu_verify.yml"
FIXTURES = ROOT / "tests" / "fixtures" / "nvml"


@pytest.fixture(scope="module")
def fake_lib():
    out = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "harness" / "fake_nvml.py"), "build"],
        capture_output=True, text=True, check=True,
    )
    return pathlib.Path(out.stdout.strip())


def run(fake_lib, tmp_path, fixture, extra=None, with_lib=True):
    """Run the playbook with ``fixture``; return (rc, inventory result, verdict facts, failure messages)."""
    conf = tmp_path / ("%s.conf" % fixture)
    flat = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "harness" / "fake_nvml.py"), "flatten", str(FIXTURES / (fixture + ".json"))],
        capture_output=True, text=True, check=True,
    ).stdout
    conf.write_text(flat)
    env = {"GPUFLEET_FAKE_NVML": str(conf)}
    if with_lib:
        env["LD_LIBRARY_PATH"] = str(fake_lib.parent)
    varfile = tmp_path / "vars.json"
    varfile.write_text(json.dumps(extra or {}))
    rc, out, dummy = run_playbook(PLAYBOOK, "-e", "@%s" % varfile, env=env)
    inventory, verdict = None, None
    for task in out["plays"][0]["tasks"]:
        res = task["hosts"].get("localhost", {})
        if task["task"]["name"] == "Inventory":
            inventory = res.get("nvml")
        if "gpu_verify_verdict" in res.get("ansible_facts", {}):
            verdict = res["ansible_facts"]["gpu_verify_verdict"]
    return rc, inventory, verdict, failed_messages(out)


RIG01 = {"gpu_verify_expected_count": 5, "gpu_verify_model_pattern": "RTX 4090", "gpu_verify_min_memory_mib": 24000,
         "gpu_verify_min_driver": "550"}


def test_rig01_inventory(fake_lib, tmp_path):
    rc, inv, verdict, dummy = run(fake_lib, tmp_path, "rig01", RIG01)
    assert rc == 0
    assert inv["ok"] and inv["gpu_count"] == 5
    assert (inv["driver_version"], inv["cuda_driver_version"], inv["nvml_version"]) == ("570.133.20", "12.8", "12.570.133.20")
    gpu = inv["gpus"][0]
    assert gpu["name"] == "NVIDIA GeForce RTX 4090"
    assert (gpu["memory_total_mib"], gpu["memory_used_mib"], gpu["memory_free_mib"]) == (24564, 1, 24563)
    assert (gpu["pcie_link_gen_max"], gpu["pcie_link_width_current"], gpu["power_limit_w"]) == (4, 16, 450.0)
    assert gpu["persistence_mode"] is True and gpu["compute_mode"] == "default"
    # GeForce cards do not support ECC, remapped rows or MIG: null, never a failure.
    assert gpu["ecc_mode_current"] is None and gpu["remapped_rows_pending"] is None and gpu["mig_mode_current"] is None
    assert len({g["uuid"] for g in inv["gpus"]}) == 5
    assert verdict["ok"], verdict
    assert verdict["line"].startswith("localhost: OK: 5 GPU(s) NVIDIA GeForce RTX 4090, driver 570.133.20")


def test_rig02_passes_with_pcie_warning(fake_lib, tmp_path):
    expect = {"gpu_verify_expected_count": 5, "gpu_verify_model_pattern": "RTX 4070 SUPER"}
    rc, inv, verdict, dummy = run(fake_lib, tmp_path, "rig02", expect)
    assert rc == 0
    assert inv["gpus"][0]["memory_total_mib"] == 16376
    assert verdict["ok"]
    assert verdict["warnings"] == ["GPU 2 (00000000:41:00.0): PCIe link x8 of x16 (check riser and seating)"]


@pytest.mark.parametrize(
    ("fixture", "extra", "expected"),
    [
        ("rig01-gpu-lost", RIG01, "localhost: FAILED: GPU 3: GPU_IS_LOST — the GPU has fallen off the bus"),
        ("rig01-one-missing", RIG01, "localhost: FAILED: 4 GPU(s) visible, inventory expects 5"),
        ("driver-not-loaded", RIG01, "localhost: FAILED: NVML unavailable: DRIVER_NOT_LOADED — the nvidia kernel module is not loaded"),
        ("version-mismatch", RIG01, "localhost: FAILED: NVML unavailable: LIB_RM_VERSION_MISMATCH — the driver userspace was upgraded"),
        ("rig02", RIG01, "localhost: FAILED: GPU 0 (00000000:01:00.0): model 'NVIDIA GeForce RTX 4070 SUPER' does not match 'RTX 4090'"),
        ("remapped-rows-pending", {}, "localhost: FAILED: GPU 1 (00000000:21:00.0): a row remapping is pending"),
        ("rig01", {"gpu_verify_min_driver": "580.65"}, "localhost: FAILED: driver 570.133.20 is older than the required 580.65"),
    ],
)
def test_verdict_fails_with_one_line(fake_lib, tmp_path, fixture, extra, expected):
    rc, dummy, verdict, msgs = run(fake_lib, tmp_path, fixture, extra)
    assert rc != 0
    assert not verdict["ok"]
    assert msgs[-1].startswith(expected), msgs
    assert "\n" not in msgs[-1]


def test_library_not_found(fake_lib, tmp_path):
    rc, inv, verdict, msgs = run(fake_lib, tmp_path, "rig01", with_lib=False)
    assert rc != 0
    assert inv["ok"] is False and inv["diagnosis"]["error"] == "LIBRARY_NOT_FOUND"
    assert "libnvidia-ml.so.1 is not installed" in msgs[-1]


def test_remapped_rows_and_mig_fields(fake_lib, tmp_path):
    dummy, inv, dummy2, dummy3 = run(fake_lib, tmp_path, "remapped-rows-pending", {"run_gpu_verify": False})
    assert [g["remapped_rows_pending"] for g in inv["gpus"]] == [False, True]
    assert inv["gpus"][0]["ecc_mode_current"] is True and inv["gpus"][0]["ecc_uncorrected_volatile"] == 0
    rc, inv, verdict, msgs = run(fake_lib, tmp_path, "mig-a100")
    assert (inv["gpus"][0]["mig_mode_current"], inv["gpus"][0]["mig_mode_pending"]) == (True, True)
    assert inv["gpus"][0]["memory_total_mib"] == 81920
    # The plugin's default hami-core mode splits whole GPUs: MIG must be off.
    assert rc != 0 and "MIG mode is on, but the device plugin's mode needs it off" in msgs[-1]
    rc, inv, verdict, msgs = run(fake_lib, tmp_path, "mig-a100", {"device_plugin_vgpu": {"mode": "mig"}})
    assert rc == 0 and verdict["ok"] and "MIG on for GPU 0" in verdict["line"]


def test_not_supported_queries_are_null(fake_lib, tmp_path):
    rc, inv, verdict, dummy = run(fake_lib, tmp_path, "not-supported")
    assert rc == 0
    gpu = inv["gpus"][0]
    optional = ["pcie_link_gen_current", "pcie_link_width_max", "temperature_c", "power_limit_w", "persistence_mode",
                "compute_mode", "ecc_mode_current", "ecc_uncorrected_volatile", "retired_pages_pending",
                "remapped_rows_pending", "mig_mode_current"]
    assert {k: gpu[k] for k in optional} == dict.fromkeys(optional)
    assert gpu["query_errors"] == {}
    assert verdict["ok"]


@pytest.mark.parametrize(
    ("extra", "variable"),
    [
        ({"gpu_verify_min_driver": "latest"}, "gpu_verify_min_driver"),
        ({"gpu_verify_model_pattern": "RTX (4090"}, "gpu_verify_model_pattern"),
        ({"gpu_verify_expected_count": -1}, "gpu_verify_expected_count"),
        ({"gpu_verify_min_memory_mib": "lots"}, "gpu_verify_min_memory_mib"),
    ],
)
def test_bad_expectations_rejected_before_querying(fake_lib, tmp_path, extra, variable):
    rc, dummy, verdict, msgs = run(fake_lib, tmp_path, "rig01", extra)
    assert rc != 0
    assert verdict is None
    assert variable in msgs[-1], msgs
