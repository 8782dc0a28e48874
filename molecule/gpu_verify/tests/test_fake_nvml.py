"""The real pynvml in node_python's virtualenv finds the fake libnvidia-ml.so.1 through the normal loader path."""

import json

SCRIPT = (
    "import json, pynvml\n"
    "pynvml.nvmlInit()\n"
    "n = pynvml.nvmlDeviceGetCount()\n"
    "print(json.dumps({'count': n, 'name': pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))}))\n"
)


def test_pynvml_reads_the_fixture(host):
    fact = json.loads(host.check_output("/etc/ansible/facts.d/gpufleet_state.fact"))
    interpreter = fact["node_python"]["data"]["interpreter"]
    out = json.loads(host.check_output("%s -c %s", interpreter, SCRIPT))
    assert out["count"] == 5
    assert out["name"].startswith("NVIDIA GeForce RTX 40")


def test_library_is_in_the_loader_cache(host):
    assert "libnvidia-ml.so.1" in host.check_output("ldconfig -p")
