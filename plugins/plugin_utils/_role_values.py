# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A role's option values as the role sees them, from an action running inside the role or outside it (controller
only): the inventory's value, else the role's default, templated. Actions role_plan and fast_path share it, so a
role's settings read from a preflight or a decision play are the values the role itself works with.
"""

from __future__ import annotations

import os

from ansible.errors import AnsibleError

from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _role_options

try:  # ansible-core 2.19 renders only templates it trusts: a role's defaults, read here, are the role's own
    from ansible.template import trust_as_template
except ImportError:  # before 2.19 every string is a template
    def trust_as_template(value):
        return value

# plugins/plugin_utils/../../roles: the collection's roles, found from this file (a playbook may run from anywhere).
ROLES_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "roles")


def role_path(role):
    return os.path.join(ROLES_DIR, role)


def options(loader, role, entry="main"):
    """The options of a role's argument spec entry point; ValueError when there are none."""
    return _role_options.spec_options(loader.load_from_file(os.path.join(role_path(role), "meta",
                                                                         "argument_specs.yml")), entry)


def defaults(loader, role):
    """The role's defaults file as written."""
    path = os.path.join(role_path(role), "defaults", "main.yml")
    return (loader.load_from_file(path) or {}) if os.path.exists(path) else {}


def trusted(value):
    """The strings of a role's defaults file, read by an action, trusted as the role's templates."""
    if isinstance(value, dict):
        return {key: trusted(item) for key, item in value.items()}
    if isinstance(value, list):
        return [trusted(item) for item in value]
    return trust_as_template(value) if isinstance(value, str) else value


def values(templar, names, task_vars, role_defaults=None):
    """{option: value} as the role sees them. Inside the role its defaults are in task_vars already
    (``role_defaults`` None); outside it they come from its defaults file, under the inventory's values. An option
    that cannot be templated yet (a default that needs facts, before any host was contacted) is left out."""
    variables = dict(trusted(role_defaults), **task_vars) if role_defaults is not None else dict(task_vars)
    engine = templar.copy_with_new_env(available_variables=variables)
    found = {}
    for name in names:
        if name not in variables:
            continue
        try:
            found[name] = engine.template(variables[name])
        except AnsibleError:
            continue
    return found
