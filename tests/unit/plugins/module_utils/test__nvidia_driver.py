"""Table tests for the driver's stream/package mapping and the reboot decision."""

import pytest

from ansible_collections.gpufleet.vgpu.plugins.module_utils import _nvidia_driver as nd


@pytest.mark.parametrize(
    ("flavor", "branch", "override", "stream"),
    [
        ("open", "", "", "open-dkms"),
        ("proprietary", "", "", "latest-dkms"),
        ("open", "570", "", "570-open"),
        ("proprietary", "550", "", "550-dkms"),
        ("open", "570", "latest-dkms", "latest-dkms"),
    ],
)
def test_redhat_stream(flavor, branch, override, stream):
    assert nd.redhat_stream(flavor, branch, override) == stream


@pytest.mark.parametrize(
    ("source", "flavor", "branch", "version", "first"),
    [
        ("debian", "proprietary", "", "", "nvidia-kernel-dkms"),
        ("debian", "open", "", "", "nvidia-open-kernel-dkms"),
        ("cuda", "open", "", "", "nvidia-open"),
        ("cuda", "open", "570", "", "nvidia-open-570"),
        ("cuda", "proprietary", "570", "570.133.20", "cuda-drivers"),
    ],
)
def test_debian_packages(source, flavor, branch, version, first):
    pkgs = nd.debian_packages(source, flavor, branch, version)
    assert pkgs[0] == first
    assert "nvidia-persistenced" in pkgs


def test_debian_packages_rejects_unknown_source():
    with pytest.raises(ValueError, match="nvidia_driver_debian_source"):
        nd.debian_packages("ubuntu", "open")


@pytest.mark.parametrize(
    ("branch", "version", "glob"), [("", "", ""), ("570", "", "570.*"), ("570", "570.133.20", "570.133.20*")]
)
def test_pin_glob(branch, version, glob):
    assert nd.pin_glob(branch, version) == glob


@pytest.mark.parametrize(
    ("flavor", "branch", "version", "stream", "fragment"),
    [
        ("beta", "", "", "", "nvidia_driver_flavor must be one of auto/open/proprietary"),
        ("open", "57", "", "", "nvidia_driver_branch must be a three-digit"),
        ("open", "r570", "", "", "nvidia_driver_branch must be a three-digit"),
        ("open", "", "570", "", "nvidia_driver_version must look like"),
        ("open", "550", "570.133.20", "", "is not on nvidia_driver_branch 550"),
        ("open", "", "", "570-closed", "nvidia_driver_module_stream must be"),
    ],
)
def test_validate(flavor, branch, version, stream, fragment):
    errors = nd.validate(flavor, branch, version, stream)
    assert len(errors) == 1 and fragment in errors[0], errors


def test_validate_accepts():
    assert nd.validate("open", "570", "570.133.20", "570-open") == []
    assert nd.validate("proprietary", "", "", "") == []


DECISIONS = [
    ("all good", {"installed_version": "570.133.20", "loaded_version": "570.133.20", "running_kernel": "k1",
                  "newest_kernel": "k1"}, False, []),
    ("upgrade", {"installed_version": "570.133.20", "loaded_version": "565.57.01"}, True,
     ["the loaded nvidia module is 565.57.01 but 570.133.20 is installed"]),
    ("fresh install", {"installed_version": "535.309.01", "loaded_version": None}, True,
     ["nvidia 535.309.01 is installed but no nvidia module is loaded"]),
    ("nouveau", {"installed_version": "570.133.20", "loaded_version": "570.133.20", "nouveau_loaded": True}, True,
     ["nouveau is loaded and holds the GPUs"]),
    ("new kernel", {"installed_version": "570.133.20", "loaded_version": "570.133.20", "running_kernel": "5.14.0-427",
                    "newest_kernel": "5.14.0-503"}, True, ["a newer kernel 5.14.0-503 is installed (running 5.14.0-427)"]),
    ("packages changed, module unknown", {"packages_changed": True}, True,
     ["driver packages changed and no module is loaded"]),
    ("nothing installed", {}, False, []),
]


@pytest.mark.parametrize(("case", "facts", "needed", "reasons"), DECISIONS, ids=[d[0] for d in DECISIONS])
def test_reboot_decision(case, facts, needed, reasons):
    decision = nd.reboot_decision(facts)
    assert decision["needed"] is needed, case
    assert decision["reasons"] == reasons
    assert decision["skipped_reason"] is None


def test_reboot_skipped_where_modules_cannot_load():
    decision = nd.reboot_decision({"installed_version": "535.309.01", "modules_supported": False})
    assert decision["needed"] is True
    assert "container" in decision["skipped_reason"]


@pytest.mark.parametrize(
    ("flavor", "family", "source", "resolved"),
    [("auto", "RedHat", "debian", "open"), ("auto", "Debian", "debian", "proprietary"),
     ("auto", "Debian", "cuda", "open"), ("open", "Debian", "debian", "open"), ("proprietary", "RedHat", "", "proprietary")],
)
def test_resolve_flavor(flavor, family, source, resolved):
    assert nd.resolve_flavor(flavor, family, source) == resolved


DKMS = """nvidia-current/535.309.01, 6.1.0-57-amd64, x86_64: installed
nvidia-current/535.309.01, 6.1.0-58-amd64, x86_64: built
nvidia, 535.54.03, 5.14.0-362.el9.x86_64, x86_64: installed (WARNING! Diff between built and installed module!)
virtualbox/7.0.10, 6.1.0-57-amd64, x86_64: installed
"""


def test_parse_dkms_status():
    entries = nd.parse_dkms_status(DKMS)
    assert [e["module"] for e in entries] == ["nvidia-current", "nvidia-current", "nvidia", "virtualbox"]
    assert entries[2] == {"module": "nvidia", "version": "535.54.03", "kernel": "5.14.0-362.el9.x86_64",
                          "arch": "x86_64", "state": "installed"}
    assert nd.nvidia_dkms_version(entries) == "535.309.01"
    assert nd.nvidia_dkms_version(entries, "6.1.0-58-amd64") is None
    assert nd.nvidia_dkms_version(entries, "5.14.0-362.el9.x86_64") == "535.54.03"
    assert nd.parse_dkms_status("") == []
