"""The project's documents and recorded figures speak of the project, not of the machine that produced them: no
checkout, home or temporary directory of a particular machine (paths are relative to the repository, the cache is
$GPUFLEET_CACHE, bench.py's `portable` writes them so)."""

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
# A path that only exists on the machine that wrote it. /var/cache/gpufleet is the documented default cache, and
# paths on test hosts, nodes or a user's control host (/etc/..., /srv/..., /root/.kube/config) are the project's own.
MACHINE_PATH = re.compile(r"(?<![\w.$~-])/(?:work|home|tmp)/[\w.+-]+")
DOCUMENTS = sorted(
    [p for p in (ROOT / "docs").rglob("*") if p.is_file() and p.suffix in (".md", ".json", ".log", ".txt")]
    + [ROOT / "README.md"] + sorted((ROOT / "roles").glob("*/README.md")) + sorted((ROOT / "tools").glob("*/README.md")))


def machine_paths(text):
    return sorted(set(MACHINE_PATH.findall(text)))


@pytest.mark.parametrize("text, found", [
    ('"lab_up": ["up", "--nodes", "/work/main/docs/benchmarks/b3-work/n10/nodes.yml"]', ["/work/main"]),
    ("raw figures: /tmp/cold/cache/lab-bin", ["/tmp/cold"]),
    ("export KUBECONFIG=/home/ci/lab/kubeconfig", ["/home/ci"]),
    ("kubeconfig: /root/.kube/config", []),
    ("cache in $GPUFLEET_CACHE/lab-bin, default /var/cache/gpufleet", []),
    ("docs/benchmarks/b3-work/n10/nodes.yml and /etc/containerd/config.toml", []),
    ("~/work/x and ./tmp/y", []),
])
def test_machine_path_pattern(text, found):
    assert machine_paths(text) == found


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_machine_paths(path):
    assert not machine_paths(path.read_text(errors="replace")), path
