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


_MENU = re.compile(r"""^\s*(menuentry|submenu)\s+(['"])(.*?)\2(.*)\{\s*$""")
_MENU_ID = re.compile(r"""\$menuentry_id_option\s+['"]?([^'"\s]+)""")
_LINUX = re.compile(r"^\s*linux(?:efi|16)?\s+\S*vmlinuz-(\S+)")


def _grub_menu(grub_cfg):
    """Top-level menu of a grub.cfg as grub-mkconfig writes it: [{"title", "id", "kernel", "children"}]."""
    root = {"children": []}
    stack = [root]
    for line in grub_cfg.splitlines():
        menu = _MENU.match(line)
        if menu:
            found = _MENU_ID.search(menu.group(4))
            node = {"title": menu.group(3), "id": found.group(1) if found else None, "kernel": None,
                    "children": [], "submenu": menu.group(1) == "submenu"}
            stack[-1]["children"].append(node)
            stack.append(node)
        elif line.rstrip().endswith("{"):
            stack.append({"children": []})  # a function or other braced block: not part of the menu
        elif line.strip() == "}" and len(stack) > 1:
            stack.pop()
        else:
            kernel = _LINUX.match(line)
            if kernel and stack[-1].get("kernel", "") is None:
                stack[-1]["kernel"] = kernel.group(1)
    return root["children"]


def _grub_default(grub_cfg):
    """The value grub.cfg gives `default` when no one-time entry is set (GRUB_DEFAULT), or None."""
    found = None
    for match in re.finditer(r"""^\s*set default=["']?([^"'\n]*)["']?\s*$""", grub_cfg, re.M):
        if "next_entry" not in match.group(1):
            found = match.group(1)
    return found


def _grubenv(text):
    values = {}
    for line in (text or "").splitlines():
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            values[key.strip()] = value.strip()
    return values


def _resolve_grub_entry(menu, spec):
    """Kernel of the entry GRUB picks for ``spec`` (index, id or title, '>'-separated into submenus), or None."""
    entries = menu
    node = None
    for part in spec.split(">"):
        part = part.strip()
        if part.isdigit():
            visible = entries
            node = visible[int(part)] if int(part) < len(visible) else None
        else:
            node = next((e for e in entries if part in (e["id"], e["title"])), None)
        if node is None:
            return None
        entries = node["children"]
    if node["submenu"]:
        return None
    return node["kernel"]


def boot_kernel(grubby_default="", grub_cfg="", grubenv=""):
    """Kernel release the bootloader boots next, or None when it cannot tell.

    ``grubby_default`` is the output of `grubby --default-kernel` (EL, Fedora, SUSE: the bootloader spec's default);
    otherwise GRUB as grub-mkconfig writes it (Debian, Ubuntu): a one-time `next_entry` (grub-reboot) first, then
    GRUB_DEFAULT - an index, a menu entry id or title, `saved` (grub-set-default), with `>` into submenus.
    """
    found = re.search(r"vmlinuz-(\S+)", grubby_default or "")
    if found:
        return found.group(1)
    if not grub_cfg:
        return None
    env = _grubenv(grubenv)
    menu = _grub_menu(grub_cfg)
    spec = env.get("next_entry") or _grub_default(grub_cfg)
    if spec is None:
        spec = "0"
    if "saved_entry" in spec:
        spec = env.get("saved_entry") or "0"
    return _resolve_grub_entry(menu, spec)


def reboot_decision(facts):
    """Decide whether the node must reboot for the driver to be usable.

    ``facts`` keys (all optional):
      installed_version  version of the nvidia module on disk for the kernel that will boot, or None
      loaded_version     version in /proc/driver/nvidia/version, or None when no module is loaded
      nouveau_loaded     nouveau is bound
      running_kernel     uname -r
      boot_kernel        the kernel the bootloader boots next (boot_kernel()), or None when unknown
      packages_changed   driver packages changed in this run
      modules_supported  False where kernel modules can never load (containers): the reboot is then skipped

    A newer kernel that is installed but not the bootloader's default (a deliberately pinned kernel) is no reason:
    the reboot would come back to the same kernel.

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
    boot, running = facts.get("boot_kernel"), facts.get("running_kernel")
    if boot and running and boot != running:
        reasons.append("the bootloader boots kernel %s next (running %s)" % (boot, running))
    if facts.get("packages_changed") and not reasons and loaded is None:
        reasons.append("driver packages changed and no module is loaded")
    skipped = None
    if reasons and facts.get("modules_supported") is False:
        skipped = ("this host is a container (the local lab, a molecule test host), where kernel modules never load: "
                   "no reboot can bring the driver up here, so none is done")
    return {"needed": bool(reasons), "reasons": reasons, "skipped_reason": skipped}


def plan(choice):
    """The driver role's plan from its settings ({flavor, branch, version, stream, debian_source, os_family}):
    {errors} alone when one is invalid, else the flavor, stream, version pin and Debian packages."""
    flavor, branch = choice.get("flavor", "auto"), str(choice.get("branch") or "")
    version, stream = str(choice.get("version") or ""), choice.get("stream") or ""
    source = choice.get("debian_source", "debian")
    errors = validate(flavor, branch, version, stream)
    if choice.get("os_family") == "Debian" and source not in ("debian", "cuda"):
        errors.append("nvidia_driver_debian_source must be 'debian' or 'cuda', got %r" % (source,))
    if errors:
        return {"errors": errors}
    resolved = resolve_flavor(flavor, choice.get("os_family"), source)
    result = {"errors": [], "flavor": resolved, "stream": redhat_stream(resolved, branch, stream),
              "pin_glob": pin_glob(branch, version), "debian_packages": []}
    if choice.get("os_family") == "Debian":
        result["debian_packages"] = debian_packages(source, resolved, branch, version)
    return result
