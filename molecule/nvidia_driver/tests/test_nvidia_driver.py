"""Verify nvidia_driver on Debian 12 (real DKMS build) and the EL9-like host (dnf module streams)."""


def is_debian(host):
    return host.file("/etc/debian_version").exists


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
    else:
        text = host.file("/etc/yum.repos.d/cuda-rhel9-x86_64.repo").content_string
        assert "gpgcheck = 1" in text and "repo_gpgcheck = 1" in text


def test_initramfs_tooling(host):
    if is_debian(host):
        assert host.package("initramfs-tools").is_installed
    else:
        # converge + idempotence ran; the blacklist changed once, so dracut ran exactly once.
        assert len(host.file("/var/log/gpufleet-initramfs.log").content_string.splitlines()) == 1
