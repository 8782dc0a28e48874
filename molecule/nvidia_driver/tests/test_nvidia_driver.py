"""Verify nvidia_driver on Debian 12 (real DKMS build), the EL9-like host (dnf module streams) and the EL10-like
host (no module streams), and AlmaLinux's precompiled kmod on a third EL9-like host."""

import pytest


def is_debian(host):
    return host.file("/etc/debian_version").exists


def el_major(host):
    return int(host.system_info.release.split(".")[0])


def is_kmod(host):
    """The host that takes AlmaLinux's precompiled kmod (its release package's repository file is there)."""
    return host.file("/etc/yum.repos.d/almalinux-nvidia.repo").exists


K503, K570 = "5.14.0-503.40.1.el9_5", "5.14.0-570.12.1.el9_6"


def test_nouveau_blacklisted(host):
    text = host.file("/etc/modprobe.d/blacklist-nouveau.conf").content_string
    assert "blacklist nouveau" in text and "modeset=0" in text


def test_persistenced_enabled(host):
    assert host.service("nvidia-persistenced").is_enabled


def test_driver_installed(host):
    if is_debian(host):
        # Debian's real package, built by DKMS for the installed headers.
        out = host.check_output("dkms status")
        assert "nvidia-current/535" in out and ": installed" in out, out
        assert host.package("nvidia-kernel-dkms").is_installed
        assert host.package("libnvidia-ml1").is_installed
    elif is_kmod(host):
        # The build for the older kernel (the only one published), the kernel it was built for, no DKMS.
        assert host.check_output("rpm -q nvidia-open-kmod") == "nvidia-open-kmod-580.105.08-1.el9_5.x86_64"
        assert host.check_output("rpm -q kernel-core") == "kernel-core-%s.x86_64" % K503
        assert host.package("nvidia-driver").version == "580.105.08"
        assert not host.package("dkms").is_installed and not host.package("kmod-nvidia-open-dkms").is_installed
    elif el_major(host) >= 10:
        # The newest driver of the repository, with no module stream and no lock (no branch set).
        for name in ("kmod-nvidia-open-dkms", "nvidia-driver", "nvidia-driver-cuda", "nvidia-persistenced"):
            assert host.package(name).version == "570.133.20", name
        assert host.run("dnf -y -q module list --enabled nvidia-driver").stdout.strip() == ""
    else:
        assert host.package("kmod-nvidia-open-dkms").version == "570.133.20"
        assert host.package("nvidia-driver").version == "570.133.20"
        assert "open-dkms" in host.check_output("dnf -q module list --enabled nvidia-driver")


def test_repositories_signed(host):
    if is_debian(host):
        text = host.file("/etc/apt/sources.list.d/gpufleet-nonfree.sources").content_string
        assert "Components: contrib non-free non-free-firmware" in text
        assert "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" in text
        assert "bookworm-security" in text
    elif is_kmod(host):
        # The release package's repository file, as it installed it.
        text = host.file("/etc/yum.repos.d/almalinux-nvidia.repo").content_string
        assert "gpgcheck=1" in text and "repo_gpgcheck=1" in text
        assert not host.file("/etc/yum.repos.d/cuda-rhel9-x86_64.repo").exists
    else:
        text = host.file("/etc/yum.repos.d/cuda-rhel%d-x86_64.repo" % el_major(host)).content_string
        assert "gpgcheck = 1" in text and "repo_gpgcheck = 1" in text


def test_initramfs_tooling(host):
    if is_debian(host):
        assert host.package("initramfs-tools").is_installed
    else:
        # converge + idempotence ran; the blacklist changed once, so dracut ran exactly once.
        assert len(host.file("/var/log/gpufleet-initramfs.log").content_string.splitlines()) == 1


def test_kmod_holds_the_kernel_without_a_build(host):
    if is_debian(host) or not is_kmod(host):
        pytest.skip("only the host that takes AlmaLinux's kmod")
    # Excluded from dnf's view (the role's excludes), recorded as this role's, so that only it releases them.
    assert "!kernel-core-0:%s.*" % K570 in host.check_output("dnf -y -q versionlock list")
    assert host.file("/etc/dnf/gpufleet-kmod-held-kernels").content_string == "%s.x86_64\n" % K570
    held = host.run("dnf -y install kernel-core-%s" % K570)
    assert held.rc != 0 and host.run("rpm -q kernel-core-%s" % K570).rc != 0
    # What the repositories offer, without the excludes: the newer kernel is there.
    assert K570 in host.check_output("dnf -y -q --disableplugin=versionlock repoquery kernel-core")
