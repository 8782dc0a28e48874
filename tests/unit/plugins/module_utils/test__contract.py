"""The names roles share live in module_utils/_contract.py and nowhere else in the code: a name changes in one
place."""

import ast
import pathlib
import re

import pytest
import yaml

from ansible_collections.gpufleet.vgpu.plugins.module_utils import _contract

ROOT = pathlib.Path(__file__).resolve().parents[4]
# ConfigMap names and gpufleet's annotation and label keys.
SHARED = re.compile(r"volcano-vgpu-(device|node)-config|gpufleet\.(io|vgpu)/")


def code_strings(path):
    """The string constants of a Python file's code: docstrings and the DOCUMENTATION, EXAMPLES and RETURN of
    plugins (their documentation) left out."""
    tree = ast.parse(path.read_text())
    skip = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            skip.add(id(body[0].value))
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") in ("DOCUMENTATION", "EXAMPLES", "RETURN")
                                                for t in node.targets):
            skip.add(id(node.value))
    return [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in skip]


def yaml_code(path):
    """A role or playbook YAML file without its comments (documentation), as text."""
    return "\n".join(line.split(" #")[0] for line in path.read_text().splitlines() if not line.lstrip().startswith("#"))


CODE = sorted([p for p in (ROOT / "plugins").rglob("*.py") if p.name != "_contract.py"]
              + list((ROOT / "roles").glob("*/tasks/*.yml")) + list((ROOT / "roles").glob("*/vars/*.yml"))
              + list((ROOT / "roles").glob("*/handlers/*.yml")) + list((ROOT / "playbooks").rglob("*.yml")))


@pytest.mark.parametrize("path", CODE, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_shared_name_outside_the_contract(path):
    texts = code_strings(path) if path.suffix == ".py" else [yaml_code(path)]
    found = sorted({m.group(0) for text in texts for m in SHARED.finditer(text)})
    assert not found, found


@pytest.mark.parametrize("name, valid", [
    ("rig01", True), ("rig01.k8s.local", True), ("a" * 253, True),
    ("Rig01", False), ("rig_01", False), ("-rig", False), ("rig-", False), ("", False), ("a" * 254, False), (None, False),
])
def test_valid_node_name(name, valid):
    assert _contract.valid_node_name(name) is valid


@pytest.mark.parametrize("data, factor", [
    ({"device-config.yaml": "nvidia:\n  gpuMemoryFactor: 3\n"}, 3),
    ({"device-config.yaml": "nvidia:\n  gpuMemoryFactor: 0\n"}, None),
    ({"device-config.yaml": ": not yaml: ["}, None),
    ({}, None),
])
def test_memory_factor_of_a_device_configmap(data, factor):
    assert _contract.memory_factor({"data": data}) == factor
    assert _contract.memory_factor(None) is None


def test_the_lookup_names_every_shared_name():
    assert set(_contract.names()) >= {"device_configmap", "node_configmap", "default_memory", "scheduler_resync",
                                      "cordoned_by"}
    assert all(SHARED.search(value) or value in ("device-config.yaml", "config.json", "device-plugin",
                                                 "device-plugin-monitor", "app.kubernetes.io/managed-by")
               for value in _contract.names().values())
    assert yaml.safe_load("x: 1")  # PyYAML, which device_config() needs, is there
