# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: code_digest
short_description: One digest over the files under directories on the controller
version_added: 0.1.0
author: gpufleet maintainers (@gpufleet)
description:
  - Walks every directory given (recursively, in a stable order, skipping C(__pycache__), compiled files and
    Markdown documentation) and returns one SHA-256 over the relative paths and contents of the files found.
  - The node roles put it into the digest of their inputs, so that a new version of gpufleet's code never takes the
    fast path of state recorded by an older one.
options:
  _terms:
    description: Directories on the controller.
    type: list
    elements: path
    required: true
"""

EXAMPLES = r"""
- name: Digest the role's and the collection's plugin code
  ansible.builtin.debug:
    msg: "{{ lookup('gpufleet.vgpu.code_digest', role_path, role_path ~ '/../../plugins') }}"
"""

RETURN = r"""
_raw:
  description: The hex SHA-256 digest (one element).
  type: list
  elements: str
"""

import hashlib
import os

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase


def tree_digest(directories):
    digest = hashlib.sha256()
    for top in directories:
        top = os.path.realpath(top)
        if not os.path.isdir(top):
            raise AnsibleLookupError("code_digest: %s is not a directory" % top)
        for root, dirs, files in os.walk(top):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                # Documentation does not change what a role does on a node.
                if name.endswith((".pyc", ".pyo", ".md")):
                    continue
                path = os.path.join(root, name)
                digest.update(os.path.relpath(path, top).encode() + b"\0")
                with open(path, "rb") as handle:
                    digest.update(hashlib.sha256(handle.read()).digest())
    return digest.hexdigest()


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        return [tree_digest(terms)]
