"""Table tests for the containerd config editor on real-world configuration files."""

import difflib
import pathlib

import pytest
import tomlkit

from ansible_collections.gpufleet.vgpu.plugins.module_utils import _containerd_config as cc

FIXTURES = pathlib.Path(__file__).resolve().parents[3] / "fixtures" / "containerd"


def load(name):
    return (FIXTURES / name).read_text()


def cri(doc, version):
    return doc["plugins"][cc.CRI_RUNTIME_PLUGIN[version]]


# (fixture, config version, runc's SystemdCgroup, extra runtimes kept)
CONFIGS = [
    ("containerd-1.6-default.toml", 2, False, []),
    ("containerd-1.7-default.toml", 2, False, []),
    ("containerd-2.1-default.toml", 3, False, []),
    ("kubespray-v3.toml", 3, True, []),
    ("nvidia-ctk-edited-1.6.toml", 2, False, []),
    ("imports-dropin-v2.toml", 2, True, []),
    ("user-comments-extra-runtimes-v2.toml", 2, True, ["kata", "runsc"]),
]


@pytest.mark.parametrize(("name", "version", "systemd", "kept"), CONFIGS, ids=[c[0] for c in CONFIGS])
def test_apply_makes_nvidia_default_and_is_idempotent(name, version, systemd, kept):
    before = load(name)
    after, changes, got_version, dummy = cc.apply(before)
    assert got_version == version
    assert changes
    doc = tomlkit.parse(after)
    ctr = cri(doc, version)["containerd"]
    assert ctr["default_runtime_name"] == "nvidia"
    nvidia = ctr["runtimes"]["nvidia"]
    assert nvidia["runtime_type"] == "io.containerd.runc.v2"
    assert nvidia["options"]["BinaryName"] == "/usr/bin/nvidia-container-runtime"
    assert nvidia["options"]["SystemdCgroup"] is systemd
    # runc itself is left exactly as it was (its own BinaryName, e.g. kubespray's /usr/local/bin/runc, stays).
    assert ctr["runtimes"]["runc"] == cri(tomlkit.parse(before), version)["containerd"]["runtimes"]["runc"]
    for runtime in kept:
        assert runtime in ctr["runtimes"]
    again, changes2, dummy, dummy2 = cc.apply(after)
    assert changes2 == [] and again == after


@pytest.mark.parametrize("name", [c[0] for c in CONFIGS])
def test_untouched_lines_are_kept_byte_for_byte(name):
    before = load(name)
    after, dummy, dummy2, dummy3 = cc.apply(before)
    removed = [line for line in difflib.ndiff(before.splitlines(), after.splitlines()) if line.startswith("- ")]
    # The only line that may go is the old default_runtime_name (and the old SystemdCgroup of an nvidia-ctk edit,
    # which inherits runc's value and so stays identical).
    assert all("default_runtime_name" in line for line in removed), removed


def test_comments_survive():
    after, dummy, dummy2, dummy3 = cc.apply(load("user-comments-extra-runtimes-v2.toml"))
    for comment in ("# Managed by hand on rig01", "# big NVMe, see ticket OPS-1234", "# Kata for untrusted notebooks.",
                    "# kubelet uses the systemd cgroup driver", "# pinned for the air-gapped mirror"):
        assert comment in after


def test_nvidia_ctk_edit_only_changes_the_default():
    before = load("nvidia-ctk-edited-1.6.toml")
    dummy, changes, dummy2, dummy3 = cc.apply(before)
    assert len(changes) == 1 and changes[0].startswith('plugins."io.containerd.grpc.v1.cri".containerd.default_runtime_name')


def test_imports_are_reported():
    dummy, dummy2, dummy3, imports = cc.apply(load("imports-dropin-v2.toml"))
    assert imports == ["/etc/containerd/conf.d/*.toml"]


def test_runtime_class_mode_leaves_or_restores_the_default():
    before = load("containerd-1.7-default.toml")
    after, dummy, dummy2, dummy3 = cc.apply(before, set_as_default=False)
    assert tomlkit.parse(after)["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["default_runtime_name"] == "runc"
    defaulted, dummy, dummy2, dummy3 = cc.apply(before)
    restored, changes, dummy2, dummy3 = cc.apply(defaulted, set_as_default=False)
    assert tomlkit.parse(restored)["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["default_runtime_name"] == "runc"
    assert len(changes) == 1


@pytest.mark.parametrize(("name", "version"), [("containerd-1.7-default.toml", 2), ("containerd-2.1-default.toml", 3)])
def test_cdi_switch(name, version):
    after, dummy, dummy2, dummy3 = cc.apply(load(name), enable_cdi=False)
    assert cri(tomlkit.parse(after), version)["enable_cdi"] is False
    unchanged, changes, dummy2, dummy3 = cc.apply(after, enable_cdi=None)
    assert changes == []


def test_inheritance_follows_runc():
    first, dummy, dummy2, dummy3 = cc.apply(load("containerd-1.6-default.toml"))
    flipped = first.replace("SystemdCgroup = false", "SystemdCgroup = true", 1)  # runc's table comes first
    second, changes, dummy2, dummy3 = cc.apply(flipped)
    nvidia = tomlkit.parse(second)["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["nvidia"]
    assert nvidia["options"]["SystemdCgroup"] is True
    assert any("SystemdCgroup" in c for c in changes)


def test_runtime_options_win():
    after, dummy, dummy2, dummy3 = cc.apply(load("kubespray-v3.toml"), runtime_options={"SystemdCgroup": False})
    nvidia = tomlkit.parse(after)["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"]["nvidia"]
    assert nvidia["options"]["SystemdCgroup"] is False
    dummy, changes, dummy2, dummy3 = cc.apply(after, runtime_options={"SystemdCgroup": False})
    assert changes == []


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (None, "missing or empty"),
        ("  \n", "missing or empty"),
        (load("containerdio-cri-disabled.toml"), "has no 'version' key"),
        ('version = 2\ndisabled_plugins = ["io.containerd.grpc.v1.cri"]\n', "disables the CRI plugin"),
        ('version = 2\ndisabled_plugins = ["cri"]\n', "disables the CRI plugin"),
        (load("containerd-1.6-default.toml"), None),
        (load("kubespray-v3.toml"), None),
    ],
)
def test_base_replacement_reason(text, reason):
    got = cc.base_replacement_reason(text)
    assert (got is None) if reason is None else got.startswith(reason)


@pytest.mark.parametrize(
    ("output", "version", "config_version"),
    [
        ("containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3", "1.6.20~ds1", 2),
        ("containerd github.com/containerd/containerd 1.7.24~ds1 1.7.24~ds1-6+deb13u1", "1.7.24~ds1", 2),
        ("containerd github.com/containerd/containerd/v2 2.1.9+unknown ", "2.1.9+unknown", 3),
        ("containerd containerd.io v1.7.27 05044ec0a9a75232cad458027ca83437aae3f4da", "1.7.27", 2),
    ],
)
def test_versions(output, version, config_version):
    assert cc.parse_containerd_version(output) == version
    assert cc.config_version_for(version) == config_version


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: cc.config_version_for("1.5.13"), "too old"),
        (lambda: cc.parse_containerd_version("no version here"), "cannot read"),
        (lambda: cc.apply("version = 1\n"), "config version 1 is not supported"),
        (lambda: cc.apply("version = 2\n[plugins\n"), "not valid TOML"),
        (lambda: cc.apply("version = 2\n", runtime_name="runc"), "must differ"),
    ],
)
def test_errors(call, message):
    with pytest.raises(cc.ConfigError, match=message):
        call()


def test_runtime_settings():
    after, changes, dummy, dummy2 = cc.apply(load("containerd-1.7-default.toml"),
                                             runtime_settings={"privileged_without_host_devices": True})
    nvidia = tomlkit.parse(after)["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["nvidia"]
    assert nvidia["privileged_without_host_devices"] is True
    dummy, changes, dummy2, dummy3 = cc.apply(after, runtime_settings={"privileged_without_host_devices": True})
    assert changes == []
    with pytest.raises(cc.ConfigError, match="must not set"):
        cc.apply(after, runtime_settings={"options": {}})
