"""Table tests for the containerd config editor on real-world configuration files."""

import difflib
import fnmatch
import json
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
    ("kubespray-binaryname-lowercase-v3.toml", 3, True, []),
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


def binary_names(options):
    return {k: v for k, v in options.items() if k.lower() == "binaryname"}


def test_base_runtimes_lowercase_binary_name_is_not_carried():
    """containerd 2.x may decode a copied 'binaryName = /usr/local/bin/runc' as the nvidia runtime's BinaryName."""
    after, dummy, dummy2, dummy3 = cc.apply(load("kubespray-binaryname-lowercase-v3.toml"))
    runtimes = tomlkit.parse(after)["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"]
    assert binary_names(runtimes["nvidia"]["options"]) == {"BinaryName": "/usr/bin/nvidia-container-runtime"}
    assert binary_names(runtimes["runc"]["options"]) == {"binaryName": "/usr/local/bin/runc"}


def test_a_stray_binary_name_in_the_nvidia_runtime_is_removed():
    before = load("kubespray-v3.toml").replace(
        '            BinaryName = "/usr/local/bin/runc"\n',
        '            BinaryName = "/usr/local/bin/runc"\n'
        '        [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia]\n'
        '          runtime_type = "io.containerd.runc.v2"\n'
        '          [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia.options]\n'
        '            binaryName = "/usr/local/bin/runc"\n'
        '            BinaryName = "/usr/bin/nvidia-container-runtime"\n', 1)
    assert "runtimes.nvidia.options]" in before
    after, changes, dummy, dummy2 = cc.apply(before)
    nvidia = tomlkit.parse(after)["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"]["nvidia"]
    assert binary_names(nvidia["options"]) == {"BinaryName": "/usr/bin/nvidia-container-runtime"}
    assert any("removed" in c and "binaryName" in c for c in changes), changes
    assert cc.apply(after)[1] == []


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


@pytest.mark.parametrize(("text", "named"), [
    (load("versionless-kata-v1.toml"), ["root", "plugins.cri.containerd.runtimes.kata.runtime_type",
                                        'plugins.cri.registry.mirrors."docker.io".endpoint']),
    ('version = 2\ndisabled_plugins = ["cri"]\n[plugins."io.containerd.runtime.v1.linux"]\n  shim_debug = true\n',
     ['plugins."io.containerd.runtime.v1.linux".shim_debug']),
])
def test_replacing_a_file_that_says_more_is_refused_naming_what_would_be_lost(text, named):
    with pytest.raises(cc.ConfigError) as caught:
        cc.base_replacement_reason(text)
    for path in named:
        assert path in str(caught.value)
    assert "containerd config migrate" in str(caught.value)


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


# Shapes of 'containerd config dump' (1.7: grpc.v1.cri; 2.x: cri.v1.runtime), drop-ins merged.
DUMP_17 = """version = 2
[plugins."io.containerd.grpc.v1.cri".containerd]
  default_runtime_name = "%s"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
    BinaryName = "/usr/bin/nvidia-container-runtime"
"""
DUMP_2X = """version = 3
[plugins.'io.containerd.cri.v1.runtime'.containerd]
  default_runtime_name = 'nvidia'
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia.options]
    %s
"""


@pytest.mark.parametrize(("dump", "set_as_default", "problem"), [
    (DUMP_17 % "nvidia", True, None),
    (DUMP_17 % "runc", False, None),
    # nvidia-ctk's conf.d drop-in (or any import) putting the default back.
    (DUMP_17 % "runc", True, "the effective default_runtime_name is 'runc', not 'nvidia'"),
    (DUMP_2X % "BinaryName = '/usr/bin/nvidia-container-runtime'", True, None),
    (DUMP_2X % "BinaryName = '/usr/bin/nvidia-container-runtime'\n    binaryName = '/usr/local/bin/runc'", True,
     "effectively runs BinaryName = /usr/bin/nvidia-container-runtime, binaryName = /usr/local/bin/runc"),
    (DUMP_2X % "SystemdCgroup = true", True, "runc's default binary (no BinaryName)"),
    ('version = 3\n[plugins."io.containerd.cri.v1.images"]\n', True, "the CRI plugin has no runtime settings"),
    ('version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\ndefault_runtime_name = "nvidia"\n', True,
     "no runtime 'nvidia'"),
    ("version = [", True, "cannot read 'containerd config dump'"),
])
def test_effective_problems(dump, set_as_default, problem):
    problems = cc.effective_problems(dump, set_as_default=set_as_default)
    if problem is None:
        assert problems == []
    else:
        assert any(problem in p for p in problems), problems


# CDI mode: the dump's CRI table with enable_cdi / cdi_spec_dirs as 1.7 and 2.1 print them.
CDI_17 = """version = 2
[plugins."io.containerd.grpc.v1.cri"]
  %s
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "%s"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
      BinaryName = "/usr/bin/nvidia-container-runtime"
"""
CDI_2X = """version = 3
[plugins.'io.containerd.cri.v1.runtime']
  enable_cdi = true
  cdi_spec_dirs = %s
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = 'runc'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia.options]
      BinaryName = '/usr/bin/nvidia-container-runtime'
"""


@pytest.mark.parametrize(("dump", "problem"), [
    (CDI_17 % ('enable_cdi = true\n  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]', "runc"), None),
    (CDI_2X % "['/etc/cdi', '/var/run/cdi']", None),
    # /var/run is /run on systemd distributions.
    (CDI_2X % "['/run/cdi/']", None),
    # 1.7's default: CDI off; a drop-in that turned it off again.
    (CDI_17 % ('enable_cdi = false\n  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]', "runc"),
     "the effective enable_cdi is False, not true"),
    (CDI_17 % ('cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]', "runc"), "the effective enable_cdi is None"),
    (CDI_2X % "['/etc/cdi']", "cdi_spec_dirs (/etc/cdi) leave out /var/run/cdi"),
    (CDI_2X % "[]", "cdi_spec_dirs (none) leave out /var/run/cdi"),
    # A drop-in that still makes nvidia the default hands the GPUs to every container.
    (CDI_17 % ('enable_cdi = true\n  cdi_spec_dirs = ["/var/run/cdi"]', "nvidia"),
     "the effective default_runtime_name is 'nvidia', which would give every container the GPUs in CDI mode"),
])
def test_effective_problems_in_cdi_mode(dump, problem):
    problems = cc.effective_problems(dump, set_as_default=False, enable_cdi=True)
    if problem is None:
        assert problems == []
    else:
        assert any(problem in p for p in problems), problems


@pytest.mark.parametrize(("version", "problem"), [
    ("1.6.20~ds1", "containerd 1.6.20~ds1 cannot inject CDI devices from the CRI (1.7.2 or newer is needed)"),
    ("1.7.1", "cannot inject CDI devices"),
    ("1.7.2", None),
    ("1.7.24~ds1", None),
    ("2.1.4", None),
    ("garbage", "containerd garbage cannot inject CDI devices"),
])
def test_cdi_support_by_containerd_version(version, problem):
    assert cc.cdi_support_problem(version) == problem if problem is None else problem in cc.cdi_support_problem(version)


def test_credentials_are_redacted_for_diffs():
    text = load("kubespray-v3.toml") + (
        '  [plugins."io.containerd.cri.v1.images".registry.configs."registry.example.internal".auth]\n'
        '    username = "robot"\n'
        '    password = "s3cr3t"\n'
        "    auth = 'cm9ib3Q6czNjcjN0'\n"
        '    identitytoken = "eyJhbGciOi"\n')
    shown = cc.redact(text)
    for secret in ("s3cr3t", "cm9ib3Q6czNjcjN0", "eyJhbGciOi"):
        assert secret not in shown
    assert 'username = "robot"' in shown and 'password = "<redacted>"' in shown
    assert cc.redact(load("kubespray-v3.toml")) == load("kubespray-v3.toml")


@pytest.mark.parametrize(("name", "program", "template"), [
    ("k3s-generated-v2.toml", "k3s", "config.toml.tmpl"),
    ("rke2-generated-v3.toml", "rke2", "config-v3.toml.tmpl"),
    ("kubespray-v3.toml", None, None),
    ("user-comments-extra-runtimes-v2.toml", None, None),
])
def test_files_regenerated_by_k3s_and_rke2_are_recognised(name, program, template):
    found = cc.generated_by(load(name))
    assert found == ((program, template) if program else None)
    if found:
        message = cc.generated_file_message("/var/lib/rancher/%s/agent/etc/containerd/config.toml" % program, *found)
        assert "lost at the next restart" in message and "default-runtime: nvidia" in message
        assert "/etc/rancher/%s/config.yaml" % program in message


# containerd skips a file it has already loaded: at the live path a self-import is a no-op, but a temporary
# candidate importing the live path would load the old file over the new settings.
@pytest.mark.parametrize("imports, on_disk, expected", [
    # the reported user-written file: imports itself
    (['/etc/containerd/config.toml'], [], []),
    # relative to the file's folder, and not clean
    (['./config.toml', '../containerd/conf.d/a.toml'], [], ['/etc/containerd/conf.d/a.toml']),
    # a glob over the folder matches the file itself and a drop-in
    (['/etc/containerd/*.toml'], ['/etc/containerd/config.toml', '/etc/containerd/nvidia.toml'],
     ['/etc/containerd/nvidia.toml']),
    # nvidia-ctk's conf.d glob: kept as the files it matches, in containerd's (sorted) order
    (['/etc/containerd/conf.d/*.toml'], ['/etc/containerd/conf.d/99-nvidia.toml', '/etc/containerd/conf.d/10-a.toml'],
     ['/etc/containerd/conf.d/10-a.toml', '/etc/containerd/conf.d/99-nvidia.toml']),
])
def test_the_candidate_imports_what_the_live_file_would(imports, on_disk, expected):
    text = 'version = 2\nimports = %s\n\n[plugins]\n' % json.dumps(imports)

    def fake_glob(pattern):
        return [path for path in on_disk if fnmatch.fnmatch(path, pattern)]

    candidate = tomlkit.parse(cc.candidate_text(text, "/etc/containerd/config.toml", glob=fake_glob))
    assert list(candidate["imports"]) == expected
    assert "plugins" in candidate and candidate["version"] == 2


def test_a_candidate_without_self_reference_is_validated_as_written():
    text = 'version = 2\nimports = ["/etc/containerd/conf.d/a.toml"]\n'
    assert cc.candidate_text(text, "/etc/containerd/config.toml") == text
    assert cc.candidate_text("version = 2\n", "/etc/containerd/config.toml") == "version = 2\n"
