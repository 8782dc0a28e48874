# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-side action for gpufleet.vgpu.vgpu_registration_wait (documented in
plugins/modules/vgpu_registration_wait.py).

A wait written as `until:` prints "FAILED - RETRYING" at every poll, which reads as a fault during the normal first
minute of a deployment; this action polls inside one task and reports how long it waited instead.
"""

from __future__ import annotations

import datetime
import time

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.vgpu.plugins.module_utils import _vgpu_registration

OWN_ARGS = frozenset(("expected", "timeout", "delay", "daemonsets", "namespace", "status_period"))


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        expected, timeout, delay = args.get("expected"), args.get("timeout", 300), args.get("delay", 5)
        status_period = args.get("status_period", 10)
        if not isinstance(expected, dict):
            raise AnsibleActionFail("vgpu_registration_wait needs expected (the device_plugin plan's expected, a dict "
                                    "of node name to resources), got %r" % (type(expected).__name__,))
        try:
            timeout, delay, status_period = int(timeout), int(delay), int(status_period)
        except (TypeError, ValueError) as exc:
            raise AnsibleActionFail("vgpu_registration_wait: timeout, delay and status_period are seconds "
                                    "(integers): %s" % exc) from exc
        if timeout < 0 or delay < 1 or status_period < 1:
            raise AnsibleActionFail("vgpu_registration_wait: timeout must be >= 0, delay and status_period >= 1, got "
                                    "%d, %d and %d" % (timeout, delay, status_period))
        daemonsets, namespace = args.get("daemonsets") or [], args.get("namespace")
        if not isinstance(daemonsets, list) or not all(isinstance(name, str) for name in daemonsets) \
                or (daemonsets and not isinstance(namespace, str)):
            raise AnsibleActionFail("vgpu_registration_wait: daemonsets is a list of DaemonSet names and needs "
                                    "namespace (a string), got %r and %r" % (daemonsets, namespace))
        # The rest are kubernetes.core's auth options (module_defaults of the gpufleet.vgpu.kubernetes group).
        auth = {key: value for key, value in args.items() if key not in OWN_ARGS}
        started = time.monotonic()
        polls = 0
        first_ready = {}  # pod uid -> when this wait first saw it Ready (monotonic)
        while True:
            polls += 1
            listed = self._list(auth, task_vars, kind="Node")
            if listed.get("failed"):
                result.update(failed=True, msg="could not list the nodes: %s" % listed.get("msg", ""), polls=polls)
                return result
            nodes = listed.get("resources") or []
            check = _vgpu_registration.check_registration(nodes, expected)
            if daemonsets:
                rollout = self._rollout(auth, task_vars, namespace, daemonsets, expected, status_period, first_ready)
                if "failed" in rollout:
                    result.update(failed=True, msg=rollout["failed"], polls=polls)
                    return result
                check = {"ok": check["ok"] and not rollout["problems"],
                         "problems": rollout["problems"] + check["problems"]}
            waited = time.monotonic() - started
            if check["ok"] or waited + delay > timeout:
                break
            time.sleep(delay)
        result.update(changed=False, resources=nodes, check=check, polls=polls, waited_s=round(waited, 1),
                      msg=("every GPU node registered (after %d s)" % round(waited) if check["ok"] else
                           "not every GPU node registered within %d s" % timeout))
        return result

    def _list(self, auth, task_vars, **what):
        return self._execute_module(module_name="kubernetes.core.k8s_info", module_args=dict(auth, **what),
                                    task_vars=task_vars)

    def _rollout(self, auth, task_vars, namespace, names, expected, status_period, first_ready):
        """{problems} of the plugin's DaemonSets and their pods on the expected nodes, or {failed: message}."""
        listed = self._list(auth, task_vars, kind="DaemonSet", namespace=namespace)
        if listed.get("failed"):
            return {"failed": "could not list the DaemonSets of %s: %s" % (namespace, listed.get("msg", ""))}
        found = [d for d in listed.get("resources") or [] if d["metadata"]["name"] in names]
        pods = []
        for daemonset in found:
            selector = ((daemonset.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
            listed = self._list(auth, task_vars, kind="Pod", namespace=namespace,
                                label_selectors=["%s=%s" % item for item in sorted(selector.items())])
            if listed.get("failed"):
                return {"failed": "could not list the pods of DaemonSet %s/%s: %s"
                                  % (namespace, daemonset["metadata"]["name"], listed.get("msg", ""))}
            pods += listed.get("resources") or []
        clock = time.monotonic()
        for pod in pods:
            if _vgpu_registration.pod_ready(pod):
                first_ready.setdefault(pod["metadata"].get("uid"), clock)
        observed = {uid: clock - since for uid, since in first_ready.items()}
        return {"problems": _vgpu_registration.rollout_problems(
            namespace, names, found, pods, expected, datetime.datetime.now(datetime.timezone.utc), observed,
            status_period)}
