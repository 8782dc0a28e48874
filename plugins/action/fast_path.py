# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side action for gpufleet.vgpu.fast_path (documented in plugins/modules/fast_path.py)."""

from __future__ import annotations

import os
import time

from ansible.errors import AnsibleActionFail
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _fast_path
from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _role_values

# plugins/action/.. : every plugin of this collection, found from this file rather than from a role's path.
_PLUGINS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("enabled", "role"))
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        # Ansible's magic variables of the role this task belongs to; absent outside a role, where `role` names it
        # (site.yml's decision which nodes a run disrupts asks before the role runs).
        name, role_path = (task_vars.get("role_name") or "").split(".")[-1], task_vars.get("role_path")
        outside = self._task.args.get("role")
        if outside:
            name, role_path = outside, _role_values.role_path(outside)
        if not name or not role_path or not os.path.isdir(role_path):
            raise AnsibleActionFail("fast_path runs inside a node role, or names one (role), got %r" % (outside,))
        try:
            enabled = boolean(self._task.args.get("enabled", True), strict=True)
        except TypeError as exc:
            raise AnsibleActionFail("fast_path: enabled must be a boolean: %s" % exc)

        specs_path = os.path.join(role_path, "meta", "argument_specs.yml")
        try:
            names = _fast_path.input_names(name, self._loader.load_from_file(specs_path))
            code = _fast_path.tree_digest([role_path, _PLUGINS_DIR])
        except ValueError as exc:
            raise AnsibleActionFail("fast_path: %s" % exc)
        # An option the inventory leaves unset and the role gives no default is None here, as in the role; outside
        # the role its defaults come from its defaults file, so both compute the same digest.
        found = _role_values.values(self._templar, names, task_vars,
                                    _role_values.defaults(self._loader, name) if outside else None)
        options = {option: found.get(option) for option in names}
        facts = task_vars.get("ansible_facts") or {}
        digest = _fast_path.inputs_digest(options, facts, code)
        decision = _fast_path.verdict(facts, name, digest, enabled=enabled, now=time.time())
        host = task_vars.get("inventory_hostname", "")
        result.update(
            changed=False,
            converged=decision["converged"],
            reason=decision["reason"],
            digest=digest,
            msg="%s: %s: %s" % (host, "skipping every task" if decision["converged"] else "running every task",
                                decision["reason"]),
            # Shown like a debug task's message: the run says, per node, why a role ran or was skipped.
            _ansible_verbose_always=True,
        )
        return result
