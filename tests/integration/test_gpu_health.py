"""gpu_verify's health check between runs. The gpu_health_timer module writes its files into a directory of the test's.
The check it installs then runs as its systemd unit would run it (the unit's ExecStart and PYTHONPATH), through the
real pynvml and prometheus-client, against the fake libnvidia-ml.so.1 with one fixture per case. Its metrics are read
back with prometheus-client's own parser."""

import json
import pathlib
import shlex
import subprocess
import sys

import pytest
from prometheus_client.parser import text_string_to_metric_families

from helpers import ROOT, run_playbook

PLAYBOOK = pathlib.Path(__file__).parent / "playbooks" / "gpu_health_timer.yml"
FIXTURES = ROOT / "tests" / "fixtures" / "nvml"
UNIT = "gpufleet-gpu-health"
RIG01 = {"expected_count": 5, "model_pattern": "RTX 4090", "driver_branch": "570"}


@pytest.fixture(scope="module")
def fake_lib():
    out = subprocess.run([sys.executable, str(ROOT / "tests" / "harness" / "fake_nvml.py"), "build"],
                         capture_output=True, text=True, check=True)
    return pathlib.Path(out.stdout.strip())


def install(root, *args, **extra):
    varfile = root.parent / ("%s-vars.json" % root.name)
    varfile.write_text(json.dumps(dict({"root": str(root)}, **extra)))
    rc, out, err = run_playbook(PLAYBOOK, "-e", "@%s" % varfile, *args)
    result = out["plays"][0]["tasks"][0]["hosts"]["localhost"]
    return rc, result, err


def run_check(root, fake_lib, fixture):
    """Run the installed check as its service does; (process, {metric: {labels: value}})."""
    service = (root / "units" / (UNIT + ".service")).read_text()
    environment = dict(line.split("=", 2)[1:] for line in service.splitlines() if line.startswith("Environment="))
    [command] = [shlex.split(line.split("=", 1)[1]) for line in service.splitlines() if line.startswith("ExecStart=")]
    conf = root / "fixture.conf"
    conf.write_text(subprocess.run([sys.executable, str(ROOT / "tests" / "harness" / "fake_nvml.py"), "flatten",
                                    str(FIXTURES / (fixture + ".json"))], capture_output=True, text=True,
                                   check=True).stdout)
    env = dict(environment, LD_LIBRARY_PATH=str(fake_lib.parent), GPUFLEET_FAKE_NVML=str(conf))
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    found = {}
    path = root / "textfile" / "gpufleet_gpu_health.prom"
    if path.exists():
        for family in text_string_to_metric_families(path.read_text()):
            for sample in family.samples:
                found.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return done, found


def by_gpu(found, metric):
    return {dict(labels)["gpu"]: value for labels, value in found.get(metric, {}).items()}


def one(found, metric):
    [value] = found[metric].values()
    return value


def test_install_check_mode_then_idempotent_then_absent(tmp_path):
    root = tmp_path / "node"
    rc, dry, dummy = install(root, "--check", "--diff", expect=RIG01)
    assert rc == 0 and dry["changed"] and not root.exists(), dry
    rc, first, dummy = install(root, "--diff", expect=RIG01)
    assert rc == 0 and first["changed"] and first["units_changed"], first
    assert sorted(p.replace(str(root), "") for p in first["files"]) == [
        "/gpu-health/ansible_collections/gpufleet/vgpu/plugins/module_utils/_gpu_health.py",
        "/gpu-health/ansible_collections/gpufleet/vgpu/plugins/module_utils/_gpu_policy.py",
        "/gpu-health/ansible_collections/gpufleet/vgpu/plugins/module_utils/_nvml.py",
        "/gpu-health/ansible_collections/gpufleet/vgpu/plugins/module_utils/_xid.py",
        "/gpu-health/config.json", "/textfile/", "/units/gpufleet-gpu-health.service",
        "/units/gpufleet-gpu-health.timer"]
    # The diff shows the settings and the units, not the collection's own code.
    assert "OnUnitActiveSec=2min" in first["diff"]["after"] and "def collect" not in first["diff"]["after"]
    # The installed code is the collection's, byte for byte.
    installed = root / "gpu-health" / "ansible_collections" / "gpufleet" / "vgpu" / "plugins" / "module_utils"
    for name in ("_nvml.py", "_xid.py", "_gpu_policy.py", "_gpu_health.py"):
        assert (installed / name).read_text() == (ROOT / "plugins" / "module_utils" / name).read_text()
    assert json.loads((root / "gpu-health" / "config.json").read_text())["expect"] == RIG01
    rc, again, dummy = install(root, expect=RIG01)
    assert rc == 0 and not again["changed"], again
    # New expectations rewrite the configuration, not the units.
    rc, other, dummy = install(root, expect=dict(RIG01, expected_count=4))
    assert rc == 0 and other["changed"] and not other["units_changed"], other
    (root / "textfile" / "gpufleet_gpu_health.prom").write_text("# stale\n")
    rc, gone, dummy = install(root, health_state="absent")
    assert rc == 0 and gone["changed"] and gone["units_changed"], gone
    assert not list((root / "units").iterdir()) and not list((root / "textfile").iterdir())
    rc, gone, dummy = install(root, health_state="absent")
    assert rc == 0 and not gone["changed"], gone


def test_a_textfile_node_exporter_ignores_is_refused(tmp_path):
    rc, result, dummy = install(tmp_path / "node", textfile_name="gpu.txt")
    assert rc != 0 and "textfile must end in .prom" in result["msg"], result


def test_the_installed_check_runs_its_own_copy(tmp_path, fake_lib):
    root = tmp_path / "node"
    assert install(root, expect=RIG01)[0] == 0
    service = (root / "units" / (UNIT + ".service")).read_text()
    [python] = [shlex.split(line.split("=", 1)[1])[0] for line in service.splitlines() if line.startswith("ExecStart")]
    probe = subprocess.run([python, "-c", "import ansible_collections.gpufleet.vgpu.plugins.module_utils._gpu_health "
                            "as m, ansible_collections.gpufleet.vgpu.plugins.module_utils._nvml as n; "
                            "print(m.__file__); print(n.__file__)"],
                           env={"PYTHONPATH": str(root / "gpu-health")}, capture_output=True, text=True, check=True)
    assert all(line.startswith(str(root / "gpu-health")) for line in probe.stdout.split()), probe.stdout


# (fixture, expectations, node healthy, GPU healthy by index, NVML error, other series wanted)
CASES = [
    ("rig01", RIG01, 1, {"0": 1, "1": 1, "2": 1, "3": 1, "4": 1}, "", {"gpufleet_gpu_driver_ok": 1}),
    ("rig01-gpu-lost", RIG01, 0, {"0": 1, "1": 1, "2": 1, "3": 0, "4": 1}, "", {"gpufleet_gpu_visible": 5}),
    ("rig01", dict(RIG01, driver_branch="550"), 0, {"0": 1, "1": 1, "2": 1, "3": 1, "4": 1}, "",
     {"gpufleet_gpu_driver_ok": 0}),
    ("rig01", dict(RIG01, expected_count=6), 0, {"0": 1, "1": 1, "2": 1, "3": 1, "4": 1}, "",
     {"gpufleet_gpu_expected": 6, "gpufleet_gpu_visible": 5}),
    ("remapped-rows-pending", {}, 0, {"0": 1, "1": 0}, "", {}),
    ("driver-not-loaded", RIG01, 0, {}, "DRIVER_NOT_LOADED", {"gpufleet_gpu_expected": 5}),
    ("version-mismatch", RIG01, 0, {}, "LIB_RM_VERSION_MISMATCH", {}),
]


@pytest.mark.parametrize(("fixture", "expect", "node_ok", "gpus", "error", "others"), CASES,
                         ids=["%s-%d" % (c[0], i) for i, c in enumerate(CASES)])
def test_the_check_writes_the_verdict_as_metrics(tmp_path, fake_lib, fixture, expect, node_ok, gpus, error, others):
    root = tmp_path / "node"
    assert install(root, expect=expect)[0] == 0
    done, found = run_check(root, fake_lib, fixture)
    assert done.returncode == 0, done.stderr
    assert one(found, "gpufleet_gpu_node_healthy") == node_ok
    assert by_gpu(found, "gpufleet_gpu_healthy") == gpus
    [(labels, up)] = found["gpufleet_gpu_nvml_up"].items()
    assert (up, dict(labels).get("error", "")) == (0 if error else 1, error)
    for metric, value in others.items():
        assert one(found, metric) == value, metric
    # Every series names the node, and the journal gets the verdict line with each finding.
    assert all(dict(labels)["node"] == "rig01" for series in found.values() for labels in series)
    assert done.stdout.startswith("rig01: %s" % ("OK" if node_ok else "FAILED")), done.stdout


def test_the_findings_are_counted_and_the_gpu_series_filled(tmp_path, fake_lib):
    root = tmp_path / "node"
    assert install(root, expect={"expected_count": 5})[0] == 0
    done, found = run_check(root, fake_lib, "rig02")
    assert done.returncode == 0, done.stderr
    findings = {dict(labels)["severity"]: value for labels, value in found["gpufleet_gpu_findings"].items()}
    assert findings == {"failure": 0, "warning": 1}  # GPU 2's link at x8
    assert by_gpu(found, "gpufleet_gpu_pcie_link_width")["2"] == 8
    assert by_gpu(found, "gpufleet_gpu_pcie_link_width_max")["2"] == 16
    assert set(by_gpu(found, "gpufleet_gpu_healthy").values()) == {1}
    assert "1 warning(s): GPU 2" in done.stdout
    [stamp] = found["gpufleet_gpu_check_timestamp_seconds"].values()
    assert stamp > 1.7e9


def test_between_runs_an_xid_fails_its_card_and_a_card_gone_fails_the_node(tmp_path, fake_lib):
    """The installed check, run as its unit runs it, three times: healthy; then the kernel log gains an Xid 79 line
    for one card while NVML still answers; then a card no longer enumerates, with no count in the inventory."""
    root, log = tmp_path / "node", tmp_path / "kern.log"
    log.write_text("Dec  5 09:00:00 rig01 kernel: an earlier line\n")
    assert install(root, expect={"model_pattern": "RTX 4090"}, xid_source=str(log))[0] == 0
    done, found = run_check(root, fake_lib, "rig01")
    assert done.returncode == 0 and one(found, "gpufleet_gpu_node_healthy") == 1, done.stdout + done.stderr
    [(labels, up)] = found["gpufleet_gpu_xid_reader_up"].items()
    assert up == 1 and dict(labels)["source"] == "file"
    bus = {dict(labels)["gpu"]: dict(labels)["pci_bus_id"] for labels in found["gpufleet_gpu_healthy"]}["2"]
    domain, bus_no, device = bus.split(".")[0].split(":")
    with log.open("a") as handle:
        handle.write("Dec  5 09:01:00 rig01 kernel: [ 6154.283019] NVRM: Xid (PCI:%s:%s:%s): 79, pid=0, name=, GPU "
                     "has fallen off the bus.\n" % (domain[-4:], bus_no, device))
    done, found = run_check(root, fake_lib, "rig01")
    assert done.returncode == 0, done.stderr
    assert by_gpu(found, "gpufleet_gpu_healthy") == {"0": 1, "1": 1, "2": 0, "3": 1, "4": 1}
    [(labels, count)] = found["gpufleet_gpu_xid_events"].items()
    assert count == 1 and dict(labels)["code"] == "79" and dict(labels)["action"] == "reboot"
    assert "GPU 2 (%s): Xid 79 (GPU has fallen off the bus)" % bus in done.stdout, done.stdout
    # The state keeps the GPUs of the last passed run: now one is missing and the inventory states no count.
    done, found = run_check(root, fake_lib, "rig01-one-missing")
    assert one(found, "gpufleet_gpu_node_healthy") == 0
    assert "4 GPU(s) visible, 5 when the node last passed its check" in done.stdout, done.stdout
    assert one(found, "gpufleet_gpu_expected") == 5
