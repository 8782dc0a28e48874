"""Table tests for the converged-state stamps on the node: spec checks, observation, drift and the fact."""

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.vgpu.plugins.module_utils import _node_state as ns


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ("x", "spec must be a dict"),
        ({"file": ["/a"]}, "unknown spec keys: file"),
        ({"files": ["relative"]}, "files must be absolute paths"),
        ({"trees": "/etc"}, "trees must be a list"),
        ({"packages": ["a"]}, "package_manager must be one of rpm, dpkg"),
        ({"packages": ["a"], "package_manager": "apk"}, "package_manager must be one of"),
        ({"services": [""]}, "services must be a list of non-empty strings"),
    ],
)
def test_normalize_spec_rejects(spec, error):
    with pytest.raises(ValueError, match=error):
        ns.normalize_spec(spec)


def test_normalize_spec_sorts_and_drops_the_manager_without_packages():
    spec = ns.normalize_spec({"files": ["/b", "/a", "/b"], "package_manager": "rpm"})
    assert spec == {"files": ["/a", "/b"], "trees": [], "listings": [], "packages": [], "services": [],
                    "package_manager": None}


@pytest.mark.parametrize(
    ("output", "names", "expected"),
    [
        ("dkms 0:3.1.5-1.el9.x86_64\npackage nvidia-driver is not installed\n", ["dkms", "nvidia-driver"],
         {"dkms": ["0:3.1.5-1.el9.x86_64"], "nvidia-driver": None}),
        # Two kernel-devel versions side by side: both count, in a stable order.
        ("kernel-devel 0:5.14.0-503.el9.x86_64\nkernel-devel 0:5.14.0-427.el9.x86_64\n", ["kernel-devel"],
         {"kernel-devel": ["0:5.14.0-427.el9.x86_64", "0:5.14.0-503.el9.x86_64"]}),
        ("", ["a"], {"a": None}),
    ],
)
def test_parse_rpm(output, names, expected):
    assert ns.parse_rpm(output, names) == expected


@pytest.mark.parametrize(
    ("output", "names", "expected"),
    [
        ("containerd 1.6.20~ds1-1+b1 ii \n", ["containerd"], {"containerd": ["1.6.20~ds1-1+b1"]}),
        # Removed with its configuration left behind: not installed.
        ("nvidia-smi 535.216.01-1 rc \n", ["nvidia-smi"], {"nvidia-smi": None}),
        ("libc6:amd64 2.36-9 ii \n", ["libc6"], {"libc6": ["2.36-9"]}),
    ],
)
def test_parse_dpkg(output, names, expected):
    assert ns.parse_dpkg(output, names) == expected


def test_parse_systemctl_show_keeps_the_order_asked():
    output = ("Id=containerd.service\nActiveState=active\nUnitFileState=enabled\n\n"
              "Id=nvidia-persistenced.service\nActiveState=inactive\nUnitFileState=disabled\n")
    assert ns.parse_systemctl_show(output, ["containerd.service", "nvidia-persistenced.service", "gone.service"]) == {
        "containerd.service": "enabled/active", "nvidia-persistenced.service": "disabled/inactive", "gone.service": None}


def test_observe_files_trees_and_listings(tmp_path):
    conf = tmp_path / "etc"
    (conf / "conf.d").mkdir(parents=True)
    (conf / "config.toml").write_text("version = 2\n")
    (conf / "conf.d" / "a.toml").write_text("a\n")
    (tmp_path / "modules" / "5.14.0").mkdir(parents=True)
    spec = ns.normalize_spec({"files": [str(conf / "config.toml"), str(tmp_path / "absent")],
                              "trees": [str(conf)], "listings": [str(tmp_path / "modules"), str(tmp_path / "none*")]})
    first = ns.observe(spec, run=lambda argv: pytest.fail("no package or service query expected"))
    assert first["files"][str(tmp_path / "absent")] is None
    assert first["files"][str(conf / "config.toml")].endswith(" 644")
    assert first["listings"] == {str(tmp_path / "modules"): {str(tmp_path / "modules"): ["5.14.0"]},
                                 str(tmp_path / "none*"): None}
    assert ns.drift(first, ns.observe(spec)) == []

    # A new drop-in, a mode change and a new kernel all show; the file outside the spec does not.
    (conf / "conf.d" / "b.toml").write_text("b\n")
    os.chmod(conf / "config.toml", 0o600)
    (tmp_path / "modules" / "5.14.1").mkdir()
    (tmp_path / "unwatched").write_text("x")
    assert ns.drift(first, ns.observe(spec)) == [
        "file %s changed" % (conf / "config.toml"),
        "tree %s changed" % conf,
        "listing %s changed" % (tmp_path / "modules"),
    ]


def test_a_tree_too_large_to_watch_is_always_drift(tmp_path, monkeypatch):
    monkeypatch.setattr(ns, "MAX_TREE_FILES", 2)
    for name in "abc":
        (tmp_path / name).write_text(name)
    spec = ns.normalize_spec({"trees": [str(tmp_path)]})
    observed = ns.observe(spec)
    assert observed["trees"][str(tmp_path)] == ns.TOO_MANY_FILES
    assert ns.drift(observed, ns.observe(spec)) == ["tree %s has more than 2 files, too many to watch" % tmp_path]


def test_observe_queries_packages_and_services_once_each():
    calls = []

    def run(argv):
        calls.append(argv)
        return "dkms 0:3.1.5-1.x86_64\n" if argv[0] == "rpm" else "Id=containerd.service\nActiveState=active\nUnitFileState=enabled\n"

    spec = ns.normalize_spec({"packages": ["dkms", "nvidia-driver"], "package_manager": "rpm",
                              "services": ["containerd.service"]})
    observed = ns.observe(spec, run)
    assert observed["packages"] == {"dkms": ["0:3.1.5-1.x86_64"], "nvidia-driver": None}
    assert observed["services"] == {"containerd.service": "enabled/active"}
    assert [argv[0] for argv in calls] == ["rpm", "systemctl"]


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        ({"files": {"/a": "x"}}, {"files": {"/a": "x"}}, []),
        ({"files": {"/a": "x"}}, {"files": {"/a": None}}, ["file /a is gone"]),
        ({"files": {"/a": None}}, {"files": {"/a": "x"}}, ["file /a appeared"]),
        ({"packages": {"p": ["1"]}}, {"packages": {"p": ["2"]}}, ["package p changed"]),
        ({"services": {"s": "enabled/active"}}, {"services": {"s": "enabled/failed"}}, ["service s changed"]),
        ({"files": {"/%02d" % i: "x" for i in range(12)}}, {"files": {}},
         ["file /%02d is gone" % i for i in range(10)] + ["and 2 more"]),
    ],
)
def test_drift(before, after, expected):
    assert ns.drift(before, after) == expected


def write_stamp(directory, name, observed, digest="d1", spec=None):
    directory.mkdir(parents=True, exist_ok=True)
    stamp = ns.build_stamp(name, digest, spec or {"files": sorted(observed.get("files", {}))}, {"k": 1},
                           {"files": {}, "trees": {}, "listings": {}, "packages": {}, "services": {}, **observed})
    (directory / (name + ".json")).write_text(json.dumps(stamp))


def test_the_fact_reports_intact_drifted_and_unreadable_stamps(tmp_path):
    watched = tmp_path / "watched"
    watched.write_text("one\n")
    stamps = tmp_path / "stamps"
    write_stamp(stamps, "good", {"files": {str(watched): ns.observe_file(str(watched))}})
    write_stamp(stamps, "drifted", {"files": {str(watched): "0" * 64 + " 644"}})
    (stamps / "broken.json").write_text("{")
    # The fact is the module_utils file run as a script, as setup runs it (no arguments: the default directory).
    script = tmp_path / "gpufleet_state.fact"
    source = open(ns.__file__, encoding="utf-8").read().replace(ns.STAMP_DIR, str(stamps))
    script.write_text("#!%s\n%s" % (sys.executable, source))
    script.chmod(0o755)
    report = json.loads(subprocess.run([str(script)], capture_output=True, text=True, check=True).stdout)
    assert report["good"] == {"digest": "d1", "intact": True, "drift": [], "data": {"k": 1}}
    assert report["drifted"]["intact"] is False
    assert report["drifted"]["drift"] == ["file %s changed" % watched]
    assert report["broken"]["intact"] is False and report["broken"]["digest"] is None
