#!/usr/bin/python
# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: vgpu_smoke
short_description: Smoke-test a Volcano + vGPU cluster the way the article checks it by hand
version_added: 0.1.0
description:
  - Runs, in a namespace of its own (random suffix) that it removes at the end whatever happened, the article's
    checks, each reported as passed, failed or skipped with the reason.
  - C(vgpu_pod) a one-vGPU pod runs on a GPU node with its vGPU; on real GPUs C(nvidia-smi) inside shows the limited
    memory and C(CUDA_DEVICE_MEMORY_LIMIT_0) is set.
  - C(fill) as many one-vGPU pods as there are free vGPUs all run, and one more stays Pending, unschedulable.
  - C(metrics) the scheduler's C(volcano_vgpu_device_allocated_memory) equals the smoke pods' requests per card
    (parsed with prometheus-client); the plugin monitor's C(:9394) series are present on every GPU node (through
    the API server's pod proxy, or O(plugin_metrics_urls)).
  - C(memory_limit) on real GPUs, an allocation under the vGPU limit succeeds and one over it fails with OOM. On
    simulated GPUs that record what kubelet gave each container (O(device_run_options_annotation)), a one-vGPU pod
    of each card type gets C(CUDA_DEVICE_MEMORY_LIMIT_0) of exactly one vGPU, and O(tensor_sizes_mib) are judged
    against it.
  - C(gang) with one vGPU too few free, a Volcano Job with C(minAvailable) O(gang_size) binds no pod; freeing one
    vGPU lets all its pods run within O(timeout).
  - The module never changes anything outside its namespace, except that it first deletes the namespaces of earlier
    smoke runs that did not clean up (label C(gpufleet.io/smoke=true); their pods would hold vGPUs the fill check
    counts as free). It reports C(changed) only then. Do not run two smoke tests against one cluster at once.
author:
  - gpufleet maintainers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.vgpu.attributes
  - kubernetes.core.k8s_auth_options
attributes:
  check_mode:
    support: none
    details: The checks need to create pods; the role skips the module in check mode.
  diff_mode:
    support: none
notes:
  - The module is in the action group C(gpufleet.vgpu.kubernetes) with kubernetes.core's modules, so one
    C(module_defaults) entry gives them all the same auth options (role M(gpufleet.vgpu.smoke_test) takes them from
    C(gpufleet_kube_auth)).
options:
  checks:
    description: Checks to run, in this order whatever the order given.
    type: list
    elements: str
    choices: [vgpu_pod, fill, metrics, memory_limit, gang]
    default: [vgpu_pod, fill, metrics, memory_limit, gang]
  nodes:
    description:
      - Kubernetes names of the nodes under test. Every smoke pod is kept on them (node affinity) and only their vGPUs
        count as free, so a run never fills or gang-tests the rest of a shared cluster.
      - Empty tests every node that registers C(volcano.sh/vgpu-number). A named node that registers none fails every
        check, naming it.
    type: list
    elements: str
    default: []
  fill_max_pods:
    description:
      - At most this many fill pods (one per free vGPU). Nodes under test are filled in name order while their free
        vGPUs together fit; the others are named in the result as not filled.
    type: int
    default: 200
  namespace_prefix:
    description: Prefix of the namespace the checks run in.
    type: str
    default: gpufleet-smoke
  image:
    description: Image of the long-running smoke pods.
    type: str
    default: docker.io/nvidia/cuda:12.4.1-base-ubuntu22.04
  command:
    description: Command of the long-running smoke pods.
    type: list
    elements: str
    default: [sleep, infinity]
  alloc_image:
    description: Image with CUDA and PyTorch for C(memory_limit).
    type: str
    default: docker.io/pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime
  alloc_command:
    description: Command that allocates C(ALLOC_MIB) MiB of GPU memory and exits non-zero with "out of memory" when it
      cannot.
    type: list
    elements: str
    default: [python, -c, "import os, torch; torch.empty(int(os.environ['ALLOC_MIB']) << 20, dtype=torch.uint8, device='cuda'); print('ok')"]
  vgpu_memory:
    description: C(volcano.sh/vgpu-memory) units of the vGPU pod and of the memory-limit pods.
    type: int
    default: 1000
  fill_memory:
    description: C(volcano.sh/vgpu-memory) units of each fill, holder and gang pod.
    type: int
    default: 10
  memory_factor:
    description: MiB per C(volcano.sh/vgpu-memory) unit (the plugin's gpuMemoryFactor). Unset, read from the plugin's
      device ConfigMap in O(plugin_namespace) (1 when there is none).
    type: int
  real_gpus:
    description: Whether the GPU nodes have real GPUs; null decides from the nodes (kwok-simulated nodes are not).
    type: bool
  scheduler_name:
    description: Scheduler of the smoke pods.
    type: str
    default: volcano
  queue:
    description: Volcano queue of the gang job and the holder.
    type: str
    default: default
  gang_size:
    description: Pods (and C(minAvailable)) of the gang job.
    type: int
    default: 5
  gang_hold_seconds:
    description: How long the gang must stay unbound while one vGPU too few is free.
    type: int
    default: 10
  scheduler_namespace:
    description: Namespace of Volcano's scheduler metrics Service.
    type: str
    default: volcano-system
  scheduler_service:
    description: Volcano's scheduler metrics Service.
    type: str
    default: volcano-scheduler-service
  scheduler_metrics_port:
    description: Port of that Service.
    type: int
    default: 8080
  scheduler_metrics_url:
    description: URL of the scheduler's metrics, read directly instead of through the apiserver's service proxy (for
      clusters where the proxy cannot reach the scheduler's pod, such as the local lab).
    type: str
  metrics_settle_seconds:
    description: >-
      How long the metrics check may wait, first for every node holding smoke pods to have re-registered after the
      running scheduler started (Volcano builds a node's devices, and their figures, only then), then for the
      scheduler's allocated-memory figures to match the pods.
    type: int
    default: 90
  plugin_metrics_urls:
    description: Node name to the base URL of its plugin monitor, read instead of through the API server's pod proxy
      (for clusters where the proxy cannot reach the pod, such as the local lab).
    type: dict
  device_run_options_annotation:
    description: Pod annotation in which a simulated cluster records what kubelet's device manager gave each
      container (env, mounts), as JSON by container name; the gpufleet lab writes C(lab.gpufleet.io/device-run-options).
      When set and the GPUs are simulated, C(memory_limit) reads the limit from it.
    type: str
  cuda_context_mib:
    description: MiB a CUDA context takes inside the vGPU's limit on top of a tensor (HAMi-core counts it), for
      judging O(tensor_sizes_mib) on simulated GPUs.
    type: int
    default: 300
  tensor_sizes_mib:
    description: Tensors judged against each card type's one-vGPU limit on simulated GPUs (the article's 6 GB and
      8 GB).
    type: list
    elements: int
    default: [6144, 8192]
  plugin_namespace:
    description: Namespace of the vGPU device plugin pods.
    type: str
    default: kube-system
  plugin_metrics_port:
    description: Port of the plugin monitor's metrics.
    type: int
    default: 9394
  timeout:
    description: Seconds to wait for pods to run (per check step) and for the namespace to go.
    type: int
    default: 180
requirements:
  - kubernetes (Python client) and prometheus-client on the host running the module
seealso:
  - name: Role gpufleet.vgpu.smoke_test
    description: Runs this module after a deployment and writes the JSON and Markdown reports.
    link: https://github.com/gpufleet/gpufleet/tree/main/roles/smoke_test
"""

EXAMPLES = r"""
- name: Smoke-test the cluster
  gpufleet.vgpu.vgpu_smoke:
    kubeconfig: ~/.kube/config
    memory_factor: 3
  register: smoke

- name: Smoke-test with the auth options every cluster task of the play shares
  module_defaults:
    group/gpufleet.vgpu.kubernetes:
      host: https://127.0.0.1:6443
      api_key: "{{ token }}"
      ca_cert: /etc/kubernetes/pki/ca.crt
  gpufleet.vgpu.vgpu_smoke:
    checks: [vgpu_pod, fill]
  register: smoke
"""

RETURN = r"""
results:
  description: One entry per check, then C(cleanup).
  returned: always
  type: list
  elements: dict
  sample:
    - {check: vgpu_pod, status: passed, detail: "on rig01, GPU GPU-..., 1000 memory units", seconds: 2.1}
namespace:
  description: The namespace the checks ran in (removed at the end).
  returned: always
  type: str
removed_leftovers:
  description: Namespaces of earlier smoke runs that were still there and were deleted first.
  returned: always
  type: list
  elements: str
real_gpus:
  description: Whether the checks treated the GPU nodes as real.
  returned: always
  type: bool
memory_factor:
  description: The MiB per C(volcano.sh/vgpu-memory) unit the checks used (O(memory_factor), or the device
    ConfigMap's).
  returned: always
  type: int
default_memory:
  description: What a vGPU request without memory gets, as the device_plugin role recorded it on the device
    ConfigMap (empty when it did not, which is Volcano's whole card).
  returned: always
  type: str
fill_capacity:
  description: The fleet's vGPU capacity (as the P(gpufleet.vgpu.vgpu_capacity_report#filter) filter returns it)
    while the fill check held every free vGPU of the nodes under test, read before its pods are removed; null when
    the fill check did not pass.
  returned: always
  type: dict
markdown:
  description: The results as a Markdown section.
  returned: always
  type: str
failed_checks:
  description: Names of the checks that failed.
  returned: always
  type: list
  elements: str
"""

import copy

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.vgpu.plugins.module_utils import _smoke as smoke
from ansible_collections.kubernetes.core.plugins.module_utils.args_common import AUTH_ARG_SPEC
from ansible_collections.kubernetes.core.plugins.module_utils.k8s.client import get_api_client
from ansible_collections.kubernetes.core.plugins.module_utils.k8s.core import AnsibleK8SModule
from ansible_collections.kubernetes.core.plugins.module_utils.k8s.exceptions import CoreException


def argument_spec():
    """kubernetes.core's auth options, then the checks' own."""
    spec = copy.deepcopy(AUTH_ARG_SPEC)
    spec.update({
        "checks": {"type": "list", "elements": "str", "choices": list(smoke.CHECKS), "default": list(smoke.CHECKS)},
        "nodes": {"type": "list", "elements": "str", "default": []},
        "fill_max_pods": {"type": "int", "default": 200},
        "namespace_prefix": {"type": "str", "default": "gpufleet-smoke"},
        "image": {"type": "str", "default": "docker.io/nvidia/cuda:12.4.1-base-ubuntu22.04"},
        "command": {"type": "list", "elements": "str", "default": ["sleep", "infinity"]},
        "alloc_image": {"type": "str", "default": "docker.io/pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"},
        "alloc_command": {"type": "list", "elements": "str", "default": [
            "python", "-c", "import os, torch; torch.empty(int(os.environ['ALLOC_MIB']) << 20, dtype=torch.uint8, "
            "device='cuda'); print('ok')"]},
        "vgpu_memory": {"type": "int", "default": 1000},
        "fill_memory": {"type": "int", "default": 10},
        "memory_factor": {"type": "int"},
        "real_gpus": {"type": "bool"},
        "scheduler_name": {"type": "str", "default": "volcano"},
        "queue": {"type": "str", "default": "default"},
        "gang_size": {"type": "int", "default": 5},
        "gang_hold_seconds": {"type": "int", "default": 10},
        "scheduler_namespace": {"type": "str", "default": "volcano-system"},
        "scheduler_service": {"type": "str", "default": "volcano-scheduler-service"},
        "scheduler_metrics_port": {"type": "int", "default": 8080},
        "scheduler_metrics_url": {"type": "str"},
        "metrics_settle_seconds": {"type": "int", "default": 90},
        "plugin_metrics_urls": {"type": "dict"},
        "device_run_options_annotation": {"type": "str"},
        "cuda_context_mib": {"type": "int", "default": 300},
        "tensor_sizes_mib": {"type": "list", "elements": "int", "default": [6144, 8192]},
        "plugin_namespace": {"type": "str", "default": "kube-system"},
        "plugin_metrics_port": {"type": "int", "default": 9394},
        "timeout": {"type": "int", "default": 180},
    })
    return spec


def main():
    # AnsibleK8SModule fails with kubernetes.core's message when the kubernetes client (or PyYAML) is missing.
    module = AnsibleK8SModule(module_class=AnsibleModule, argument_spec=argument_spec(), supports_check_mode=False)
    for name in ("vgpu_memory", "fill_memory", "memory_factor", "gang_size", "timeout", "fill_max_pods"):
        if module.params[name] is not None and module.params[name] < 1:
            module.fail_json(msg="%s must be an integer >= 1, got %d" % (name, module.params[name]))
    try:
        # kubernetes.core's client, built from the same auth options as its own modules; the checks use the
        # kubernetes ApiClient inside it (typed CoreV1Api and friends, and the exec stream).
        api = get_api_client(module=module).client.client
    except CoreException as exc:
        module.fail_json(msg=str(exc))
    run = smoke.Smoke(api, module.params)
    results = run.run()
    # Its own namespace comes and goes; removing an earlier run's leftovers is the one lasting change.
    module.exit_json(changed=bool(run.removed_leftovers), removed_leftovers=run.removed_leftovers, results=results,
                     namespace=run.namespace, real_gpus=run.real_gpus,
                     memory_factor=run.params["memory_factor"], default_memory=run.default_memory,
                     fill_capacity=run.fill_capacity,
                     markdown=smoke.markdown(results, run.namespace),
                     failed_checks=[r["check"] for r in results if r["status"] == "failed"])


if __name__ == "__main__":
    main()
