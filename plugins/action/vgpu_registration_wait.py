# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side action for gpufleet.vgpu.vgpu_registration_wait (documented in
plugins/modules/vgpu_registration_wait.py).

A wait written as `until:` prints "FAILED - RETRYING" at every poll, which reads as a fault during the normal first
minute of a deployment; this action polls inside one task and reports how long it waited instead.
"""

from __future__ import annotations

import time

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.vgpu.plugins.module_utils import _vgpu_registration

OWN_ARGS = frozenset(("expected", "timeout", "delay"))


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        expected, timeout, delay = args.get("expected"), args.get("timeout", 300), args.get("delay", 5)
        if not isinstance(expected, dict):
            raise AnsibleActionFail("vgpu_registration_wait needs expected (the device_plugin plan's expected, a dict "
                                    "of node name to resources), got %r" % (type(expected).__name__,))
        try:
            timeout, delay = int(timeout), int(delay)
        except (TypeError, ValueError) as exc:
            raise AnsibleActionFail("vgpu_registration_wait: timeout and delay are seconds (integers): %s" % exc) from exc
        if timeout < 0 or delay < 1:
            raise AnsibleActionFail("vgpu_registration_wait: timeout must be >= 0 and delay >= 1, got %d and %d"
                                    % (timeout, delay))
        # The rest are kubernetes.core's auth options (module_defaults of the gpufleet.vgpu.kubernetes group).
        info_args = {key: value for key, value in args.items() if key not in OWN_ARGS}
        info_args["kind"] = "Node"
        started = time.monotonic()
        polls = 0
        while True:
            polls += 1
            listed = self._execute_module(module_name="kubernetes.core.k8s_info", module_args=info_args,
                                          task_vars=task_vars)
            if listed.get("failed"):
                result.update(failed=True, msg="could not list the nodes: %s" % listed.get("msg", ""), polls=polls)
                return result
            nodes = listed.get("resources") or []
            check = _vgpu_registration.check_registration(nodes, expected)
            waited = time.monotonic() - started
            if check["ok"] or waited + delay > timeout:
                break
            time.sleep(delay)
        result.update(changed=False, resources=nodes, check=check, polls=polls, waited_s=round(waited, 1),
                      msg=("every GPU node registered (after %d s)" % round(waited) if check["ok"] else
                           "not every GPU node registered within %d s" % timeout))
        return result
