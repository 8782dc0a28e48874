"""The collection's declared dependencies must be satisfiable by the pinned `ansible` bundle."""

import pathlib

import pytest
import yaml
from ansible.galaxy.dependency_resolution.versioning import meets_requirements
from helpers import bundled_collection_version

ROOT = pathlib.Path(__file__).resolve().parents[2]
GALAXY = yaml.safe_load((ROOT / "galaxy.yml").read_text())


@pytest.mark.parametrize("fqcn", sorted(GALAXY["dependencies"]))
def test_dependency_satisfied_by_pinned_bundle(fqcn):
    version = bundled_collection_version(fqcn)
    assert meets_requirements(version, GALAXY["dependencies"][fqcn]), (fqcn, version)


def test_identity():
    assert (GALAXY["namespace"], GALAXY["name"]) == ("gpufleet", "vgpu")


def test_requirements_are_exact_pins():
    lines = [
        line.split("#")[0].strip()
        for line in (ROOT / "requirements.txt").read_text().splitlines()
        if line.split("#")[0].strip()
    ]
    assert lines
    assert all("==" in line for line in lines), [line for line in lines if "==" not in line]
