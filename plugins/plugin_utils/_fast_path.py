# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node roles' fast path, controller side: the digest of a role's inputs and the verdict on a node's stamp.

The node side (module_utils/_node_state.py) records a stamp of what a role converged to and, as the executable
local fact ``gpufleet_state``, re-observes it during fact gathering. Only observations travel to the controller;
everything that decides lives here, so nothing of it is copied to a node.
"""

from __future__ import annotations

import hashlib
import json
import os

# The node facts whose change can change what a node role does (packages, repositories, kernel modules).
STATE_FACTS = ("os_family", "distribution", "distribution_version", "architecture", "kernel", "virtualization_type")
# Facts older than this (seconds) come from a cache, not from this run: they do not show the node's present state.
MAX_FACT_AGE = 300
# Files that never change what a role does on a node.
_IGNORED_SUFFIXES = (".pyc", ".pyo", ".md")


def tree_digest(directories):
    """One SHA-256 over the relative paths and contents of the files under each directory, in a stable order.

    Compiled Python and Markdown documentation are left out. Raises ValueError for a path that is not a directory.
    """
    digest = hashlib.sha256()
    for top in directories:
        top = os.path.realpath(top)
        if not os.path.isdir(top):
            raise ValueError("%s is not a directory" % top)
        for root, dirs, files in os.walk(top):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith(_IGNORED_SUFFIXES):
                    continue
                path = os.path.join(root, name)
                digest.update(os.path.relpath(path, top).encode() + b"\0")
                with open(path, "rb") as handle:
                    digest.update(hashlib.sha256(handle.read()).digest())
    return digest.hexdigest()


def input_names(role, argument_specs):
    """The role's inputs: the options of its ``main`` entry point, less its own ``<role>_fast_path`` switch.

    ``argument_specs`` is the content of the role's meta/argument_specs.yml. Variables the role sets for later roles
    (outputs such as node_python_interpreter) are not options, so a run that sets them never changes the digest.
    """
    try:
        options = argument_specs["argument_specs"]["main"]["options"]
    except (KeyError, TypeError):
        raise ValueError("role %s has no options in meta/argument_specs.yml (argument_specs.main.options)" % role)
    return sorted(name for name in options if name != role + "_fast_path")


def inputs_digest(options, facts, code):
    """SHA-256 of a role's option values, the node facts in STATE_FACTS and the digest of gpufleet's code."""
    inputs = {
        "options": options,
        "facts": {key: facts.get(key) for key in STATE_FACTS},
        "code": code,
    }
    # default=str: templated values may be subclasses of str/int that json knows; anything else is compared by text.
    return hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode()).hexdigest()


def verdict(facts, name, digest, enabled=True, now=None, max_age=MAX_FACT_AGE):
    """Whether a role may skip its tasks: ``{"converged": bool, "reason": str}``.

    ``facts`` are the host's gathered facts (``ansible_local.gpufleet_state`` and ``date_time.epoch``), ``digest``
    that of this run's inputs, ``now`` the controller's epoch: facts older than ``max_age`` seconds (a fact cache)
    no longer tell the node's present state.
    """
    if not enabled:
        return {"converged": False, "reason": "the fast path is off"}
    local = (facts.get("ansible_local") or {}).get("gpufleet_state")
    if not isinstance(local, dict):
        return {"converged": False, "reason": "no state recorded yet" if local is None else "the state fact failed: %s" % local}
    stamp = local.get(name)
    if not isinstance(stamp, dict) or not stamp.get("digest"):
        return {"converged": False, "reason": "no state recorded yet" if stamp is None
                else "; ".join((stamp or {}).get("drift") or ["the stamp is unreadable"])}
    if stamp["digest"] != digest:
        return {"converged": False, "reason": "the inputs differ from the last run (options, facts or gpufleet's code)"}
    if not stamp.get("intact"):
        return {"converged": False, "reason": "changed on the node: %s" % "; ".join(stamp.get("drift") or ["unknown"])}
    if now is not None:
        try:
            age = abs(float(now) - float((facts.get("date_time") or {})["epoch"]))
        except (KeyError, TypeError, ValueError):
            return {"converged": False, "reason": "the facts carry no time (gather_subset without date_time)"}
        if age > max_age:
            return {"converged": False, "reason": "the facts are %d s old (a fact cache?)" % age}
    return {"converged": True, "reason": "unchanged since the last run"}
