"""Where the gang-scheduler flag goes in training-operator Deployments as their manifests define them."""

import pytest

from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _kubeflow


def deployment(*containers):
    return {"spec": {"template": {"spec": {"containers": list(containers)}}}}


RELEASE = {"name": "training-operator", "command": ["/manager"], "image": "kubeflow/training-operator:v1-855e096"}
ADD_ARGS = [{"op": "add", "path": "/spec/template/spec/containers/0/args", "value": ["--gang-scheduler-name=volcano"]}]
APPEND = [{"op": "add", "path": "/spec/template/spec/containers/0/args/-", "value": "--gang-scheduler-name=volcano"}]


@pytest.mark.parametrize(("case", "containers", "patch", "current"), [
    ("release manifest v1.7+: command, no args", [RELEASE], ADD_ARGS, None),
    ("older manifest: args", [{"name": "training-operator", "args": ["--monitoring-port=8443"]}], APPEND, None),
    ("an empty args list", [dict(RELEASE, args=[])], APPEND, None),
    ("set already", [dict(RELEASE, args=["--gang-scheduler-name=volcano"])], [], "volcano"),
    ("set in command, Go's single dash, separate value",
     [dict(RELEASE, command=["/manager", "-gang-scheduler-name", "volcano"])], [], "volcano"),
    ("another gang scheduler", [dict(RELEASE, args=["--gang-scheduler-name=scheduler-plugins"])], [],
     "scheduler-plugins"),
    ("one container of another name", [dict(RELEASE, name="manager")], ADD_ARGS, None),
    ("a sidecar before the manager", [{"name": "istio-proxy", "args": ["proxy"]}, RELEASE],
     [{"op": "add", "path": "/spec/template/spec/containers/1/args", "value": ["--gang-scheduler-name=volcano"]}],
     None),
])
def test_gang_patch(case, containers, patch, current):
    found = _kubeflow.gang_patch(deployment(*containers))
    assert (found["patch"], found["current"]) == (patch, current), case


def test_no_manager_to_find_is_an_error_naming_the_setting():
    with pytest.raises(ValueError, match="device_plugin_kubeflow_container"):
        _kubeflow.gang_patch(deployment({"name": "a"}, {"name": "b"}))


def runtime(name, policy=None, namespace=None):
    meta = dict({"name": name}, **({"namespace": namespace} if namespace else {}))
    spec = {"mlPolicy": {"numNodes": 2, "torch": {}}}
    if policy is not None:
        spec["podGroupPolicy"] = policy
    return {"apiVersion": _kubeflow.TRAINER_API, "kind": "TrainingRuntime" if namespace else "ClusterTrainingRuntime",
            "metadata": meta, "spec": spec}


@pytest.mark.parametrize("runtimes, want", [
    ([], {"volcano": [], "other": [], "none": []}),
    # As Trainer's docs write them: volcano: {} (an empty source still selects the plugin).
    ([runtime("torch-distributed", {"volcano": {}}), runtime("deepspeed", {"coscheduling": {"scheduleTimeoutSeconds": 30}}),
      runtime("mlx"), runtime("mine", {"volcano": {"networkTopology": {"mode": "hard"}}}, namespace="team-a")],
     {"volcano": ["team-a/mine", "torch-distributed"], "other": ["deepspeed (coscheduling)"], "none": ["mlx"]}),
    # A null source selects nothing.
    ([runtime("nulled", {"volcano": None})], {"volcano": [], "other": [], "none": ["nulled"]}),
])
def test_trainer_runtimes_by_gang_plugin(runtimes, want):
    assert _kubeflow.trainer_runtimes(runtimes) == want
