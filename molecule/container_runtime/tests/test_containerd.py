"""Verify container_runtime with the real containerd of every host."""

import re

PACKAGES = ["nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
            "libnvidia-container1"]


def test_toolkit_packages_at_one_version(host):
    for name in PACKAGES:
        pkg = host.package(name)
        assert pkg.is_installed, name
        assert pkg.version.startswith("1.17.8"), (name, pkg.version)


def test_nvidia_is_the_default_runtime_in_the_effective_config(host):
    dump = host.check_output("containerd config dump")
    assert re.search(r"default_runtime_name = ['\"]nvidia['\"]", dump), dump[:2000]
    assert re.search(r"BinaryName = ['\"]/usr/bin/nvidia-container-runtime['\"]", dump)


def test_containerd_is_active(host):
    assert host.service("containerd").is_running
    assert host.service("containerd").is_enabled


def test_repository_is_signed(host):
    if host.file("/etc/apt/sources.list.d/nvidia-container-toolkit.sources").exists:
        text = host.file("/etc/apt/sources.list.d/nvidia-container-toolkit.sources").content_string
        assert "Signed-By: /etc/apt/keyrings/nvidia-container-toolkit.asc" in text
        assert "trusted" not in text
    else:
        text = host.file("/etc/yum.repos.d/nvidia-container-toolkit.repo").content_string
        assert "gpgcheck = 1" in text and "repo_gpgcheck = 1" in text


def test_previous_config_was_backed_up(host):
    backups = host.check_output("ls /etc/containerd/ | grep -c '^config.toml\\..*~$' || true")
    assert int(backups) >= 1
