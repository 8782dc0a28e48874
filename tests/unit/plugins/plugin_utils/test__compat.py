"""Volcano x volcano-vgpu-device-plugin compatibility: the table's verdicts, and the README that shows it."""

import pathlib

import pytest

from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _compat as compat

ROOT = pathlib.Path(__file__).resolve().parents[4]


@pytest.mark.parametrize("volcano, plugin, verdict", [
    ("v1.15.1", "v1.12.0", compat.WORKS),            # gpufleet's defaults, run in the lab
    ("1.15.1", "1.12.0", compat.WORKS),              # chart version without v
    ("v1.16.0", "v1.12.0", compat.WORKS),
    ("v1.15.0", "v1.12.0", compat.CAVEAT),           # handshake at 5 requests/s (volcano-sh/volcano#5361)
    ("v1.10.0", "v1.11.0", compat.CAVEAT),
    ("v1.14.4", "v1.12.0", compat.WORKS),            # backport of the handshake removal
    ("v1.14.3", "v1.12.0", compat.CAVEAT),
    ("v1.15.0", "v1.13.0", compat.BROKEN),           # plugin without handshake, scheduler still asking for it
    ("v1.14.3", "v1.12.1", compat.BROKEN),
    ("v1.10.0", "v1.13.0", compat.BROKEN),
    ("v1.15.1", "v1.13.0", compat.WORKS),
    ("v1.14.4", "v1.13.0", compat.WORKS),
    ("docker.io/volcanosh/vc-scheduler:v1.15.1", "v1.12.0", compat.WORKS),
    ("latest", "v1.12.0", "unknown"),
    ("v1.15.1", "sha256:abc", "unknown"),
])
def test_verdicts(volcano, plugin, verdict):
    result = compat.check(volcano, plugin)
    assert result["verdict"] == verdict, result
    assert result["why"]
    if verdict != "unknown":
        assert result["source"]


def test_every_row_names_a_source_and_the_ranges_do_not_overlap():
    for row in compat.TABLE:
        assert row[4], row
    probes = [(1, minor, patch) for minor in range(9, 18) for patch in range(0, 6)]
    plugins = [(1, 11, 0), (1, 12, 0), (1, 12, 1), (1, 13, 0)]
    for volcano in probes:
        for plugin in plugins:
            rows = [r for r in compat.TABLE if compat._within(volcano, r[0]) and compat._within(plugin, r[1])]  # pylint: disable=protected-access
            assert len(rows) == 1, (volcano, plugin, rows)


def test_device_plugin_readme_shows_the_table():
    readme = (ROOT / "roles" / "device_plugin" / "README.md").read_text()
    assert compat.markdown() in readme
