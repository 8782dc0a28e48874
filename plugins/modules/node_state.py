#!/usr/bin/python
# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: node_state
short_description: Record the state a node role converged to, for the next run's fast path
version_added: 0.1.0
description:
  - Records a stamp under C(/var/lib/gpufleet/stamps/<name>.json) - the digest of the role's inputs, a spec of
    the state the role manages (files, directory trees, directory listings, packages, services), that state as
    observed now, and optional data the role wants back on the next run.
  - Installs the executable local fact C(gpufleet_state.fact) in O(fact_path). During fact gathering it observes
    every stamp's spec again and reports, per stamp, the digest, whether the node still matches (C(intact)), what
    drifted and the data - as C(ansible_local.gpufleet_state), without a round trip of its own.
  - The node roles of this collection skip their tasks when their stamp's digest equals the digest of this run's
    inputs and the stamp is intact, and run in full otherwise.
author:
  - gpufleet maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.vgpu.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
options:
  name:
    description: Name of the stamp, usually the role's name.
    type: str
    required: true
  state:
    description: V(present) records the stamp, V(absent) removes it (the next run then runs the role in full).
    type: str
    choices: [present, absent]
    default: present
  digest:
    description: Digest of the role's inputs. Required with O(state=present).
    type: str
  spec:
    description: The state to watch. Required with O(state=present).
    type: dict
    suboptions:
      files:
        description: Files (absolute paths) whose content and mode are watched; a file may be absent.
        type: list
        elements: path
      trees:
        description: Directories whose whole content (names, modes, link targets, file contents) is watched.
        type: list
        elements: path
      listings:
        description: Glob patterns of directories whose entry names are watched (for example C(/lib/modules)).
        type: list
        elements: str
      packages:
        description: Packages whose installed versions are watched.
        type: list
        elements: str
      package_manager:
        description: The database that O(spec.packages) are looked up in.
        type: str
        choices: [rpm, dpkg]
      services:
        description: systemd units whose enablement and activity are watched.
        type: list
        elements: str
  data:
    description: Facts the role gets back from the stamp on the next run (for example a decision it made).
    type: dict
    default: {}
  fact_path:
    description: Where Ansible looks for local facts (C(fact_path) of M(ansible.builtin.setup)).
    type: path
    default: /etc/ansible/facts.d
notes:
  - The fact runs with the interpreter that ran this module. A tree of more than 2000 files is not hashed, so that
    fact gathering stays fast, and always counts as drift (the role then always runs in full).
seealso:
  - module: ansible.builtin.setup
"""

EXAMPLES = r"""
# In a role: the controller decides (action gpufleet.vgpu.fast_path), a full run records what it converged to.
- name: Fast path
  gpufleet.vgpu.fast_path:
  register: fast

- name: Record what this role converged to
  gpufleet.vgpu.node_state:
    name: container_runtime
    digest: "{{ fast.digest }}"
    spec:
      trees: [/etc/containerd]
      packages: [containerd, nvidia-container-toolkit]
      package_manager: rpm
      services: [containerd.service]
  when: not fast.converged and not ansible_check_mode
"""

RETURN = r"""
stamp:
  description: Path of the stamp.
  returned: always
  type: str
  sample: /var/lib/gpufleet/stamps/container_runtime.json
observed:
  description: The state observed for O(spec) (with O(state=present)).
  returned: success
  type: dict
drift:
  description: What differs from the previous stamp of the same name (empty when there was none or nothing differs).
  returned: success
  type: list
  elements: str
"""

import inspect
import json
import os
import sys

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.vgpu.plugins.module_utils import _atomic as atomic
from ansible_collections.gpufleet.vgpu.plugins.module_utils import _node_state as ns

FACT_NAME = "gpufleet_state.fact"


def main():
    spec_options = dict(
        files=dict(type="list", elements="path"),
        trees=dict(type="list", elements="path"),
        listings=dict(type="list", elements="str"),
        packages=dict(type="list", elements="str"),
        package_manager=dict(type="str", choices=list(ns.PACKAGE_MANAGERS)),
        services=dict(type="list", elements="str"),
    )
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            digest=dict(type="str"),
            spec=dict(type="dict", options=spec_options),
            data=dict(type="dict", default={}),
            fact_path=dict(type="path", default="/etc/ansible/facts.d"),
        ),
        required_if=[("state", "present", ["digest", "spec"])],
        supports_check_mode=True,
    )
    params = module.params
    name = params["name"]
    if not name or "/" in name or name.startswith("."):
        module.fail_json(msg="name must be a plain file name (got %r)" % name)
    path = os.path.join(ns.STAMP_DIR, name + ".json")

    if params["state"] == "absent":
        changed = os.path.exists(path)
        if changed and not module.check_mode:
            os.unlink(path)
        module.exit_json(changed=changed, stamp=path)

    try:
        spec = ns.normalize_spec(params["spec"])
    except ValueError as exc:
        module.fail_json(msg="spec: %s" % exc)

    def run(argv):
        return module.run_command(argv, environ_update={"LC_ALL": "C"})[1]

    observed = ns.observe(spec, run)
    previous = {}
    try:
        with open(path, encoding="utf-8") as handle:
            previous = json.load(handle)
    except (OSError, ValueError):
        pass
    stamp = ns.build_stamp(name, params["digest"], spec, params["data"], observed)
    changed = atomic.write_if_different(module, path, json.dumps(stamp, indent=1, sort_keys=True) + "\n", 0o644)
    # The fact is this collection's _node_state module_utils, run by this interpreter.
    fact = "#!%s\n%s" % (sys.executable, inspect.getsource(ns))
    changed = atomic.write_if_different(module, os.path.join(params["fact_path"], FACT_NAME), fact, 0o755) or changed
    module.exit_json(changed=changed, stamp=path, observed=observed,
                     drift=ns.drift(previous.get("observed") or {}, observed) if previous else [])


if __name__ == "__main__":
    main()
