# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side action for gpufleet.vgpu.capacity_picture (documented in plugins/modules/capacity_picture.py)."""

from __future__ import annotations

import os
import tempfile

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _capacity_picture


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("capacity", "dest"))
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        capacity, dest = self._task.args.get("capacity"), self._task.args.get("dest")
        if not isinstance(capacity, dict) or "nodes" not in capacity or not dest:
            raise AnsibleActionFail("capacity_picture needs capacity (the vgpu_capacity_report filter's result) and "
                                    "dest (a path on the controller)")
        try:
            data = _capacity_picture.png(capacity)
        except ImportError:
            result.update(skipped=True, msg="no picture: Pillow is not installed on the controller "
                                            "(pip install pillow); the Markdown table has the same figures")
            return result
        try:
            with open(dest, "rb") as handle:
                changed = handle.read() != data
        except OSError:
            changed = True
        if changed and not self._task.check_mode:
            directory = os.path.dirname(os.path.abspath(dest))
            fd, part = tempfile.mkstemp(dir=directory, prefix=".gpufleet-")
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.chmod(part, 0o644)
            os.replace(part, dest)
        result.update(changed=changed, dest=dest, size=len(data))
        return result
