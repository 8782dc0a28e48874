# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: nvidia_driver_plan
short_description: Resolve the NVIDIA driver choices of role nvidia_driver
version_added: 0.1.0
author: gpufleet maintainers (@gpufleet)
description:
  - Validates flavor, branch, version and stream, and returns the resolved flavor, the EL9 dnf module stream (or, on
    EL10, which has no module streams, the package list and the dnf versionlock pattern), the Debian package list and
    the apt pin glob.
options:
  _input:
    description: Dict with C(flavor), C(branch), C(version), C(stream), C(modules), C(os_family), C(os_major) (the EL
      release), C(distribution) and C(debian_source).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Plan
  ansible.builtin.set_fact:
    plan: "{{ {'flavor': 'auto', 'branch': '570', 'version': '', 'stream': '', 'os_family': 'RedHat',
               'debian_source': 'debian'} | gpufleet.vgpu.nvidia_driver_plan }}"
"""

RETURN = r"""
_value:
  description: C(errors), C(flavor), C(modules), C(stream), C(redhat_packages), C(lock_glob), C(hold_prefix),
    C(debian_packages), C(pin_glob).
  type: dict
"""

from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _nvidia_driver as nd


def nvidia_driver_plan(choice):
    return nd.plan(choice)


def nvidia_reboot_decision(facts):
    return nd.reboot_decision(facts)


def nvidia_dkms_version(dkms_status, kernel=None):
    return nd.nvidia_dkms_version(nd.parse_dkms_status(dkms_status), kernel)


def nvidia_boot_kernel(grubby_default, grub_cfg="", grubenv=""):
    return nd.boot_kernel(grubby_default or "", grub_cfg or "", grubenv or "")


def _lines(values):
    return [value.strip() for value in values or [] if value.strip()]


def nvidia_kmod_plan(found):
    """AlmaLinux kmod lockstep from what the node's dnf reported (tasks/packages_kmod.yml)."""
    builds = nd.parse_kmod_query(found.get("available") or "") + nd.parse_kmod_query(found.get("installed") or "")
    return nd.kmod_lockstep(builds, _lines(found.get("kernels_installed")), _lines(found.get("kernels_available")),
                            found.get("boot_kernel"), _lines(found.get("held_before")))


def nvidia_kernel_package_specs(uname_r):
    return nd.kernel_package_specs(uname_r)


class FilterModule:
    """NVIDIA driver filters."""

    def filters(self):
        return {
            "nvidia_driver_plan": nvidia_driver_plan,
            "nvidia_reboot_decision": nvidia_reboot_decision,
            "nvidia_dkms_version": nvidia_dkms_version,
            "nvidia_boot_kernel": nvidia_boot_kernel,
            "nvidia_kmod_plan": nvidia_kmod_plan,
            "nvidia_kernel_package_specs": nvidia_kernel_package_specs,
        }
