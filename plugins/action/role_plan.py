# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side action for gpufleet.vgpu.role_plan (documented in plugins/modules/role_plan.py)."""

from __future__ import annotations

import os

from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.plugins.action import ActionBase

try:  # ansible-core 2.19 renders only templates it trusts: a role's defaults, read here, are the role's own
    from ansible.template import trust_as_template
except ImportError:  # before 2.19 every string is a template
    def trust_as_template(value):
        return value

from ansible_collections.gpufleet.vgpu.plugins.module_utils import _contract
from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _gpu_hosts
from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _kube_auth
from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _planners
from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _role_options

# plugins/action/../../roles: the collection's roles, found from this file (a playbook may run from anywhere).
_ROLES_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "roles")


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("role", "cluster"))
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        current = (task_vars.get("role_name") or "").split(".")[-1]
        role = self._task.args.get("role") or current
        if role not in _planners.PLANNERS:
            raise AnsibleActionFail("role_plan: role must be one of %s (or the task's own role), got %r"
                                    % (", ".join(sorted(_planners.PLANNERS)), role))
        path = os.path.join(_ROLES_DIR, role)
        try:
            options = _role_options.spec_options(self._loader.load_from_file(
                os.path.join(path, "meta", "argument_specs.yml")))
        except ValueError as exc:
            raise AnsibleActionFail("role_plan: role %s: %s" % (role, exc))
        values = self._values(options, task_vars, path if role != current else None)
        errors = _role_options.check(options, values)
        if role in _kube_auth.ROLES and task_vars.get(_kube_auth.VARIABLE):
            errors += _role_options.check(_kube_auth.SPEC, {
                _kube_auth.VARIABLE: _role_options.plain(self._templar.template(task_vars[_kube_auth.VARIABLE]))})
        if not errors:
            planned = _planners.plan(role, values, self._context(role, values, task_vars))
            errors = planned.pop("errors")
            result.update(planned)
        result.update(changed=False, errors=errors)
        if errors:
            # One message per failed rule; each names its variable, the value and what is allowed.
            result.update(failed=True, msg="%s: %s" % (role, "; ".join(errors)))
        else:
            result["msg"] = "%s: settings checked" % role
        return result

    def _values(self, options, task_vars, defaults_dir):
        """The options as the role sees them: the inventory's value, else the role's default, templated. Inside the
        role its defaults are in task_vars already; from a preflight they are read from its defaults file."""
        variables = dict(task_vars)
        if defaults_dir is not None:
            defaults_file = os.path.join(defaults_dir, "defaults", "main.yml")
            defaults = self._loader.load_from_file(defaults_file) if os.path.exists(defaults_file) else {}
            variables = dict(_trusted(defaults or {}), **task_vars)
        templar = self._templar.copy_with_new_env(available_variables=variables)
        values = {}
        for name in options:
            if name not in variables:
                continue
            try:
                values[name] = _role_options.plain(templar.template(variables[name]))
            except AnsibleError:
                # A default that needs facts (a repository URL with the node's architecture) cannot be known before
                # any host is contacted: left out of the preflight's checks, checked when the role runs.
                continue
        return values

    def _context(self, role, values, task_vars):
        hostvars = task_vars.get("hostvars") or {}
        context = {"inventory_hosts": list(hostvars.keys()) if hasattr(hostvars, "keys") else [],
                   "host_vars": {name: task_vars.get(name) for name in (_gpu_hosts.VGPU, _gpu_hosts.NODE_NAME)}}
        if role == "device_plugin":
            context["hosts"] = _gpu_hosts.read(values.get("device_plugin_gpu_hosts") or [], hostvars)
            cluster = self._task.args.get("cluster") or {}
            context["nodes"] = cluster.get("nodes") or []
            # The factor the registrations were made under: the cluster's device ConfigMap as read, or the one
            # this run applied.
            given = cluster.get("memory_factor")
            context["registered_factor"] = (int(given) if given not in (None, "") else
                                            _contract.memory_factor(cluster.get("device_configmap")))
        return context


def _trusted(value):
    """The strings of a role's defaults file, read by this action, trusted as the role's templates."""
    if isinstance(value, dict):
        return {key: _trusted(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_trusted(item) for item in value]
    return trust_as_template(value) if isinstance(value, str) else value
