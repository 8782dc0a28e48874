"""Verify node_python on every test host through testinfra's podman backend."""

import json

# gpufleet's one local fact; setup runs it as this test does, and node_python's stamp carries the interpreter.
FACT = "/etc/ansible/facts.d/gpufleet_state.fact"


def _fact(host):
    return json.loads(host.check_output(FACT))["node_python"]["data"]


def test_local_fact_names_the_interpreter(host):
    fact = _fact(host)
    assert fact["interpreter"] == "/opt/gpufleet/venv/bin/python"
    assert fact["venv"] == "/opt/gpufleet/venv"
    assert host.file(fact["interpreter"]).exists


def test_the_former_interpreter_fact_is_gone(host):
    assert not host.file("/etc/ansible/facts.d/gpufleet_node_python.fact").exists


def test_interpreter_imports_pinned_libraries(host):
    interpreter = _fact(host)["interpreter"]
    out = host.check_output(
        "%s -c 'import importlib.metadata as m, pynvml, prometheus_client, tomlkit;"
        " print(m.version(\"nvidia-ml-py\"), m.version(\"prometheus-client\"), m.version(\"tomlkit\"))'",
        interpreter,
    )
    assert out.split() == ["13.615.71", "0.26.0", "0.15.2"]


def test_pynvml_reports_missing_driver_not_crash(host):
    # No GPU driver on test hosts: the real pynvml must fail with its typed error, which nvml_info maps
    # to a diagnosis. A different exception here means the binding itself is broken.
    interpreter = _fact(host)["interpreter"]
    cmd = host.run(
        "%s -c 'import pynvml\ntry:\n pynvml.nvmlInit()\nexcept pynvml.NVMLError as e:\n print(type(e).__name__)'",
        interpreter,
    )
    assert cmd.rc == 0, cmd.stderr
    assert cmd.stdout.strip().startswith("NVMLError_")


def test_venv_is_root_owned(host):
    venv = host.file("/opt/gpufleet/venv")
    assert venv.is_directory
    assert venv.user == "root"
