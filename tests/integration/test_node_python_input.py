"""Bad input to node_python fails with a message naming the variable, before anything on the host changes."""

import json
import pathlib

import pytest

from helpers import failed_messages, run_playbook

PLAYBOOK = pathlib.Path(__file__).parent / "playbooks" / "node_python.yml"

CASES = [
    ("relative venv", {"node_python_venv_path": "relative/venv"}, "node_python_venv_path"),
    ("relative wheelhouse", {"node_python_wheelhouse": "wheels"}, "node_python_wheelhouse"),
    ("missing wheelhouse", {"node_python_wheelhouse": "/nonexistent/gpufleet-wheels"}, "node_python_wheelhouse"),
    ("unpinned requirement", {"node_python_requirements": ["nvidia-ml-py"]}, "node_python_requirements"),
    ("wrong type", {"node_python_install_os_packages": "maybe"}, "node_python_install_os_packages"),
    ("range instead of a pin", {"node_python_requirements": ["nvidia-ml-py>=12"]}, "node_python_requirements"),
    ("compatible release is no pin", {"node_python_requirements": ["tomlkit~=0.15"]}, "node_python_requirements"),
    ("wildcard is no pin", {"node_python_requirements": ["tomlkit==0.*"]}, "node_python_requirements"),
    ("pin without hashes", {"node_python_requirements": ["nvidia-ml-py==13.615.71", "tomlkit==0.15.2",
                                                         "jmespath==1.0.1"]}, "jmespath"),
    ("malformed hash", {"node_python_requirement_hashes": {"nvidia-ml-py": ["md5:abc"], "tomlkit": ["sha256:00"]}},
     "md5:abc"),
]


@pytest.mark.parametrize(("case", "extra", "variable"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_fails_before_any_change(case, extra, variable, tmp_path):
    varfile = tmp_path / "vars.json"
    varfile.write_text(json.dumps(extra))
    rc, out, dummy = run_playbook(PLAYBOOK, "-e", "@%s" % varfile)
    assert rc != 0, case
    msgs = failed_messages(out)
    assert msgs, "no task failed for %s" % case
    assert variable in msgs[0], msgs[0]
    stats = out["stats"]["localhost"]
    assert stats["changed"] == 0, stats
    assert stats["failures"] == 1, stats
