# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side action for gpufleet.vgpu.role_plan (documented in plugins/modules/role_plan.py)."""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.vgpu.plugins.module_utils import _contract
from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _gpu_hosts
from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _kube_auth
from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _planners
from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _role_options
from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _role_values


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
        try:
            options = _role_values.options(self._loader, role)
        except ValueError as exc:
            raise AnsibleActionFail("role_plan: role %s: %s" % (role, exc))
        defaults = _role_values.defaults(self._loader, role)
        values = {name: _role_options.plain(value) for name, value in _role_values.values(
            self._templar, options, task_vars, defaults if role != current else None).items()}
        errors = _role_options.check(options, values)
        if role in _kube_auth.ROLES and task_vars.get(_kube_auth.VARIABLE):
            errors += _role_options.check(_kube_auth.SPEC, {
                _kube_auth.VARIABLE: _role_options.plain(self._templar.template(task_vars[_kube_auth.VARIABLE]))})
        if not errors:
            context = self._context(role, values, task_vars)
            # The role's defaults as written: the keys a partial dict of the inventory leaves out come from there.
            context["defaults"] = _role_options.plain(defaults)
            planned = _planners.plan(role, values, context)
            errors = planned.pop("errors")
            result.update(planned)
        result.update(changed=False, errors=errors)
        if errors:
            # One message per failed rule; each names its variable, the value and what is allowed.
            result.update(failed=True, msg="%s: %s" % (role, "; ".join(errors)))
        else:
            result["msg"] = "%s: settings checked" % role
        return result

    def _context(self, role, values, task_vars):
        hostvars = task_vars.get("hostvars") or {}
        context = {"inventory_hosts": list(hostvars.keys()) if hasattr(hostvars, "keys") else [],
                   "host_vars": {name: task_vars.get(name) for name in (_gpu_hosts.VGPU, _gpu_hosts.NODE_NAME)}}
        facts = task_vars.get("ansible_facts") or {}
        if facts.get("os_family"):
            # Where the check runs on a host whose facts are gathered: settings that its OS release cannot satisfy.
            context["os"] = {"family": facts.get("os_family"), "major": facts.get("distribution_major_version"),
                             "distribution": facts.get("distribution")}
        if role == "device_plugin":
            context["hosts"] = _gpu_hosts.read(values.get("device_plugin_gpu_hosts") or [], hostvars)
            context["runtime"] = _gpu_hosts.runtime_mode(values.get("device_plugin_gpu_hosts") or [], hostvars)
            cluster = self._task.args.get("cluster") or {}
            context["nodes"] = cluster.get("nodes") or []
            # The factor the registrations were made under: the cluster's device ConfigMap as read, or the one
            # this run applied.
            given = cluster.get("memory_factor")
            context["registered_factor"] = (int(given) if given not in (None, "") else
                                            _contract.memory_factor(cluster.get("device_configmap")))
        return context
