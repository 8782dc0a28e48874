# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpufleet_kube_auth: how every role that talks to the cluster reaches it, specified once (controller only).

One dict for the volcano, device_plugin, monitoring and smoke_test roles and nvidia_driver's drain, handed to their
modules through ``module_defaults`` of the action group gpufleet.vgpu.kubernetes (meta/runtime.yml). Its options are
those kubernetes.core's k8s and helm modules both take; a client certificate or other auth goes into a kubeconfig.
Checked by action role_plan for each of those roles, from this spec (the roles' argument specs do not repeat it).
"""

from __future__ import annotations

VARIABLE = "gpufleet_kube_auth"
ROLES = ("volcano", "device_plugin", "monitoring", "smoke_test", "nvidia_driver")
SPEC = {VARIABLE: {"type": "dict", "options": {
    "kubeconfig": {"type": "raw"},           # a path on the kube_control host, or the kubeconfig's content as a dict
    "context": {"type": "str"},
    "host": {"type": "str"},
    "api_key": {"type": "str", "no_log": True},
    "validate_certs": {"type": "bool"},
    "ca_cert": {"type": "path"},
}}}
