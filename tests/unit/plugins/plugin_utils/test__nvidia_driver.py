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


@pytest.mark.parametrize(("family", "major", "branch", "version", "stream", "packages", "lock"), [
    # EL9: the module stream selects the branch
    ("RedHat", "9", "565", "", "565-open", [], ""),
    ("RedHat", "9.6", "", "", "open-dkms", [], ""),
    # EL10: no streams; the compute packages, held by NVIDIA's versionlock pattern when a branch or version is set
    ("RedHat", "10", "", "", "", list(nd.REDHAT_COMPUTE_PACKAGES), ""),
    ("RedHat", "10", "565", "", "", list(nd.REDHAT_COMPUTE_PACKAGES), "*nvidia*565*"),
    ("RedHat", "10", "565", "565.57.01", "", list(nd.REDHAT_COMPUTE_PACKAGES), "*nvidia*565.57.01*"),
    # an unknown release is treated as EL9 (module streams), as before EL10 was known
    ("RedHat", "", "", "", "open-dkms", [], ""),
    ("Debian", "13", "", "", "open-dkms", [], ""),
])
def test_el_release_selects_streams_or_versionlock(family, major, branch, version, stream, packages, lock):
    planned = nd.plan({"flavor": "open", "branch": branch, "version": version, "os_family": family,
                       "os_major": major, "debian_source": "cuda"})
    assert planned["errors"] == []
    assert (planned["stream"], planned["redhat_packages"], planned["lock_glob"]) == (stream, packages, lock)
    # what an installed version on the held branch starts with (565.x.y is on 565, 5650.x is not)
    assert planned["hold_prefix"] == (version or (branch + "." if branch else "") if not stream else "")


def test_el_major():
    assert [nd.el_major("RedHat", v) for v in ("9", "10", "10.0", "", None, "n/a")] == [9, 10, 10, 0, 0, 0]
    assert nd.el_major("Debian", "12") == 0


# ------------------------------------------------------------- AlmaLinux's kmod

K503, K570, K611 = "5.14.0-503.40.1.el9_5.x86_64", "5.14.0-570.12.1.el9_6.x86_64", "5.14.0-611.5.1.el9_7.x86_64"


def query(*builds):
    """dnf repoquery output for kmod builds [(evr, kernel, how)], in the queryformat packages_kmod.yml uses."""
    lines = []
    for evr, kernel, how in builds:
        lines.append("@@nvidia-open-kmod %s %s" % (evr.split("-")[0], evr))
        lines += ["nvidia-kmod-common = %s" % evr.split("-")[0], "/bin/sh"]
        if how == "requires":
            lines.append("kernel-uname-r = %s" % kernel)
        elif how == "core":
            lines.append("kernel-core-uname-r = %s" % kernel)
        elif how == "files":
            lines.append("/lib/modules/%s/extra/nvidia.ko.xz" % kernel)
    return "\n".join(lines) + "\n"


def test_parse_kmod_query_reads_the_kernel_however_a_build_names_it():
    text = query(("580.105.08-1.el9_5", K503, "requires"), ("580.105.08-2.el9_6", K570, "core"),
                 ("580.105.08-3.el9_7", K611, "files"), ("580.95.05-1.el9_5", None, "none"))
    builds = nd.parse_kmod_query(text)
    assert [(b["evr"], b["kernel"]) for b in builds] == [
        ("580.105.08-1.el9_5", K503), ("580.105.08-2.el9_6", K570), ("580.105.08-3.el9_7", K611),
        ("580.95.05-1.el9_5", None)]
    assert builds[0]["version"] == "580.105.08" and nd.parse_kmod_query("") == []


@pytest.mark.parametrize(("case", "builds", "installed", "available", "boot", "held_before", "want"), [
    ("a build for the newest kernel: nothing held",
     [("580.105.08-1", K503), ("580.105.08-2", K570)], [K503], [K503, K570], K503, [],
     {"target": K570, "evr": "580.105.08-2", "held": [], "release": [], "set_default": None}),
    ("a newer kernel without a build is held; the node stays where its build is",
     [("580.105.08-1", K503)], [K503], [K503, K570], K503, [],
     {"target": K503, "evr": "580.105.08-1", "held": [K570], "release": [], "set_default": None}),
    ("the build arrives: released, and the newer kernel is the target",
     [("580.105.08-1", K503), ("580.105.08-2", K570)], [K503], [K503, K570], K503, [K570],
     {"target": K570, "evr": "580.105.08-2", "held": [], "release": [K570], "set_default": None}),
    ("a kernel installed by hand before its build boots next: the one with a build is made default",
     [("580.105.08-1", K503)], [K503, K570], [K503, K570], K570, [],
     {"target": K503, "evr": "580.105.08-1", "held": [], "release": [], "set_default": K503}),
    ("two builds for one kernel: the newer one",
     [("580.95.05-1", K503), ("580.105.08-1", K503)], [K503], [K503], K503, [],
     {"target": K503, "evr": "580.105.08-1", "held": [], "release": [], "set_default": None}),
    ("in a container nothing boots: no default to set",
     [("580.105.08-1", K503)], [], [K503, K570], None, [],
     {"target": K503, "evr": "580.105.08-1", "held": [K570], "release": [], "set_default": None}),
    ("an older kernel without a build is left alone",
     [("580.105.08-2", K570)], [K503, K570], [K570], K570, [],
     {"target": K570, "evr": "580.105.08-2", "held": [], "release": [], "set_default": None}),
])
def test_kmod_lockstep(case, builds, installed, available, boot, held_before, want):
    parsed = [{"name": "nvidia-open-kmod", "version": evr.split("-")[0], "evr": evr, "kernel": kernel}
              for evr, kernel in builds]
    got = nd.kmod_lockstep(parsed, installed, available, boot, held_before)
    assert got["errors"] == [], case
    assert {"target": got["target"], "evr": got["build"]["evr"], "held": got["held"], "release": got["release"],
            "set_default": got["set_default"]} == want, case


def test_kmod_lockstep_without_any_matching_build_names_both_sides():
    parsed = nd.parse_kmod_query(query(("580.105.08-1.el9_5", K503, "requires")))
    got = nd.kmod_lockstep(parsed, [K570], [K570], K570)
    assert got["target"] is None and len(got["errors"]) == 1
    assert ("no nvidia-open-kmod build matches an installed or available kernel: the repository has builds for %s; "
            "the kernels are %s" % (K503, K570)) in got["errors"][0]
    assert "nvidia_driver_modules: dkms" in got["errors"][0]


def test_kernel_package_specs_and_order():
    specs = nd.kernel_package_specs(K570)
    assert specs[0] == "kernel-0:5.14.0-570.12.1.el9_6.*" and len(specs) == len(nd.KERNEL_PACKAGES)
    assert sorted([K611, K503, "5.14.0-503.9.1.el9_5.x86_64", K570], key=nd._kernel_key) == [
        "5.14.0-503.9.1.el9_5.x86_64", K503, K570, K611]


@pytest.mark.parametrize(("changes", "facts", "fragment"), [
    ({"flavor": "proprietary"}, {}, "nvidia_driver_flavor is 'proprietary', but nvidia_driver_modules: kmod"),
    ({"branch": "580"}, {}, "nvidia_driver_branch is set, but nvidia_driver_modules: kmod"),
    ({"branch": "580", "version": "580.105.08"}, {},
     "nvidia_driver_branch and nvidia_driver_version are set, but nvidia_driver_modules: kmod"),
    ({"stream": "open-dkms"}, {}, "nvidia_driver_module_stream is set"),
    ({}, {"os_family": "RedHat", "distribution": "Rocky"}, "only AlmaLinux provides (its signed nvidia-open-kmod), "
                                                           "but this node runs Rocky"),
    ({}, {"os_family": "Debian", "distribution": "Debian"}, "but this node runs Debian"),
    ({"modules": "akmod"}, {}, "nvidia_driver_modules must be one of dkms/kmod, got 'akmod'"),
])
def test_kmod_refusals(changes, facts, fragment):
    choice = dict({"flavor": "auto", "modules": "kmod"}, **changes, **facts)
    errors = nd.plan(choice)["errors"]
    assert len(errors) == 1 and fragment in errors[0], errors


def test_kmod_on_almalinux_plans_packages_and_no_stream():
    for major in ("9", "10"):
        planned = nd.plan({"flavor": "auto", "modules": "kmod", "os_family": "RedHat", "os_major": major,
                           "distribution": "AlmaLinux"})
        assert planned["errors"] == [] and planned["stream"] == "" and planned["lock_glob"] == ""
        assert planned["redhat_packages"] == ["nvidia-driver", "nvidia-driver-cuda", "nvidia-persistenced"]
