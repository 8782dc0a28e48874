# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Edit the runtime section of containerd's config.toml, preserving everything else (tomlkit). No Ansible here.

Only the keys this module owns are touched: ``default_runtime_name``, the ``runtimes.<name>`` table and, when asked,
``enable_cdi``. Comments, ordering and every other section stay byte for byte.
"""

from __future__ import annotations

import glob as globmod
import os
import re

try:
    import tomlkit
    from tomlkit.exceptions import TOMLKitError
except ImportError:  # the module reports it with missing_required_lib
    tomlkit = None
    HAS_TOMLKIT = False

    class TOMLKitError(Exception):
        """Placeholder so that except clauses stay valid without tomlkit."""
else:
    HAS_TOMLKIT = True

# Where the CRI runtime settings live, per config format version.
CRI_RUNTIME_PLUGIN = {
    2: "io.containerd.grpc.v1.cri",  # containerd 1.6 / 1.7
    3: "io.containerd.cri.v1.runtime",  # containerd 2.x
}
RUNC_V2_SHIM = "io.containerd.runc.v2"
# Where NVIDIA's toolkit and the device plugin write CDI specs that come and go with the node's state (the spec of
# the driver's GPUs, the plugin's per-allocation specs); containerd must scan it (its default cdi_spec_dirs do).
CDI_SPEC_DIR = "/var/run/cdi"
# The first containerd that reads CDI devices from the CRI field kubelet fills in from a device plugin's Allocate
# response (ContainerConfig.CDIDevices, containerd/containerd#8519 on release/1.7); 1.6 has no CDI in its CRI.
CDI_MINIMUM = (1, 7, 2)


class ConfigError(ValueError):
    """The existing configuration cannot be edited safely; the message says why and what to do."""


def config_version_for(containerd_version):
    """Config format version that ``containerd config default`` writes for this containerd version.

    >>> config_version_for("1.7.24~ds1")
    2
    """
    match = re.match(r"^v?(\d+)\.(\d+)", containerd_version or "")
    if not match:
        raise ConfigError("cannot read containerd's version from %r" % (containerd_version,))
    major = int(match.group(1))
    if major < 1 or (major == 1 and int(match.group(2)) < 6):
        raise ConfigError("containerd %s is too old; 1.6 or newer is required" % containerd_version)
    return 3 if major >= 2 else 2


def cdi_support_problem(containerd_version):
    """Why this containerd cannot run the device plugin's CDI mode, or None.

    >>> cdi_support_problem("1.6.20~ds1")
    'containerd 1.6.20~ds1 cannot inject CDI devices from the CRI (1.7.2 or newer is needed)'
    >>> cdi_support_problem("2.1.4") is None
    True
    """
    numbers = tuple(int(part) for part in re.findall(r"\d+", containerd_version or "")[:3])
    if len(numbers) == 3 and numbers >= CDI_MINIMUM:
        return None
    return "containerd %s cannot inject CDI devices from the CRI (%s or newer is needed)" % (
        containerd_version, ".".join(str(part) for part in CDI_MINIMUM))


def parse_containerd_version(output):
    """Version from ``containerd --version`` output, e.g. 'containerd github.com/containerd/containerd/v2 2.1.9 ...'."""
    match = re.search(r"\s(v?\d+\.\d+\.\d+\S*)", output or "")
    if not match:
        raise ConfigError("cannot read containerd's version from %r" % (output,))
    return match.group(1).lstrip("v")


def base_replacement_reason(text):
    """Why the existing file cannot serve as the base (then ``containerd config default`` does), or None.

    A missing or empty file, a file without ``version`` (containerd reads it as the obsolete version 1, as the
    ``containerd.io`` package ships it), and one with CRI disabled are replaced.
    """
    if text is None or not text.strip():
        return "missing or empty"
    try:
        doc = tomlkit.parse(text)
    except TOMLKitError as exc:
        raise ConfigError("the existing file is not valid TOML (%s); fix or remove it" % exc) from exc
    reason = None
    if "version" not in doc:
        reason = "has no 'version' key (read as the obsolete version 1)"
    else:
        disabled = [str(p) for p in doc.get("disabled_plugins", [])]
        if "cri" in disabled or any(p.startswith("io.containerd.grpc.v1.cri") for p in disabled):
            reason = "disables the CRI plugin (disabled_plugins = %s)" % disabled
    if reason:
        # Replacing is safe only for a file that says nothing else (the containerd.io package's stub): a runtime or
        # a registry mirror in it would be lost, while containerd itself still reads them from the original.
        lost = _settings(doc, skip=("version", "disabled_plugins"))
        if lost:
            raise ConfigError("the existing file %s, so it would be replaced by 'containerd config default', which "
                              "would lose %s%s; convert it first (add version = 2 for containerd 1.6/1.7 and use its "
                              "plugin names, or run 'containerd config migrate' on containerd 2.x), then rerun"
                              % (reason, ", ".join(lost[:8]), " and %d more" % (len(lost) - 8) if len(lost) > 8 else ""))
    return reason


def _settings(container, skip=(), prefix=""):
    """Dotted paths of the values set in a parsed TOML document (tables followed down to their keys)."""
    found = []
    for key, value in container.items():
        if key in skip:
            continue
        path = "%s%s" % (prefix, key if "." not in key else '"%s"' % key)
        if isinstance(value, dict):
            found.extend(_settings(value, prefix=path + ".") or [path])
        else:
            found.append(path)
    return found


def _table(container, key, changes, path):
    if key not in container:
        container.add(key, tomlkit.table())
        changes.append("created [%s]" % path)
    return container[key]


def _set(table, key, value, changes, path):
    current = table.get(key)
    current = current.unwrap() if hasattr(current, "unwrap") else current
    if current != value or type(current) is not type(value):
        table[key] = value
        changes.append("%s.%s = %r (was %r)" % (path, key, value, current))


def _is_binary_name(key):
    # containerd 2.x decodes option keys case-insensitively, so a lowercase binaryName (kubespray's templates) next to
    # BinaryName can win: the "nvidia" runtime then runs the base runtime's binary, with no GPU.
    return str(key).lower() == "binaryname"


def apply(text, runtime_name="nvidia", binary_name="/usr/bin/nvidia-container-runtime", set_as_default=True,
          enable_cdi=None, inherit_from="runc", runtime_options=None, runtime_settings=None):
    """Return ``(new_text, changes, config_version, imports)`` for the wanted runtime settings.

    ``changes`` is empty when the file already matches (the text is then returned unchanged).
    """
    try:
        doc = tomlkit.parse(text)
    except TOMLKitError as exc:
        raise ConfigError("the existing file is not valid TOML (%s)" % exc) from exc
    version = doc.get("version")
    version = version.unwrap() if hasattr(version, "unwrap") else version
    if version not in CRI_RUNTIME_PLUGIN:
        raise ConfigError("config version %r is not supported (2 for containerd 1.6/1.7, 3 for 2.x)" % (version,))
    if runtime_name == inherit_from:
        raise ConfigError("runtime_name and inherit_from must differ (both %r)" % runtime_name)
    reserved = sorted(set(runtime_settings or {}) & {"options", "runtime_type"})
    if reserved:
        raise ConfigError("runtime_settings must not set %s (use runtime_options / the shim is fixed)" % reserved)
    changes = []
    plugin_name = CRI_RUNTIME_PLUGIN[version]
    plugins = _table(doc, "plugins", changes, "plugins")
    cri = _table(plugins, plugin_name, changes, "plugins.%s" % plugin_name)
    cri_path = 'plugins."%s"' % plugin_name
    ctr = _table(cri, "containerd", changes, cri_path + ".containerd")
    runtimes = _table(ctr, "runtimes", changes, cri_path + ".containerd.runtimes")

    base = runtimes.get(inherit_from)
    base_options = base.get("options", {}) if base is not None else {}
    rt_path = "%s.containerd.runtimes.%s" % (cri_path, runtime_name)
    if runtime_name not in runtimes:
        # A new runtime starts as a copy of the base runtime's settings (runc: SystemdCgroup, ...).
        new = tomlkit.table()
        for key, value in (base or {}).items():
            if key != "options" and not isinstance(value, dict):
                new[key] = value.unwrap() if hasattr(value, "unwrap") else value
        new["runtime_type"] = RUNC_V2_SHIM
        options = tomlkit.table()
        for key, value in base_options.items():
            if not _is_binary_name(key):
                options[key] = value.unwrap() if hasattr(value, "unwrap") else value
        options["BinaryName"] = binary_name
        for key, value in (runtime_options or {}).items():
            options[key] = value
        for key, value in (runtime_settings or {}).items():
            new[key] = value
        new["options"] = options
        runtimes.add(runtime_name, new)
        changes.append("added runtime [%s] (%s, BinaryName %s)" % (rt_path, RUNC_V2_SHIM, binary_name))
    else:
        rt = runtimes[runtime_name]
        _set(rt, "runtime_type", RUNC_V2_SHIM, changes, rt_path)
        for key, value in (runtime_settings or {}).items():
            _set(rt, key, value, changes, rt_path)
        options = _table(rt, "options", changes, rt_path + ".options")
        for key in [k for k in options if _is_binary_name(k) and k != "BinaryName"]:
            changes.append("removed %s.options.%s = %r (containerd 2.x may read it as BinaryName)"
                           % (rt_path, key, options[key]))
            del options[key]
        _set(options, "BinaryName", binary_name, changes, rt_path + ".options")
        # Keep inheriting the base runtime's options: a later SystemdCgroup switch on runc must follow. Zero values
        # ('', 0, false) that the runtime does not carry are containerd's defaults anyway and are not added.
        for key, value in base_options.items():
            value = value.unwrap() if hasattr(value, "unwrap") else value
            if _is_binary_name(key) or key in (runtime_options or {}) or (key not in options and not value):
                continue
            _set(options, key, value, changes, rt_path + ".options")
        for key, value in (runtime_options or {}).items():
            _set(options, key, value, changes, rt_path + ".options")

    default_path = cri_path + ".containerd"
    if set_as_default:
        _set(ctr, "default_runtime_name", runtime_name, changes, default_path)
    elif ctr.get("default_runtime_name") == runtime_name:
        # Switching to RuntimeClass mode: give the default back to the base runtime.
        _set(ctr, "default_runtime_name", inherit_from, changes, default_path)
    if enable_cdi is not None:
        _set(cri, "enable_cdi", bool(enable_cdi), changes, cri_path)

    imports = [str(i) for i in doc.get("imports", [])]
    new_text = tomlkit.dumps(doc) if changes else text
    return new_text, changes, version, imports


def candidate_text(text, live_path, glob=None):
    """The config ``text`` as it is validated at a temporary path next to ``live_path``, meaning what it will mean
    at the live path.

    containerd loads the main file, then its imports breadth first, and skips any file it has already loaded - so at
    the live path an import of the file itself (``imports = ["/etc/containerd/config.toml"]``, or a glob that
    matches it, as some hand-written files have) is a no-op. A candidate at another path would instead import the
    old live file and let it override the new settings. The candidate therefore lists its imports resolved as
    containerd resolves them from the live path (clean, relative to the file's folder, globs expanded), without the
    live file. Imports of imported files are left as they are: they still name the live path, which containerd then
    loads once.
    """
    try:
        doc = tomlkit.parse(text)
    except TOMLKitError:
        return text
    imports = doc.get("imports")
    if not imports:
        return text
    glob = glob or _glob
    live = os.path.normpath(live_path)
    resolved = []
    for entry in imports:
        entry = os.path.normpath(str(entry))
        if not os.path.isabs(entry):
            entry = os.path.normpath(os.path.join(os.path.dirname(live), entry))
        matches = sorted(glob(entry)) if "*" in entry else [entry]
        resolved.extend(path for path in matches if os.path.normpath(path) != live)
    if resolved == [str(entry) for entry in imports]:
        return text
    doc["imports"] = resolved
    return tomlkit.dumps(doc)


def _glob(pattern):
    return globmod.glob(pattern)


def _same_dir(one, other):
    # /var/run is a link to /run on every systemd distribution: a spec dir named either way is the same folder.
    def canonical(path):
        path = os.path.normpath(str(path))
        return "/run" + path[len("/var/run"):] if path == "/var/run" or path.startswith("/var/run/") else path
    return canonical(one) == canonical(other)


def effective_problems(dump, runtime_name="nvidia", binary_name="/usr/bin/nvidia-container-runtime",
                       set_as_default=True, enable_cdi=None):
    """What is wrong with containerd's effective configuration (``containerd config dump``: the file with its
    imports and drop-ins merged) for the wanted runtime; empty when containerd will do what was asked.

    With ``enable_cdi`` true and ``set_as_default`` false (CDI mode) the runtime must not be the default either (a
    drop-in that makes it so hands the GPUs to every container), and containerd must scan ``CDI_SPEC_DIR``."""
    try:
        doc = tomlkit.parse(dump or "")
    except TOMLKitError as exc:
        return ["cannot read 'containerd config dump' (%s)" % exc]
    plugins = doc.get("plugins") or {}
    cri = next((plugins[name] for name in (CRI_RUNTIME_PLUGIN[3], CRI_RUNTIME_PLUGIN[2]) if name in plugins), None)
    if cri is None:
        return ["the CRI plugin has no runtime settings in the effective configuration (disabled?)"]
    ctr = cri.get("containerd") or {}
    problems = []
    default = ctr.get("default_runtime_name")
    if set_as_default and default != runtime_name:
        problems.append("the effective default_runtime_name is %r, not %r" % (default, runtime_name))
    elif enable_cdi and not set_as_default and default == runtime_name:
        problems.append("the effective default_runtime_name is %r, which would give every container the GPUs in CDI "
                        "mode" % runtime_name)
    if enable_cdi:
        if cri.get("enable_cdi") is not True:
            problems.append("the effective enable_cdi is %r, not true" % (cri.get("enable_cdi"),))
        dirs = [str(path) for path in cri.get("cdi_spec_dirs") or []]
        if not any(_same_dir(path, CDI_SPEC_DIR) for path in dirs):
            problems.append("the effective cdi_spec_dirs (%s) leave out %s, where the CDI specs are written"
                            % (", ".join(dirs) or "none", CDI_SPEC_DIR))
    runtime = (ctr.get("runtimes") or {}).get(runtime_name)
    if runtime is None:
        problems.append("the effective configuration has no runtime %r" % runtime_name)
        return problems
    names = {str(k): str(v) for k, v in (runtime.get("options") or {}).items() if _is_binary_name(k)}
    if set(names.values()) != {binary_name}:
        problems.append("runtime %r effectively runs %s, not %s"
                        % (runtime_name, ", ".join("%s = %s" % item for item in sorted(names.items())) or "runc's "
                           "default binary (no BinaryName)", binary_name))
    return problems


# Keys whose values are credentials in containerd configs (registry auth of the CRI plugin, as kubespray, k3s and
# hand-written files set them).
_SECRET_KEY = re.compile(r'^(\s*["\']?(?:password|auth|identitytoken|identity_token|token|secret)["\']?\s*=\s*).+$',
                         re.IGNORECASE | re.MULTILINE)


def redact(text):
    """The file with credential values replaced, for diffs and messages (the file itself is written unredacted)."""
    return _SECRET_KEY.sub(r'\1"<redacted>"', text or "")


# k3s and RKE2 write their containerd config at every start from a template and mark it so; an edit to it is lost
# at the next restart of the service.
_GENERATED = re.compile(r"^#\s*File generated by (\S+?)\.\s*DO NOT EDIT\.\s*Use (\S+) instead", re.MULTILINE)


def generated_by(text):
    """(program, template) when the file says it is regenerated from a template (k3s, RKE2), else None."""
    match = _GENERATED.search(text or "")
    return (match.group(1), match.group(2)) if match else None


def generated_file_message(path, program, template):
    """Why a generated file is not edited, and how that distribution wants the nvidia runtime set."""
    return ("%s is generated by %s at every start (its header says: DO NOT EDIT, use %s): an edit here is lost at "
            "the next restart. %s adds an 'nvidia' runtime itself when it finds nvidia-container-runtime at start; "
            "make it the default with 'default-runtime: nvidia' in /etc/rancher/%s/config.yaml (or use the "
            "RuntimeClass 'nvidia' with container_runtime_set_as_default: false), or write your own %s next to "
            "the file (config-v3.toml.tmpl for containerd 2)" % (path, program, template, program, program, template))
