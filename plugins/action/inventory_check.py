# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side action for gpufleet.vgpu.inventory_check (documented in plugins/modules/inventory_check.py)."""

from __future__ import annotations

import glob
import json
import os
import subprocess

from ansible.plugins.action import ActionBase
from ansible.utils.vars import load_extra_vars

from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _inventory
from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _role_options

_ROLES_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "roles")


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset()
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        groups, hostvars = task_vars.get("groups") or {}, task_vars.get("hostvars") or {}
        errors = _inventory.group_errors(groups)
        export, skipped = self._export(task_vars)
        if export is not None:
            known = set()
            for specs in glob.glob(os.path.join(_ROLES_DIR, "*", "meta", "argument_specs.yml")):
                for entry in (self._loader.load_from_file(specs).get("argument_specs") or {}):
                    known |= set(_role_options.spec_options(self._loader.load_from_file(specs), entry))
            foreign = self._templar.template(task_vars.get(_inventory.FOREIGN) or [])
            errors += _inventory.unknown_variables(export, known, foreign)
            # This run's extra vars as the command line gave them (the worker inherits the CLI's arguments).
            errors += _inventory.pacing_errors(export, load_extra_vars(self._loader))
        errors += _inventory.shape_errors(export or {}, groups.get("gpu_nodes") or [], groups.get("all") or [],
                                          hostvars)
        result.update(changed=False, errors=errors, skipped_checks=skipped)
        if errors:
            result.update(failed=True, msg="; ".join(errors))
        else:
            result["msg"] = "inventory checked" + (" (%s)" % skipped if skipped else "")
        return result

    def _export(self, task_vars):
        """(the inventory as ansible-inventory --export --list prints it, None) or (None, why not): each group's and
        host's own variables, where they are written. It cannot read everything a playbook run can (vaulted
        group_vars without the vault secret): then the checks that need it say they were skipped."""
        argv = [task_vars.get("ansible_playbook_python") or "python3", "-m", "ansible.cli.inventory", "--export",
                "--list"]
        for source in task_vars.get("ansible_inventory_sources") or []:
            argv += ["-i", source]
        proc = subprocess.run(argv, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL)
        try:
            return json.loads(proc.stdout), None
        except ValueError:
            why = (proc.stderr.strip().splitlines() or ["no output"])[-1][:300]
            return None, ("could not read the inventory's groups with ansible-inventory (%s): the checks for "
                          "misspelt variables and for hosts in two groups that set one gpufleet variable differently "
                          "were skipped" % why)
