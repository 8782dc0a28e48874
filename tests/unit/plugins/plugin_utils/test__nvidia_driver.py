"""Table tests for the driver's stream/package mapping and the reboot decision."""

import pytest

from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _nvidia_driver as nd


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
                  "boot_kernel": "k1"}, False, []),
    ("upgrade", {"installed_version": "570.133.20", "loaded_version": "565.57.01"}, True,
     ["the loaded nvidia module is 565.57.01 but 570.133.20 is installed"]),
    ("fresh install", {"installed_version": "535.309.01", "loaded_version": None}, True,
     ["nvidia 535.309.01 is installed but no nvidia module is loaded"]),
    ("nouveau", {"installed_version": "570.133.20", "loaded_version": "570.133.20", "nouveau_loaded": True}, True,
     ["nouveau is loaded and holds the GPUs"]),
    ("new kernel", {"installed_version": "570.133.20", "loaded_version": "570.133.20", "running_kernel": "5.14.0-427",
                    "boot_kernel": "5.14.0-503"}, True, ["the bootloader boots kernel 5.14.0-503 next (running 5.14.0-427)"]),
    # A newer kernel installed next to a pinned one the bootloader keeps booting: rebooting changes nothing.
    ("pinned older kernel", {"installed_version": "570.133.20", "loaded_version": "570.133.20",
                             "running_kernel": "5.14.0-362", "boot_kernel": "5.14.0-362",
                             "newest_kernel": "5.14.0-503"}, False, []),
    ("boot kernel unknown", {"installed_version": "570.133.20", "loaded_version": "570.133.20",
                             "running_kernel": "5.14.0-362", "boot_kernel": None}, False, []),
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


# grub.cfg as grub-mkconfig writes it on Debian 12 (trimmed: the lines the decision reads, and the braces around them).
DEBIAN_GRUB_CFG = """
if [ -s $prefix/grubenv ]; then
  set have_grubenv=true
  load_env
fi
if [ "${next_entry}" ] ; then
   set default="${next_entry}"
   set next_entry=
   save_env next_entry
   set boot_once=true
else
   set default="%(default)s"
fi
function savedefault {
  if [ -z "${boot_once}" ]; then
    saved_entry="${chosen}"
    save_env saved_entry
  fi
}
menuentry 'Debian GNU/Linux' --class debian --class gnu-linux --class gnu --class os $menuentry_id_option 'gnulinux-simple-0b1f' {
    load_video
    insmod gzio
    echo    'Loading Linux 6.1.0-28-amd64 ...'
    linux    /boot/vmlinuz-6.1.0-28-amd64 root=UUID=0b1f ro  quiet
    initrd    /boot/initrd.img-6.1.0-28-amd64
}
submenu 'Advanced options for Debian GNU/Linux' $menuentry_id_option 'gnulinux-advanced-0b1f' {
    menuentry 'Debian GNU/Linux, with Linux 6.1.0-28-amd64' --class debian $menuentry_id_option 'gnulinux-6.1.0-28-amd64-advanced-0b1f' {
        linux    /boot/vmlinuz-6.1.0-28-amd64 root=UUID=0b1f ro  quiet
    }
    menuentry 'Debian GNU/Linux, with Linux 6.1.0-28-amd64 (recovery mode)' --class debian $menuentry_id_option 'gnulinux-6.1.0-28-amd64-recovery-0b1f' {
        linux    /boot/vmlinuz-6.1.0-28-amd64 root=UUID=0b1f ro single
    }
    menuentry 'Debian GNU/Linux, with Linux 6.1.0-18-amd64' --class debian $menuentry_id_option 'gnulinux-6.1.0-18-amd64-advanced-0b1f' {
        linux    /boot/vmlinuz-6.1.0-18-amd64 root=UUID=0b1f ro  quiet
    }
}
menuentry 'UEFI Firmware Settings' $menuentry_id_option 'uefi-firmware' {
    fwsetup
}
"""

BOOT_KERNELS = [
    ("grubby (EL)", {"grubby_default": "/boot/vmlinuz-5.14.0-362.24.1.el9_3.x86_64\n"}, "5.14.0-362.24.1.el9_3.x86_64"),
    ("grubby wins over grub.cfg", {"grubby_default": "/boot/vmlinuz-5.14.0-503.el9.x86_64",
                                   "grub_cfg": DEBIAN_GRUB_CFG % {"default": "0"}}, "5.14.0-503.el9.x86_64"),
    ("GRUB_DEFAULT=0", {"grub_cfg": DEBIAN_GRUB_CFG % {"default": "0"}}, "6.1.0-28-amd64"),
    ("index into the submenu", {"grub_cfg": DEBIAN_GRUB_CFG % {"default": "1>2"}}, "6.1.0-18-amd64"),
    ("titles into the submenu", {"grub_cfg": DEBIAN_GRUB_CFG % {
        "default": "Advanced options for Debian GNU/Linux>Debian GNU/Linux, with Linux 6.1.0-18-amd64"}},
     "6.1.0-18-amd64"),
    ("ids into the submenu", {"grub_cfg": DEBIAN_GRUB_CFG % {
        "default": "gnulinux-advanced-0b1f>gnulinux-6.1.0-18-amd64-advanced-0b1f"}}, "6.1.0-18-amd64"),
    ("GRUB_DEFAULT=saved, grub-set-default", {"grub_cfg": DEBIAN_GRUB_CFG % {"default": "${saved_entry}"},
                                              "grubenv": "# GRUB Environment Block\nsaved_entry=1>2\n####"},
     "6.1.0-18-amd64"),
    ("saved, nothing saved yet", {"grub_cfg": DEBIAN_GRUB_CFG % {"default": "${saved_entry}"}}, "6.1.0-28-amd64"),
    ("grub-reboot once", {"grub_cfg": DEBIAN_GRUB_CFG % {"default": "0"},
                          "grubenv": "next_entry=gnulinux-advanced-0b1f>gnulinux-6.1.0-18-amd64-advanced-0b1f\n"},
     "6.1.0-18-amd64"),
    ("the submenu itself is no kernel", {"grub_cfg": DEBIAN_GRUB_CFG % {"default": "1"}}, None),
    ("an entry that no longer exists", {"grub_cfg": DEBIAN_GRUB_CFG % {"default": "7"}}, None),
    ("firmware settings entry", {"grub_cfg": DEBIAN_GRUB_CFG % {"default": "2"}}, None),
    ("nothing to read", {}, None),
    ("grubby without a default", {"grubby_default": "The default is /boot/loader/entries/x.conf with index 0"}, None),
]


@pytest.mark.parametrize(("case", "sources", "kernel"), BOOT_KERNELS, ids=[b[0] for b in BOOT_KERNELS])
def test_boot_kernel(case, sources, kernel):
    assert nd.boot_kernel(**sources) == kernel, case
