"""docs/architecture.md against the tree: every controller-side and shipped Python module and every action is
named there, and the layer rules hold (what ships to hosts never imports controller-only code or Ansible beyond
module_utils)."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "architecture.md").read_text()
SHIPPED = sorted((ROOT / "plugins" / "module_utils").glob("_*.py"))
CONTROLLER = sorted((ROOT / "plugins" / "plugin_utils").glob("_*.py"))
ACTIONS = sorted(p for p in (ROOT / "plugins" / "action").glob("*.py") if p.name != "__init__.py")


@pytest.mark.parametrize("path", SHIPPED + CONTROLLER, ids=lambda p: p.name)
def test_every_module_is_on_the_map(path):
    assert path.stem in DOC, "%s is not in docs/architecture.md" % path.name


@pytest.mark.parametrize("path", ACTIONS, ids=lambda p: p.name)
def test_every_action_is_on_the_map(path):
    assert path.stem in DOC, "action %s is not in docs/architecture.md" % path.stem


def imports(path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            yield node.module
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)


@pytest.mark.parametrize("path", SHIPPED + sorted((ROOT / "plugins" / "modules").glob("*.py")), ids=lambda p: p.name)
def test_what_ships_to_hosts_imports_no_controller_code(path):
    found = [name for name in imports(path) if "plugin_utils" in name
             or (name.startswith("ansible.") and not name.startswith("ansible.module_utils"))]
    assert not found, found


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_module_utils_ship_without_ansible_beyond_module_utils(path):
    found = [name for name in imports(path) if name.startswith("ansible") and not name.startswith(
        ("ansible.module_utils", "ansible_collections.gpufleet.vgpu.plugins.module_utils",
         "ansible_collections.kubernetes.core.plugins.module_utils"))]
    assert not found, found
