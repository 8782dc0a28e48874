# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

from ansible_collections.gpufleet.vgpu.plugins.module_utils import _openpgp


def openpgp_fingerprint(value):
    """The rule module repo_key applies, for the roles' checks before any host changes."""
    return _openpgp.valid_fingerprint(value)


class TestModule:
    """OpenPGP tests."""

    def tests(self):
        return {"openpgp_fingerprint": openpgp_fingerprint}
