#!/usr/bin/python
# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: containerd_runtime
short_description: Own the NVIDIA runtime section of containerd's config.toml
version_added: 0.1.0
description:
  - Adds the runtime O(runtime_name) (runc v2 shim whose C(BinaryName) is the NVIDIA Container Toolkit's runtime,
    inheriting the options of O(inherit_from) such as C(SystemdCgroup)) and makes it containerd's default runtime,
    or leaves the default alone for use through a RuntimeClass.
  - Writes config format 2 (containerd 1.6/1.7, plugin C(io.containerd.grpc.v1.cri)) or 3 (containerd 2.x, plugin
    C(io.containerd.cri.v1.runtime)) according to the file's C(version); a file that does not exist, has no
    C(version) or disables CRI (as the C(containerd.io) package ships it) is first replaced by
    C(containerd config default) of the installed containerd.
  - Everything else in the file is kept byte for byte, comments included. A second run changes nothing, unlike
    C(nvidia-ctk runtime configure), which rewrites the file each time.
  - The candidate is checked with C(containerd --config <candidate> config dump) before it replaces the live file
    (in check mode too), and so is the effective result, drop-ins under C(imports) included - the default runtime
    must be O(runtime_name) and its binary O(binary_name); otherwise the module fails naming the imports. The
    previous file is kept as a backup.
  - The base runtime's binary name is never copied, in any capitalisation (containerd 2.x may read a lowercase
    C(binaryName) as C(BinaryName)). A version-less or CRI-disabled file that holds more than the package's stub is
    refused, naming the settings C(containerd config default) would lose.
  - Restarting containerd is left to the caller (role M(gpufleet.vgpu.container_runtime) does it in a handler
    that restores the backup when containerd does not come back).
author:
  - gpufleet maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.vgpu.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
options:
  path:
    description: containerd's configuration file.
    type: path
    default: /etc/containerd/config.toml
  runtime_name:
    description: Name of the runtime to manage.
    type: str
    default: nvidia
  binary_name:
    description: The OCI runtime binary the runc shim calls (the toolkit's C(nvidia-container-runtime)).
    type: path
    default: /usr/bin/nvidia-container-runtime
  set_as_default:
    description:
      - Make O(runtime_name) containerd's default runtime. Needed by device plugins whose pods have no
        C(runtimeClassName), such as the volcano-vgpu-device-plugin.
      - With V(false), the default is left alone (or given back to O(inherit_from) if it was O(runtime_name)).
    type: bool
    default: true
  enable_cdi:
    description:
      - Set the CRI plugin's C(enable_cdi). Omitted leaves the file's value.
      - With V(true) the effective configuration must also scan C(/var/run/cdi) (C(cdi_spec_dirs); containerd's
        default does), and containerd must be 1.7.2 or newer, the first to read CDI devices from the CRI field
        kubelet fills in from a device plugin; older ones are refused before anything is written.
      - With V(true) and O(set_as_default=false) (CDI mode), an effective configuration where O(runtime_name) is
        still the default, through a drop-in, is refused.
    type: bool
  inherit_from:
    description: Runtime whose settings and options the managed runtime copies.
    type: str
    default: runc
  runtime_options:
    description: Extra keys for the managed runtime's C(options) table; they win over inherited values.
    type: dict
    default: {}
  runtime_settings:
    description:
      - Extra keys of the managed runtime's own table, such as C(privileged_without_host_devices) or
        C(pod_annotations). C(options) and C(runtime_type) are not allowed here.
      - Values are checked by containerd's validation before the file is replaced.
    type: dict
    default: {}
  backup:
    description: Keep a timestamped copy of the previous file next to it.
    type: bool
    default: true
  containerd_binary:
    description: The containerd executable, used for its version, C(config default) and validation.
    type: str
    default: containerd
requirements:
  - tomlkit on the node (role M(gpufleet.vgpu.node_python) installs it)
  - containerd 1.6 or newer
seealso:
  - name: Role gpufleet.vgpu.container_runtime
    description: Installs the toolkit, runs this module and restarts containerd safely.
    link: https://github.com/gpufleet/gpufleet/tree/main/roles/container_runtime
"""

EXAMPLES = r"""
- name: Make nvidia containerd's default runtime
  gpufleet.vgpu.containerd_runtime:
  vars:
    ansible_python_interpreter: "{{ node_python_interpreter }}"
  register: containerd_config
  notify: Restart containerd

- name: RuntimeClass mode with CDI
  gpufleet.vgpu.containerd_runtime:
    set_as_default: false
    enable_cdi: true
"""

RETURN = r"""
config_version:
  description: Config format version of the file (2 or 3).
  returned: success
  type: int
  sample: 2
containerd_version:
  description: Version of the installed containerd.
  returned: success
  type: str
  sample: 1.6.20~ds1
changes:
  description: What was (or, in check mode, would be) changed.
  returned: success
  type: list
  elements: str
  sample: ["added runtime [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia] ..."]
replaced_base:
  description: Why the existing file was replaced by C(containerd config default) first, or V(null).
  returned: success
  type: str
  sample: has no 'version' key (read as the obsolete version 1)
backup_file:
  description: The backup of the previous file, when one was written.
  returned: changed and a previous file existed
  type: str
  sample: /etc/containerd/config.toml.12345.2026-11-29@10:00:00~
imports:
  description: Files the config imports; settings there override this file.
  returned: success
  type: list
  elements: str
"""

import os
import tempfile
import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.gpufleet.vgpu.plugins.module_utils import _containerd_config as cc

try:
    import tomlkit  # noqa: F401  pylint: disable=unused-import
except ImportError:
    TOMLKIT_IMPORT_ERROR = traceback.format_exc()
else:
    TOMLKIT_IMPORT_ERROR = None


def _read(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def _run(module, args, what):
    rc, out, err = module.run_command(args)
    if rc != 0:
        module.fail_json(msg="%s failed (rc=%d): %s" % (what, rc, (err or out).strip()), cmd=args)
    return out


def _validate(module, binary, text, directory, path, imports):
    """Reject a candidate that containerd itself cannot load, or whose effective configuration (imports and drop-ins
    merged, as containerd reads it) does not run the wanted runtime; the live file is not touched."""
    params = module.params
    # Next to the live file: containerd resolves relative imports from the config file's folder.
    fd, candidate = tempfile.mkstemp(prefix=".config.toml.candidate.", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(cc.candidate_text(text, path))
        rc, out, err = module.run_command([binary, "--config", candidate, "config", "dump"])
    finally:
        os.unlink(candidate)
    if rc != 0:
        # The candidate itself is not returned: config.toml may hold registry credentials.
        module.fail_json(msg="containerd rejected the new configuration, the live file is unchanged: %s"
                             % (err or out).strip())
    problems = cc.effective_problems(out, params["runtime_name"], params["binary_name"], params["set_as_default"],
                                     params["enable_cdi"])
    if problems:
        module.fail_json(msg="%s: %s%s; the live file is unchanged" % (
            path, "; ".join(problems),
            " - a file imported by it (%s) overrides these settings: set them there or remove that drop-in"
            % ", ".join(imports) if imports else ""))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", default="/etc/containerd/config.toml"),
            runtime_name=dict(type="str", default="nvidia"),
            binary_name=dict(type="path", default="/usr/bin/nvidia-container-runtime"),
            set_as_default=dict(type="bool", default=True),
            enable_cdi=dict(type="bool"),
            inherit_from=dict(type="str", default="runc"),
            runtime_options=dict(type="dict", default={}),
            runtime_settings=dict(type="dict", default={}),
            backup=dict(type="bool", default=True),
            containerd_binary=dict(type="str", default="containerd"),
        ),
        supports_check_mode=True,
    )
    if not cc.HAS_TOMLKIT:
        module.fail_json(msg=missing_required_lib("tomlkit"), exception=TOMLKIT_IMPORT_ERROR)
    params = module.params
    path = params["path"]
    binary = module.get_bin_path(params["containerd_binary"])
    if binary is None:
        module.fail_json(msg="containerd (%s) is not installed on this node; install it before configuring "
                             "its runtimes" % params["containerd_binary"])

    try:
        containerd_version = cc.parse_containerd_version(_run(module, [binary, "--version"], "containerd --version"))
        cc.config_version_for(containerd_version)
        if params["enable_cdi"]:
            problem = cc.cdi_support_problem(containerd_version)
            if problem:
                module.fail_json(msg="%s: enable_cdi: %s; the live file is unchanged" % (path, problem),
                                 containerd_version=containerd_version)
        before = _read(path)
        generated = cc.generated_by(before)
        if generated:
            module.fail_json(msg=cc.generated_file_message(path, *generated), generated_by=generated[0])
        reason = cc.base_replacement_reason(before)
        base = _run(module, [binary, "config", "default"], "containerd config default") if reason else before
        after, changes, version, imports = cc.apply(
            base,
            runtime_name=params["runtime_name"],
            binary_name=params["binary_name"],
            set_as_default=params["set_as_default"],
            enable_cdi=params["enable_cdi"],
            inherit_from=params["inherit_from"],
            runtime_options=params["runtime_options"],
            runtime_settings=params["runtime_settings"],
        )
    except cc.ConfigError as exc:
        module.fail_json(msg="%s: %s" % (path, exc))

    if version == 3 and containerd_version.startswith("1."):
        module.fail_json(msg="%s has config version 3, which containerd %s cannot read; use version 2 or upgrade "
                             "containerd" % (path, containerd_version))
    if reason:
        changes.insert(0, "replaced the existing file (%s) with 'containerd config default'" % reason)
    result = dict(
        changed=after != before,
        changes=changes,
        config_version=version,
        containerd_version=containerd_version,
        replaced_base=reason,
        imports=imports,
        # Registry credentials in config.toml must not reach the logs: the diff shows them redacted.
        diff=dict(before=cc.redact(before), after=cc.redact(after), before_header=path, after_header=path),
    )
    directory = os.path.dirname(path) or "."
    # Validated in check mode too (a temporary candidate, removed again), so that check mode predicts what a real run
    # does; on a node without the folder yet there is nothing to import.
    if os.path.isdir(directory):
        _validate(module, binary, after, directory, path, imports)
    if not result["changed"] or module.check_mode:
        module.exit_json(**result)

    if not os.path.isdir(directory):
        os.makedirs(directory, 0o755)
        _validate(module, binary, after, directory, path, imports)
    if before is not None and params["backup"]:
        result["backup_file"] = module.backup_local(path)
    fd, tmp = tempfile.mkstemp(prefix=".config.toml.", dir=directory)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(after)
    # atomic_move carries an existing file's mode over (a 0600 config holding registry credentials stays 0600).
    os.chmod(tmp, 0o644)
    module.atomic_move(tmp, path)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
