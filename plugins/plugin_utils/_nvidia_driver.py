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


def el_major(os_family, major):
    """The EL release of a RedHat-family host as a number (0 for other families or when unknown)."""
    if os_family != "RedHat":
        return 0
    try:
        return int(str(major).split(".", maxsplit=1)[0])
    except ValueError:
        return 0


# What the EL9 module profile 'default' installs, as packages: NVIDIA's EL10 repository has no module streams, and
# its nvidia-open metapackage also pulls the desktop (X, Wayland) packages that a compute node does not need.
REDHAT_COMPUTE_PACKAGES = ("kmod-nvidia-open-dkms", "nvidia-driver", "nvidia-driver-cuda", "nvidia-persistenced")


def redhat_lock_glob(branch, version):
    """dnf versionlock pattern that holds every NVIDIA package on a branch (NVIDIA's way on EL10), or ''.

    >>> redhat_lock_glob("565", "")
    '*nvidia*565*'
    """
    if version:
        return "*nvidia*%s*" % version
    if branch:
        return "*nvidia*%s*" % branch
    return ""


MODULES = ("dkms", "kmod")


def modules_errors(modules, flavor, branch, version, stream_override, os_family=None, distribution=None):
    """Settings that AlmaLinux's precompiled kmod cannot honour (os_family, distribution: None before facts)."""
    if modules not in MODULES:
        return ["nvidia_driver_modules must be one of %s, got %r" % ("/".join(MODULES), modules)]
    if modules != "kmod":
        return []
    errors = []
    if flavor == "proprietary":
        errors.append("nvidia_driver_flavor is 'proprietary', but nvidia_driver_modules: kmod installs AlmaLinux's "
                      "nvidia-open-kmod, the open modules only. Use 'open' or 'auto'")
    pinned = [name for name, value in (("nvidia_driver_branch", branch), ("nvidia_driver_version", version),
                                       ("nvidia_driver_module_stream", stream_override)) if value]
    if pinned:
        errors.append("%s %s set, but nvidia_driver_modules: kmod takes the driver AlmaLinux builds for each kernel "
                      "(its repository carries one branch, in step with the kernel). Leave %s empty, or use "
                      "nvidia_driver_modules: dkms to choose a branch"
                      % (" and ".join(pinned), "is" if len(pinned) == 1 else "are", " and ".join(pinned)))
    if os_family and (os_family != "RedHat" or (distribution and distribution != "AlmaLinux")):
        errors.append("nvidia_driver_modules is 'kmod', which only AlmaLinux provides (its signed nvidia-open-kmod), "
                      "but this node runs %s. Use nvidia_driver_modules: dkms" % (distribution or os_family))
    return errors


def el_errors(el, flavor, stream_override):
    """Settings that NVIDIA's repository for this EL release cannot satisfy (EL10: no module streams, open only)."""
    errors = []
    if el >= 10 and stream_override:
        errors.append("nvidia_driver_module_stream is %r, but EL%d has no dnf module streams: NVIDIA's EL%d "
                      "repository selects a branch by version, which the role holds with dnf versionlock. Leave "
                      "nvidia_driver_module_stream empty and set nvidia_driver_branch (or nvidia_driver_version)"
                      % (stream_override, el, el))
    if el >= 10 and flavor == "proprietary":
        errors.append("nvidia_driver_flavor is 'proprietary', which gpufleet does not install on EL%d: NVIDIA's "
                      "EL%d packages are set up here with the open kernel modules only (kmod-nvidia-open-dkms), "
                      "which every GPU from Turing on runs. Use 'open' or 'auto'" % (el, el))
    return errors


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
    """The driver role's plan from its settings ({flavor, branch, version, stream, modules, debian_source, os_family,
    os_major, distribution}): {errors} alone when one is invalid, else the flavor, the EL9 module stream or the
    package list (EL10, or AlmaLinux's kmod) and versionlock pattern, the version pin and Debian packages."""
    flavor, branch = choice.get("flavor", "auto"), str(choice.get("branch") or "")
    version, stream = str(choice.get("version") or ""), choice.get("stream") or ""
    source = choice.get("debian_source", "debian")
    el = el_major(choice.get("os_family"), choice.get("os_major"))
    modules = choice.get("modules") or "dkms"
    errors = validate(flavor, branch, version, stream) + modules_errors(
        modules, flavor, branch, version, stream, choice.get("os_family"), choice.get("distribution"))
    if modules == "dkms":
        errors += el_errors(el, flavor, stream)
    if choice.get("os_family") == "Debian" and source not in ("debian", "cuda"):
        errors.append("nvidia_driver_debian_source must be 'debian' or 'cuda', got %r" % (source,))
    if errors:
        return {"errors": errors}
    resolved = resolve_flavor(flavor, choice.get("os_family"), source)
    # EL9 with DKMS: a module stream. EL10, and AlmaLinux's kmod on either: packages (the kmod path adds its build).
    streams = el < 10 and modules == "dkms"
    packages = list(REDHAT_COMPUTE_PACKAGES if modules == "dkms" else REDHAT_COMPUTE_PACKAGES[1:])
    result = {"errors": [], "flavor": resolved, "modules": modules,
              "stream": redhat_stream(resolved, branch, stream) if streams else "",
              "redhat_packages": [] if streams else packages,
              "lock_glob": "" if streams else redhat_lock_glob(branch, version),
              # What an installed version on the held branch (or the held version) starts with.
              "hold_prefix": "" if streams else version or (branch + "." if branch else ""),
              "pin_glob": pin_glob(branch, version), "debian_packages": []}
    if choice.get("os_family") == "Debian":
        result["debian_packages"] = debian_packages(source, resolved, branch, version)
    return result


# ---------------------------------------------------------------- AlmaLinux's precompiled, signed kmod

# A precompiled kmod is built for one kernel and says so in a requirement on the kernel's uname -r (kernel-uname-r on
# EL9, kernel-core-uname-r or kernel-modules-core-uname-r where the kernel is split). Its files under
# /lib/modules/<uname -r>/ are the fallback, for a build that names the kernel only there.
_KERNEL_REQUIRE = re.compile(r"^kernel(?:-core|-modules|-modules-core)?-uname-r\s*=\s*(\S+)$")
_MODULE_PATH = re.compile(r"^/(?:usr/)?lib/modules/([^/\s]+)/")


def parse_kmod_query(text):
    """``dnf repoquery --queryformat '@@%{name} %{version} %{evr}\\n%{requires}\\n' <kmod>`` (files instead of
    requires, with --list, also do) -> [{name, version, evr, kernel}], one per build.

    A build whose kernel cannot be read keeps kernel None (it then covers no kernel).
    """
    builds = []
    for line in (text or "").splitlines():
        line = line.strip()
        if line.startswith("@@"):
            parts = line[2:].split()
            if len(parts) == 3:
                builds.append({"name": parts[0], "version": parts[1], "evr": parts[2], "kernel": None})
            continue
        if not builds or builds[-1]["kernel"]:
            continue
        found = _KERNEL_REQUIRE.match(line) or _MODULE_PATH.match(line)
        if found:
            builds[-1]["kernel"] = found.group(1)
    return builds


def _kernel_key(uname_r):
    """Order of kernel releases as rpm compares them, for the forms EL kernels take (5.14.0-570.12.1.el9_6.x86_64)."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part)
            for part in re.findall(r"[0-9]+|[A-Za-z]+", str(uname_r))]


def kernel_version_release(uname_r):
    """5.14.0-570.12.1.el9_6.x86_64 -> 5.14.0-570.12.1.el9_6 (the kernel packages' version-release)."""
    return re.sub(r"\.(x86_64|aarch64|ppc64le|s390x)$", "", str(uname_r))


def kmod_lockstep(builds, installed, available, boot_kernel, held_before=()):
    """Keep kernel and precompiled kmod in step.

    builds: kmod builds (parse_kmod_query of the repositories and the installed ones); installed, available: kernel
    uname -r values; boot_kernel: the one that boots next (None where none boots, in a container); held_before: the
    kernels an earlier run held. Returns {errors, target, build, held, release, set_default}:
    - target: the newest installed or available kernel a build exists for, and that build;
    - held: available kernels newer than target with no build, not installed: dnf must not install them yet;
    - release: kernels held before that are held no longer (their build arrived, or they are gone);
    - set_default: target, when the kernel that boots next has no build (never boot a kernel without its driver).
    """
    covered = {}
    for build in builds:
        if build.get("kernel"):
            best = covered.get(build["kernel"])
            if best is None or _kernel_key(build["evr"]) > _kernel_key(best["evr"]):
                covered[build["kernel"]] = build
    candidates = sorted({k for k in list(installed) + list(available) if k in covered}, key=_kernel_key)
    if not candidates:
        return {"errors": ["no %s build matches an installed or available kernel: the repository has builds for %s; "
                           "the kernels are %s. Wait for AlmaLinux to publish the build for your kernel, or use "
                           "nvidia_driver_modules: dkms"
                           % ((builds[0]["name"] if builds else "kmod"),
                              ", ".join(sorted(covered, key=_kernel_key)) or "no kernel",
                              ", ".join(sorted(set(installed) | set(available), key=_kernel_key)) or "none")],
                "target": None, "build": None, "held": [], "release": [], "set_default": None}
    target = candidates[-1]
    # An installed kernel is not excluded (dnf would then not see what it has): set_default keeps it from booting.
    held = sorted({k for k in available if k not in covered and k not in installed
                   and _kernel_key(k) > _kernel_key(target)}, key=_kernel_key)
    release = sorted({k for k in held_before if k not in held}, key=_kernel_key)
    set_default = target if boot_kernel and boot_kernel not in covered else None
    return {"errors": [], "target": target, "build": covered[target], "held": held, "release": release,
            "set_default": set_default}


# The packages a kernel release is split into on EL9 and EL10 (kernel is the metapackage).
KERNEL_PACKAGES = ("kernel", "kernel-core", "kernel-modules", "kernel-modules-core", "kernel-modules-extra")


def kernel_package_specs(uname_r):
    """dnf versionlock specs of one kernel release's packages (epoch 0, as EL kernels have; any arch), to hold or
    release it.

    >>> kernel_package_specs("5.14.0-570.12.1.el9_6.x86_64")[1]
    'kernel-core-0:5.14.0-570.12.1.el9_6.*'
    """
    return ["%s-0:%s.*" % (name, kernel_version_release(uname_r)) for name in KERNEL_PACKAGES]
