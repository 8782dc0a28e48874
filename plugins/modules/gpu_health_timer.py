#!/usr/bin/python
# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_health_timer
short_description: Install the files of the GPU health check that runs between playbook runs
version_added: 0.1.0
description:
  - Writes the check's code (the collection's C(_nvml), C(_gpu_policy) and C(_gpu_health) module utilities, the code
    M(gpufleet.vgpu.nvml_info) and the P(gpufleet.vgpu.gpu_verdict#filter) filter run), its configuration and a
    systemd service and timer that run it every O(interval) with O(interpreter).
  - Each run queries NVML, judges the node as role C(gpufleet.vgpu.gpu_verify) does and writes the verdict as
    node_exporter textfile-collector metrics (C(gpufleet_gpu_*)) to O(textfile); the findings go to the journal.
  - With O(run=true) it also enables and starts the timer, and restarts it when a file changed (so that the metrics
    follow the new code and settings at once), in the same call - a rerun that finds everything in place costs one
    round trip to the node. O(state=absent) stops and disables the timer, removes the files and reloads systemd.
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
  state:
    description: V(present) writes the files, V(absent) removes them and the metrics file.
    type: str
    choices: [present, absent]
    default: present
  path:
    description: Directory for the check's code and configuration.
    type: path
    default: /opt/gpufleet/gpu-health
  interpreter:
    description: Python with C(nvidia-ml-py) and C(prometheus-client) (role C(gpufleet.vgpu.node_python)'s). Required
      with O(state=present).
    type: path
  node:
    description: The node's name in the metrics' C(node) label (its Kubernetes node name). Required with
      O(state=present).
    type: str
  expect:
    description: Expectations, as the P(gpufleet.vgpu.gpu_verdict#filter) filter's C(expect) takes them.
    type: dict
    default: {}
  textfile:
    description: The metrics file, in the directory node_exporter's C(--collector.textfile.directory) reads; its name
      must end in C(.prom).
    type: path
    required: true
  interval:
    description: How often the check runs (a systemd time span such as C(1min) or C(30s)).
    type: str
    default: 1min
  unit_dir:
    description: Where the systemd units go.
    type: path
    default: /etc/systemd/system
  xid_source:
    description:
      - Where the check reads the NVIDIA driver's Xid events, each run only what was added since the last.
      - V(auto) reads C(/dev/kmsg) when it can, else the journal's kernel messages (C(journalctl -k)); V(kmsg) and
        V(journal) name one of them; any other value is the path of a log file the kernel's messages go to (for
        example rsyslog's C(/var/log/kern.log)), read from its end at the first run.
    type: str
    default: auto
  run:
    description:
      - Enable and start the timer (after C(systemctl daemon-reload) when a unit file changed), and restart it when
        any file changed. Needs systemd running the system.
      - In check mode on a node where the units do not exist yet there is nothing to start; the result says what
        would be done.
    type: bool
    default: false
notes:
  - The timer runs the check once when it starts and then O(interval) after each run.
  - The check keeps C(state.json) in O(path) (the kernel log's read position, this boot's Xid events, the GPUs of
    the last passed check); O(state=absent) removes it too.
seealso:
  - module: gpufleet.vgpu.nvml_info
  - module: ansible.builtin.systemd_service
"""

EXAMPLES = r"""
- name: Install the GPU health check
  gpufleet.vgpu.gpu_health_timer:
    interpreter: /opt/gpufleet/venv/bin/python
    node: "{{ inventory_hostname }}"
    expect: {expected_count: 5, driver_branch: "570"}
    textfile: /var/lib/node_exporter/textfile_collector/gpufleet_gpu_health.prom
    run: true
"""

RETURN = r"""
files:
  description: The files written (or, with O(state=absent), removed), or that would be in check mode.
  returned: always
  type: list
  elements: str
units_changed:
  description: Whether a systemd unit file changed (systemd must reload its units, and the timer restart).
  returned: always
  type: bool
timer:
  description: What O(run=true) did to the timer (or would do, in check mode).
  returned: with O(run=true) and O(state=present)
  type: str
  choices: [unchanged, started, restarted]
unit:
  description: The timer unit's name.
  returned: always
  type: str
  sample: gpufleet-gpu-health.timer
"""

import inspect
import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.vgpu.plugins.module_utils import _atomic as atomic
from ansible_collections.gpufleet.vgpu.plugins.module_utils import _gpu_health, _gpu_policy, _nvml, _xid

# The code the check runs, under its package path so that its imports work as they do in the collection.
PACKAGE = os.path.join("ansible_collections", "gpufleet", "vgpu", "plugins", "module_utils")
CODE = (_nvml, _xid, _gpu_policy, _gpu_health)


def _read(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return ""


def wanted_files(params):
    """{path: (content, mode)} of everything the check needs."""
    config = os.path.join(params["path"], "config.json")
    files = {os.path.join(params["path"], PACKAGE, module.__name__.rsplit(".", 1)[-1] + ".py"):
             (inspect.getsource(module), 0o644) for module in CODE}
    files[config] = (json.dumps({"node": params["node"], "expect": params["expect"], "textfile": params["textfile"],
                                 "xid_source": params["xid_source"]}, indent=1, sort_keys=True) + "\n", 0o644)
    for name, text in _gpu_health.units(config, params["interpreter"], params["path"], params["interval"]).items():
        files[os.path.join(params["unit_dir"], name)] = (text, 0o644)
    return files


def run_timer(module, unit, changed, units_changed):
    """Enable and start ``unit``, restarted when a file ``changed``: what was (or would be) done."""
    systemctl = module.get_bin_path("systemctl")
    # sd_booted(): systemd runs this system.
    if not systemctl or not os.path.isdir("/run/systemd/system"):
        module.fail_json(msg="run=true needs systemd running this system, and it does not (no /run/systemd/system); "
                             "set run=false and start %s another way" % unit)
    if changed:
        action = "restarted"
    else:
        enabled = module.run_command([systemctl, "is-enabled", unit])[0] == 0
        active = module.run_command([systemctl, "is-active", unit])[0] == 0
        action = "unchanged" if enabled and active else "started"
    if action == "unchanged" or module.check_mode:
        return action
    if units_changed:
        module.run_command([systemctl, "daemon-reload"], check_rc=True)
    module.run_command([systemctl, "enable", unit], check_rc=True)
    module.run_command([systemctl, "restart" if action == "restarted" else "start", unit], check_rc=True)
    return action


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", choices=["present", "absent"], default="present"),
            path=dict(type="path", default="/opt/gpufleet/gpu-health"),
            interpreter=dict(type="path"),
            node=dict(type="str"),
            expect=dict(type="dict", default={}),
            textfile=dict(type="path", required=True),
            interval=dict(type="str", default="1min"),
            unit_dir=dict(type="path", default="/etc/systemd/system"),
            run=dict(type="bool", default=False),
            xid_source=dict(type="str", default="auto"),
        ),
        required_if=[("state", "present", ["interpreter", "node"])],
        supports_check_mode=True,
    )
    params = module.params
    if not params["textfile"].endswith(".prom"):
        module.fail_json(msg="textfile must end in .prom, node_exporter's textfile collector reads no other "
                             "(got %r)" % params["textfile"])
    unit_names = [os.path.join(params["unit_dir"], _gpu_health.UNIT + suffix) for suffix in (".service", ".timer")]
    result = dict(changed=False, files=[], units_changed=False, unit=_gpu_health.UNIT + ".timer")

    if params["state"] == "absent":
        result["files"] = [path for path in sorted(wanted_files(params)) + [
            params["textfile"], os.path.join(params["path"], _gpu_health.STATE_FILE)] if os.path.exists(path)]
        result["units_changed"] = any(path in unit_names for path in result["files"])
        result["changed"] = bool(result["files"])
        if not module.check_mode and result["files"]:
            # sd_booted(): systemd runs this system (a chroot or a container without it has nothing to stop).
            booted = os.path.isdir("/run/systemd/system")
            systemctl = module.get_bin_path("systemctl") if result["units_changed"] and booted else None
            if systemctl:
                # Stopped while its unit is still known; a unit already gone is nothing to stop.
                module.run_command([systemctl, "disable", "--now", result["unit"]])
            for path in result["files"]:
                os.unlink(path)
            if systemctl:
                module.run_command([systemctl, "daemon-reload"], check_rc=True)
        module.exit_json(**result)

    before, after = [], []
    for path, (content, mode) in sorted(wanted_files(params).items()):
        old = _read(path) if module._diff else ""
        if atomic.write_if_different(module, path, content, mode):
            result["files"].append(path)
            if path.endswith((".service", ".timer", "config.json")):
                # The code files are the collection's own: their diff says nothing a reader needs.
                before.append("# %s\n%s" % (path, old))
                after.append("# %s\n%s" % (path, content))
    result["units_changed"] = any(path in unit_names for path in result["files"])
    result["changed"] = bool(result["files"])
    textfile_dir = os.path.dirname(params["textfile"])
    if not os.path.isdir(textfile_dir):
        result["changed"] = True
        result["files"].append(textfile_dir + "/")
        if not module.check_mode:
            os.makedirs(textfile_dir, mode=0o755)
    if module._diff and before + after:
        result["diff"] = dict(before="\n".join(before), after="\n".join(after), before_header="gpu health check",
                              after_header="gpu health check")
    if params["run"]:
        if module.check_mode and result["units_changed"] and not os.path.exists(unit_names[1]):
            # A fresh node in a dry run: the units would be written, so the timer would start.
            result["timer"] = "started"
        else:
            result["timer"] = run_timer(module, result["unit"], result["changed"], result["units_changed"])
        result["changed"] = result["changed"] or result["timer"] != "unchanged"
    module.exit_json(**result)


if __name__ == "__main__":
    main()
