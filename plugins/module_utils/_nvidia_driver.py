# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""NVIDIA driver install decisions, independent of Ansible: package/stream names per OS, and whether to reboot."""

from __future__ import annotations

import re

FLAVORS = ("auto", "open", "proprietary")
_BRANCH = re.compile(r"^[0-9]{3}$")


def validate(flavor, branch, version, stream_override=""):
    """Messages for invalid driver choices (empty list when valid), each naming the variable and allowed values."""
    errors = []
    if flavor not in FLAVORS:
        errors.append("nvidia_driver_flavor must be one of %s, got %r" % ("/".join(FLAVORS), flavor))
    if branch and not _BRANCH.match(str(branch)):
        errors.append("nvidia_driver_branch must be a three-digit driver branch such as '570' (or empty for the "
                      "latest), got %r" % (branch,))
    if version:
        if not re.match(r"^[0-9]{3}\.[0-9]+(\.[0-9]+)?$", str(version)):
            errors.append("nvidia_driver_version must look like '570.133.20' (or be empty), got %r" % (version,))
        elif branch and not str(version).startswith(str(branch) + "."):
            errors.append("nvidia_driver_version %s is not on nvidia_driver_branch %s" % (version, branch))
    if stream_override and not re.match(r"^(latest-dkms|open-dkms|[0-9]{3}-(dkms|open))$", stream_override):
        errors.append("nvidia_driver_module_stream must be latest-dkms, open-dkms, <branch>-dkms or <branch>-open, "
                      "got %r" % (stream_override,))
    return errors


def resolve_flavor(flavor, os_family, debian_source="debian"):
    """'auto' -> 'open', except with Debian's own packages, whose open module (contrib) lags their driver."""
    if flavor != "auto":
        return flavor
    return "proprietary" if os_family == "Debian" and debian_source == "debian" else "open"


def parse_dkms_status(text):
    """``dkms status`` lines -> [{module, version, kernel, arch, state}].

    Handles DKMS 3 ('nvidia/570.133.20, 6.1.0-57-amd64, x86_64: installed') and DKMS 2
    ('nvidia, 535.54, 5.14.0, x86_64: installed').
    """
    entries = []
    for line in (text or "").splitlines():
        match = re.match(r"^([^,/ ]+)[/,]\s*([^,]+),\s*([^,]+),\s*([^:]+):\s*(.+)$", line.strip())
        if match:
            module, version, kernel, arch, state = (part.strip() for part in match.groups())
            entries.append({"module": module, "version": version, "kernel": kernel, "arch": arch,
                            "state": state.split()[0]})
    return entries


def nvidia_dkms_version(entries, kernel=None):
    """Version of the installed nvidia DKMS module for ``kernel`` (any kernel when None), or None."""
    for entry in entries:
        if entry["module"].startswith("nvidia") and entry["state"] == "installed":
            if kernel is None or entry["kernel"] == kernel:
                return entry["version"]
    return None


def redhat_stream(flavor, branch="", override=""):
    """dnf module stream of NVIDIA's CUDA repo for EL9.

    >>> redhat_stream("open", "570")
    '570-open'
    """
    if override:
        return override
    if branch:
        return "%s-%s" % (branch, "open" if flavor == "open" else "dkms")
    return "open-dkms" if flavor == "open" else "latest-dkms"


def debian_packages(source, flavor, branch="", version=""):
    """Package specs for Debian's own non-free packages (source 'debian') or NVIDIA's CUDA repo (source 'cuda')."""
    if source == "debian":
        # Debian ships one branch per release; the open modules are nvidia-open-kernel-dkms (contrib).
        # Headless compute set: no X server. libnvidia-ml1 and libcuda1 are what NVML and the toolkit need.
        kernel = "nvidia-open-kernel-dkms" if flavor == "open" else "nvidia-kernel-dkms"
        names = [kernel, "nvidia-smi", "libnvidia-ml1", "libcuda1", "nvidia-persistenced"]
    elif source == "cuda":
        # NVIDIA's Debian repo: the nvidia-open / cuda-drivers metapackages select the branch by version.
        names = ["nvidia-open" if flavor == "open" else "cuda-drivers", "nvidia-persistenced"]
        if branch and not version:
            names[0] = "%s-%s" % (names[0], branch)
    else:
        raise ValueError("nvidia_driver_debian_source must be 'debian' or 'cuda', got %r" % (source,))
    return names


def pin_glob(branch, version):
    """apt preferences version glob for a branch/version pin, or '' when nothing is pinned."""
    if version:
        return "%s*" % version
    if branch:
        return "%s.*" % branch
    return ""


def reboot_decision(facts):
    """Decide whether the node must reboot for the driver to be usable.

    ``facts`` keys (all optional):
      installed_version  version of the nvidia module on disk for the running kernel (modinfo), or None
      loaded_version     version in /proc/driver/nvidia/version, or None when no module is loaded
      nouveau_loaded     nouveau is bound
      running_kernel     uname -r
      newest_kernel      newest installed kernel, or None when unknown
      packages_changed   driver packages changed in this run
      modules_supported  False where kernel modules can never load (containers): the reboot is then skipped

    Returns ``{"needed": bool, "reasons": [...], "skipped_reason": str or None}``.
    """
    reasons = []
    installed = facts.get("installed_version")
    loaded = facts.get("loaded_version")
    if facts.get("nouveau_loaded"):
        reasons.append("nouveau is loaded and holds the GPUs")
    if installed and loaded and installed != loaded:
        reasons.append("the loaded nvidia module is %s but %s is installed" % (loaded, installed))
    if installed and not loaded:
        reasons.append("nvidia %s is installed but no nvidia module is loaded" % installed)
    newest, running = facts.get("newest_kernel"), facts.get("running_kernel")
    if newest and running and newest != running:
        reasons.append("a newer kernel %s is installed (running %s)" % (newest, running))
    if facts.get("packages_changed") and not reasons and loaded is None:
        reasons.append("driver packages changed and no module is loaded")
    skipped = None
    if reasons and facts.get("modules_supported") is False:
        skipped = "kernel modules cannot be loaded here (container); reboot skipped"
    return {"needed": bool(reasons), "reasons": reasons, "skipped_reason": skipped}
