"""execution-environment.yml (AWX / Automation Controller) against what the tests run: the same ansible-core,
collection, Python and helm versions, and a definition ansible-builder accepts. `ansible-builder create` writes the
build context without building an image; introspection of the built collection finds its controller-side Python."""

import ast
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest
import yaml
from helpers import bundled_collection_version
from packaging.requirements import Requirement

ROOT = pathlib.Path(__file__).resolve().parents[2]
EE = yaml.safe_load((ROOT / "execution-environment.yml").read_text())
BUILDER = [sys.executable, "-m", "ansible_builder"]


def pins(path):
    """name -> version of every `name==version` requirement of a requirements file."""
    found = {}
    for line in pathlib.Path(path).read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            requirement = Requirement(line)
            found.update({requirement.name.lower(): s.version for s in requirement.specifier if s.operator == "=="})
    return found


TESTED = pins(ROOT / "requirements.txt")
COLLECTION_PYTHON = pins(ROOT / "meta" / "ee-requirements.txt")


@pytest.mark.parametrize("key", ["ansible_core", "ansible_runner"])
def test_ansible_pins_are_exact(key):
    assert re.fullmatch(r"[a-z-]+==[0-9][\w.]*", EE["dependencies"][key]["package_pip"])


def test_ansible_core_is_the_tested_one():
    assert EE["dependencies"]["ansible_core"]["package_pip"] == "ansible-core==%s" % TESTED["ansible-core"]


def test_collection_python_is_the_tested_python():
    assert COLLECTION_PYTHON and {name: TESTED.get(name) for name in COLLECTION_PYTHON} == COLLECTION_PYTHON


@pytest.mark.parametrize("entry", [c for c in EE["dependencies"]["galaxy"]["collections"] if "version" in c],
                         ids=lambda c: c["name"])
def test_collections_are_the_tested_ones(entry):
    assert entry["version"] == bundled_collection_version(entry["name"])


def test_every_collection_dependency_is_in_it():
    galaxy = yaml.safe_load((ROOT / "galaxy.yml").read_text())
    assert set(galaxy["dependencies"]) <= {c["name"] for c in EE["dependencies"]["galaxy"]["collections"]}


def test_helm_is_the_one_the_lab_runs():
    steps = "\n".join(EE["additional_build_steps"]["append_builder"])
    [version] = re.findall(r"ARG HELM_VERSION=(\S+)", steps)
    assert re.search(r"^require helm\.sh/helm/v3 %s$" % re.escape(version),
                     (ROOT / "tools" / "lab" / "helm" / "go.mod").read_text(), re.M)


def third_party_imports(paths):
    stdlib = set(sys.stdlib_module_names) | {"ansible", "ansible_collections", "__future__"}
    found = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            found |= {n.split(".")[0] for n in names} - stdlib
    return found


def test_the_controller_python_covers_every_import():
    """Everything plugins/ imports beyond ansible-core and the standard library is declared for the controller
    (meta/ee-requirements.txt, kubernetes.core's own) or installed on nodes by node_python."""
    node_python = yaml.safe_load((ROOT / "roles" / "node_python" / "defaults" / "main.yml").read_text())
    on_nodes = {re.split(r"[=<>]", r)[0].lower() for r in node_python["node_python_requirements"]}
    # Import name -> distribution; yaml and jinja2 come with ansible-core.
    distribution = {"PIL": "pillow", "pynvml": "nvidia-ml-py", "prometheus_client": "prometheus-client",
                    "yaml": "ansible-core", "jinja2": "ansible-core"}
    imports = third_party_imports(sorted((ROOT / "plugins").rglob("*.py")))
    declared = set(COLLECTION_PYTHON) | on_nodes | {"ansible-core"}
    assert imports and {distribution.get(n, n) for n in imports} <= declared, imports


@pytest.fixture(scope="module")
def collection_tarball(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(["ansible-galaxy", "collection", "build", "--output-path", str(out), str(ROOT)], check=True,
                   capture_output=True)
    [tarball] = out.glob("gpufleet-vgpu-*.tar.gz")
    return tarball


def test_ansible_builder_creates_the_build_context(tmp_path, collection_tarball):
    shutil.copy(ROOT / "execution-environment.yml", tmp_path)
    (tmp_path / ".build" / "ee").mkdir(parents=True)
    shutil.copy(collection_tarball, tmp_path / ".build" / "ee" / "gpufleet-vgpu.tar.gz")
    subprocess.run(BUILDER + ["create", "--file", str(tmp_path / "execution-environment.yml"),
                              "--context", str(tmp_path / "context")], check=True, capture_output=True)
    containerfile = (tmp_path / "context" / "Containerfile").read_text()
    assert 'ARG ANSIBLE_INSTALL_REFS="%s %s"' % (EE["dependencies"]["ansible_core"]["package_pip"],
                                                 EE["dependencies"]["ansible_runner"]["package_pip"]) in containerfile
    assert "go install helm.sh/helm/v3/cmd/helm@$HELM_VERSION" in containerfile
    assert "COPY --from=builder /usr/local/bin/helm /usr/local/bin/helm" in containerfile
    assert (tmp_path / "context" / "_build" / "gpufleet" / "gpufleet-vgpu.tar.gz").is_file()
    galaxy = yaml.safe_load((tmp_path / "context" / "_build" / "requirements.yml").read_text())
    assert {"name": "/build/gpufleet/gpufleet-vgpu.tar.gz", "type": "file"} in galaxy["collections"]


def test_introspection_finds_the_collections_controller_needs(tmp_path, collection_tarball):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(tmp_path))
    subprocess.run(["ansible-galaxy", "collection", "install", "--force", "--no-deps", "-p", str(tmp_path),
                    str(collection_tarball)], check=True, capture_output=True, env=env)
    out = subprocess.run(BUILDER + ["introspect", "--sanitize", str(tmp_path)], check=True, capture_output=True,
                         text=True).stdout
    data = yaml.safe_load(out)
    assert {re.split(r"\s", line)[0] for line in data["python"]} == {
        "%s==%s" % item for item in COLLECTION_PYTHON.items()}
    assert any(line.startswith("openssh-clients [platform:rpm]") for line in data["system"])
