"""Table tests of the role planners: each rule refused with one message naming the variable, the value and what is
allowed, and the plans the roles render (plugin_utils._planners)."""

import pathlib

import pytest
import yaml

from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _gpu_hosts
from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _planners

ROOT = pathlib.Path(__file__).resolve().parents[4]
# The defaults that are Jinja, as an inventory shaped like inventories/example gives them.
RESOLVED = {
    "device_plugin_gpu_hosts": ["rig01", "rig02"], "device_plugin_monitor_image": "x",
    "gpu_verify_driver_branch": "", "gpu_verify_health_node_name": "rig01",
    "monitoring_files_dir": "gpufleet-monitoring", "monitoring_volcano_namespace": "volcano-system",
    "monitoring_scheduler_service": "volcano-scheduler-service",
    "monitoring_controllers_service": "volcano-controllers-service", "monitoring_plugin_namespace": "kube-system",
    "monitoring_gpu_health": True, "monitoring_gpu_nodes": {"rig01": 5, "rig02": 5},
    "nvidia_driver_kube_host": "master0", "nvidia_driver_kube_node_name": "rig01",
    "smoke_test_nodes": ["rig01", "rig02"], "smoke_test_report_dir": "gpufleet-report",
    "container_runtime_repo_url": "https://nvidia.github.io/libnvidia-container/stable/deb/amd64",
}
CARD_GROUPS = {"rig01": {"gpu_verify_expected_count": 5, "gpu_verify_min_memory_mib": 24000,
                         "gpu_verify_model_pattern": "RTX 4090"},
               "rig02": {"gpu_verify_expected_count": 5, "gpu_verify_min_memory_mib": 16000,
                         "gpu_verify_model_pattern": "RTX 4070 SUPER"}}


def options(role, **changes):
    values = yaml.safe_load((ROOT / "roles" / role / "defaults" / "main.yml").read_text())
    values = {name: RESOLVED.get(name, value) for name, value in values.items()}
    values.update(changes)
    return values


def context(hostvars=None, **more):
    hostvars = CARD_GROUPS if hostvars is None else hostvars
    found = {"inventory_hosts": ["master0", "rig01", "rig02"], "host_vars": {},
             "hosts": _gpu_hosts.read(["rig01", "rig02"], hostvars),
             "defaults": yaml.safe_load((ROOT / "roles" / "device_plugin" / "defaults" / "main.yml").read_text())}
    found.update(more)
    return found


def plan(role, ctx=None, **changes):
    return _planners.plan(role, options(role, **changes), ctx or context())


@pytest.mark.parametrize("role", sorted(_planners.PLANNERS))
def test_the_defaults_pass(role):
    assert plan(role)["errors"] == []


BAD = [
    # waits: at least a second, at most a day
    ("volcano", {"volcano_wait_timeout": 0}, "volcano_wait_timeout must be a number of seconds from 1 to 86400, got 0"),
    ("device_plugin", {"device_plugin_wait_timeout": 10 ** 9}, "device_plugin_wait_timeout must be a number of seconds"),
    ("device_plugin", {"device_plugin_kubelet_status_period": "10s"}, "device_plugin_kubelet_status_period must be a "
                                                                      "number of seconds from 1 to 86400, got '10s'"),
    ("nvidia_driver", {"nvidia_driver_drain_timeout": -5}, "nvidia_driver_drain_timeout must be a number of seconds"),
    ("container_runtime", {"container_runtime_restart_timeout": 0}, "container_runtime_restart_timeout must be"),
    ("smoke_test", {"smoke_test_timeout": 0}, "smoke_test_timeout must be a number of seconds"),
    # paths, pins, formats
    ("node_python", {"node_python_venv_path": "opt/venv"}, "node_python_venv_path must be an absolute path, got "
                                                           "'opt/venv'"),
    ("node_python", {"node_python_requirements": ["nvidia-ml-py>=12"]}, "not pins: 'nvidia-ml-py>=12'"),
    ("container_runtime", {"container_runtime_toolkit_version": "1.17.8"}, "version-release such as 1.17.8-1, got "
                                                                           "'1.17.8'"),
    ("container_runtime", {"container_runtime_repo_key_fingerprints": ["DDCAE044F796ECB0"]},
     "'DDCAE044F796ECB0' is not"),
    ("volcano", {"volcano_chart_version": ">=1.15"}, "volcano_chart_version must be an exact chart version such as "
                                                     "1.15.1, got '>=1.15'"),
    ("volcano", {"volcano_chart_repo_url": "http://charts.example.com"}, "must be https:// or oci://"),
    ("volcano", {"volcano_scheduler_node_worker_threads": 0}, "volcano_scheduler_node_worker_threads must be an "
                                                              "integer from 1 to 100, got 0"),
    ("volcano", {"volcano_scheduler_percentage_nodes_to_find": 101}, "volcano_scheduler_percentage_nodes_to_find must "
     "be an integer from 0 (Volcano's adaptive share) to 100, got 101"),
    ("volcano", {"volcano_scheduler_percentage_nodes_to_find": "10%"}, "volcano_scheduler_percentage_nodes_to_find "
     "must be an integer from 0 (Volcano's adaptive share) to 100, got '10%'"),
    ("gpu_verify", {"gpu_verify_xid_source": "kern.log"}, "gpu_verify_xid_source: 'kern.log' is none of auto, kmsg, "
     "journal or an absolute path"),
    ("gpu_verify", {"gpu_verify_health_interval": "0s"}, "gpu_verify_health_interval: '0s' is not a systemd time "
                                                         "span above zero"),
    # labels: what the API server would refuse, as YAML writes it (an unquoted true is a boolean)
    ("device_plugin", {"device_plugin_node_label": {"gpufleet.io/gpu": True}},
     "device_plugin_node_label: the value of gpufleet.io/gpu must be a string, got True: quote it "
     "(gpufleet.io/gpu: \"true\")"),
    ("device_plugin", {"device_plugin_node_label": {"gpufleet.io/gpu model": "x"}},
     "device_plugin_node_label: 'gpufleet.io/gpu model' is not a label name"),
    ("device_plugin", {"device_plugin_node_label": {"Example.COM/gpu": "true"}},
     "device_plugin_node_label: 'Example.COM/gpu' is not a label name"),
    ("device_plugin", {"device_plugin_node_label": ["gpufleet.io/gpu=true"]},
     "device_plugin_node_label must be a mapping of label names to values, got ['gpufleet.io/gpu=true']"),
    ("volcano", {"volcano_node_selector": {"node-role.kubernetes.io/control-plane": "-x"}},
     "volcano_node_selector: the value '-x' of node-role.kubernetes.io/control-plane is not a label value"),
    ("volcano", {"volcano_node_selector": {"node-role.kubernetes.io/control-plane": None}},
     "volcano_node_selector: the value of node-role.kubernetes.io/control-plane must be a string, got None: quote it "
     "(node-role.kubernetes.io/control-plane: \"\")"),
    ("volcano", {"volcano_node_selector": {"pool": 3}},
     "volcano_node_selector: the value of pool must be a string, got 3: quote it (pool: \"3\")"),
    # cross-field
    ("nvidia_driver", {"nvidia_driver_kube_host": "master9"}, "nvidia_driver_kube_host is master9, which is not a "
                                                              "host of the inventory"),
    ("nvidia_driver", {"nvidia_driver_kube_drain": False}, "nvidia_driver_kube_drain is false on a Kubernetes node"),
    # the chart values' escape hatch: what the role sets from its own variables is refused, naming them
    ("volcano", {"volcano_chart_values": {"custom": {"scheduler_config_override": "actions: allocate"}}},
     "volcano_chart_values.custom.scheduler_config_override is set by the volcano role"),
    ("volcano", {"volcano_chart_values": {"basic": {"image_tag_version": "v1.14.0"}}},
     "volcano_chart_values.basic.image_tag_version is set by the volcano role (checked, and the scheduler rolled on a "
     "change); set volcano_image_tag instead"),
    ("volcano", {"volcano_chart_values": {"custom": {"scheduler_percentage_nodes_to_find": 10}}},
     "volcano_chart_values.custom.scheduler_percentage_nodes_to_find is set by the volcano role (checked, and the "
     "scheduler rolled on a change); set volcano_scheduler_percentage_nodes_to_find instead"),
    # what the GPUs cannot honour
    ("device_plugin", {"device_plugin_vgpu": {"split": 2, "filter_index": [7]}},
     "device_plugin_vgpu of node rig01 (host rig01): filter_index [7] beyond its 5 GPUs"),
    ("device_plugin", {"device_plugin_vgpu": {"split": 2, "mode": "mig"}},
     "mode mig, but RTX 4090 has no MIG"),
    # CDI mode: nvidia non-default, containerd reading CDI specs, a spec where containerd looks
    ("container_runtime", {"container_runtime_cdi": True, "container_runtime_set_as_default": True},
     "container_runtime_set_as_default is True with container_runtime_cdi: true"),
    ("container_runtime", {"container_runtime_cdi": True, "container_runtime_enable_cdi": False},
     "container_runtime_enable_cdi is False with container_runtime_cdi: true"),
    ("container_runtime", {"container_runtime_cdi": True, "container_runtime_cdi_spec": "/etc/cdi/nvidia.toml"},
     "container_runtime_cdi_spec is '/etc/cdi/nvidia.toml': it must be a .yaml or .json file directly in /etc/cdi, "
     "/var/run/cdi, /run/cdi"),
    ("container_runtime", {"container_runtime_cdi": True, "container_runtime_cdi_spec": "/var/run/cdi/sub/x.yaml"},
     "container_runtime_cdi_spec is '/var/run/cdi/sub/x.yaml'"),
    ("container_runtime", {"container_runtime_cdi": True, "container_runtime_cdi_spec": "/etc/cdi/.yaml"},
     "container_runtime_cdi_spec is '/etc/cdi/.yaml'"),
]


@pytest.mark.parametrize("role, changes, needle", BAD, ids=[b[2][:50] for b in BAD])
def test_each_bad_value_is_one_message(role, changes, needle):
    errors = plan(role, **changes)["errors"]
    assert any(needle in error for error in errors), errors
    # One message per failed rule: none of the rules that hold is mentioned.
    assert len([e for e in errors if needle in e]) == 1


def test_host_names_that_are_no_node_names_are_refused():
    hostvars = dict(CARD_GROUPS, **{"Rig_01": CARD_GROUPS["rig01"]})
    ctx = context(hostvars, hosts=_gpu_hosts.read(["Rig_01", "rig02"], hostvars))
    errors = plan("device_plugin", ctx, device_plugin_gpu_hosts=["Rig_01", "rig02"])["errors"]
    assert errors == ["node Rig_01 (host Rig_01) is not a valid Kubernetes node name (lowercase letters, digits, '-' "
                      "and '.', at most 253): set device_plugin_node_name for that host to the node's name"]


# What plugin v1.12.0 registers for rig01's five RTX 4090 under gpuMemoryFactor 3.
REGISTER = "".join("GPU-%08d-0000-4000-8000-000000000000,2,8188,NVIDIA-NVIDIA GeForce RTX 4090,true,hami-core:" % i
                   for i in range(5))


def test_device_plugin_sizes_from_the_truest_source():
    # A fresh fleet: the card groups' minimums, and the memory registered is at least that.
    fresh = plan("device_plugin")
    assert fresh["expected"]["rig01"]["source"] == "minimum" and fresh["expected"]["rig01"]["memory_exact"] is False
    # The plugin has registered rig01: its units under the device ConfigMap's factor are the cards' memory.
    nodes = [{"metadata": {"name": "rig01", "annotations": {"volcano.sh/node-vgpu-register": REGISTER}}}]
    registered = plan("device_plugin", context(nodes=nodes, registered_factor=3))
    assert registered["sources"] == {"rig01": "registration", "rig02": "minimum"}
    assert registered["expected"]["rig01"]["volcano.sh/vgpu-memory"] == 5 * 8188
    assert registered["expected"]["rig01"]["memory_exact"] is True
    assert registered["gpus"]["rig01"][0]["memory_mib"] == 24564
    # NVML's reading of this run beats both.
    measured = dict(CARD_GROUPS["rig01"], gpu_verify_inventory={"gpus": [
        {"index": i, "uuid": "GPU-%d" % i, "name": "NVIDIA GeForce RTX 4090", "memory_total_mib": 24564}
        for i in range(5)]})
    hostvars = dict(CARD_GROUPS, rig01=measured)
    ctx = context(hostvars, nodes=nodes, registered_factor=3)
    assert plan("device_plugin", ctx)["sources"]["rig01"] == "nvml"


@pytest.mark.parametrize("labels", [
    {"gpufleet.io/gpu": "true"}, {"node-role.kubernetes.io/control-plane": ""}, {"pool": "a100_x-8.b"},
    {"topology.kubernetes.io/zone": "eu-west-1a", "nvidia.com/gpu.present": "true"}])
def test_labels_as_clusters_write_them_pass(labels):
    assert plan("device_plugin", device_plugin_node_label=labels)["errors"] == []
    assert plan("volcano", volcano_node_selector=labels)["errors"] == []


def node(name, **labels):
    return {"metadata": {"name": name, "labels": dict({"kubernetes.io/hostname": name}, **labels)}}


@pytest.mark.parametrize("nodes, sent", [
    ([], ["rig01", "rig02"]),                                                    # the preflight reads no cluster
    ([node("rig01"), node("rig02")], ["rig01", "rig02"]),                        # a fresh fleet
    ([node("rig01", **{"gpufleet.io/gpu": "true"}), node("rig02")], ["rig02"]),  # one done
    ([node("rig01", **{"gpufleet.io/gpu": "true"}), node("rig02", **{"gpufleet.io/gpu": "true"})], []),  # a rerun
    ([node("rig01", **{"gpufleet.io/gpu": "false"})], ["rig01", "rig02"]),      # another value; rig02 not in it
])
def test_device_plugin_labels_only_the_nodes_that_lack_the_label(nodes, sent):
    planned = plan("device_plugin", context(nodes=nodes))
    assert [patch["metadata"]["name"] for patch in planned["node_label_patches"]] == sent


def test_device_plugin_renders_its_configmaps_with_the_contracts_names():
    planned = plan("device_plugin")
    names = [c["name"] for c in planned["configmaps"]]
    assert names == [planned["names"]["device_configmap"], planned["names"]["node_configmap"]]
    device = yaml.safe_load(planned["configmaps"][0]["data"][planned["names"]["device_config_key"]])
    assert device["nvidia"]["gpuMemoryFactor"] == planned["memory_factor"]
    assert planned["configmaps"][0]["annotations"] == {planned["names"]["default_memory"]: "whole-card"}


def test_gpu_verify_mig_mode_follows_the_hosts_vgpu_mode():
    assert plan("gpu_verify")["expect"]["mig_mode"] == "off"
    mig = context(host_vars={"device_plugin_vgpu": {"mode": "mig"}})
    assert plan("gpu_verify", mig)["expect"]["mig_mode"] == "on"
    assert plan("gpu_verify", mig, gpu_verify_mig_mode="")["expect"]["mig_mode"] == ""


def test_volcano_reports_the_schedulers_tag_for_the_version_check():
    assert plan("volcano")["scheduler_tag"] == "v1.15.1"
    fixed = plan("volcano", volcano_scheduler_image_tag="v1.15.1-gpufleet-fix")
    assert fixed["scheduler_tag"] == "v1.15.1-gpufleet-fix"
    assert fixed["scheduler_tag_variable"] == "volcano_scheduler_image_tag"


def test_an_unknown_role_has_no_planner():
    with pytest.raises(ValueError, match="no planner for role 'kubelet'"):
        _planners.plan("kubelet", {})


# Where the check runs with a node's facts (the site's decision play, the role's own check): what its EL release
# cannot honour. Without facts (the preflight before contact) the same settings pass.
EL10 = {"family": "RedHat", "major": "10"}
EL10_PIN = {"nvidia_driver_cuda_repo_key_fingerprints": ["A" * 40]}


@pytest.mark.parametrize("changes, needle", [
    ({"nvidia_driver_module_stream": "565-open", **EL10_PIN},
     "nvidia_driver_module_stream is '565-open', but EL10 has no dnf module streams"),
    ({"nvidia_driver_flavor": "proprietary", **EL10_PIN},
     "nvidia_driver_flavor is 'proprietary', which gpufleet does not install on EL10"),
    ({}, "nvidia_driver_cuda_repo_key_fingerprints is empty, and gpufleet pins no fingerprint for NVIDIA's EL10"),
])
def test_el10_refusals_name_the_variable(changes, needle):
    errors = plan("nvidia_driver", context(os=EL10), **changes)["errors"]
    assert [e for e in errors if needle in e] and len(errors) == 1, errors
    assert plan("nvidia_driver", context(), **changes)["errors"] == []
    assert plan("nvidia_driver", context(os={"family": "RedHat", "major": "9"}), **changes)["errors"] == []


def test_el10_with_a_pinned_key_and_a_branch_passes():
    assert plan("nvidia_driver", context(os=EL10), nvidia_driver_branch="565", **EL10_PIN)["errors"] == []


@pytest.mark.parametrize("changes", [
    {"container_runtime_cdi": True},
    {"container_runtime_cdi": True, "container_runtime_set_as_default": False, "container_runtime_enable_cdi": True,
     "container_runtime_cdi_spec": "/run/cdi/gpus.json"},
    # Outside CDI mode the CDI rules do not apply: the role alone may leave nvidia non-default.
    {"container_runtime_set_as_default": False, "container_runtime_enable_cdi": False,
     "container_runtime_cdi_spec": "relative"},
])
def test_container_runtime_accepts_cdi_mode_and_leaves_other_modes_alone(changes):
    assert plan("container_runtime", **changes)["errors"] == []


def _cdi_hosts(rig01, rig02, name01=None, default02=None):
    hostvars = {host: dict(CARD_GROUPS[host]) for host in CARD_GROUPS}
    if default02 is not None:
        hostvars["rig02"]["container_runtime_set_as_default"] = default02
    for host, value in (("rig01", rig01), ("rig02", rig02)):
        if value is not None:
            hostvars[host]["container_runtime_cdi"] = value
    if name01:
        hostvars["rig01"]["container_runtime_runtime_name"] = name01
    return context(hostvars, runtime=_gpu_hosts.runtime_mode(["rig01", "rig02"], hostvars))


@pytest.mark.parametrize(("rig01", "rig02", "name01", "expected", "error"), [
    (None, None, None, {"cdi": False, "name": "nvidia"}, None),
    (True, True, None, {"cdi": True, "name": "nvidia"}, None),
    # INI inventories give strings.
    ("true", "True", None, {"cdi": True, "name": "nvidia"}, None),
    ("false", False, None, {"cdi": False, "name": "nvidia"}, None),
    (True, None, None, None, "container_runtime_cdi is true for rig01 but not for rig02"),
    ("maybe", True, None, None, "container_runtime_cdi is 'maybe' for rig01: allowed true or false"),
    (True, True, "nvidia-cdi", None, "container_runtime_runtime_name differs between the GPU hosts in CDI mode "
                                     "(nvidia, nvidia-cdi)"),
])
def test_device_plugin_follows_the_gpu_hosts_cdi_mode(rig01, rig02, name01, expected, error):
    planned = _planners.plan("device_plugin", options("device_plugin"), _cdi_hosts(rig01, rig02, name01))
    if error:
        assert any(error in message for message in planned["errors"]), planned["errors"]
    else:
        assert planned["errors"] == [] and planned["runtime"] == expected


@pytest.mark.parametrize(("cdi", "default02", "error"), [
    # The stock DaemonSet finds NVML only through containerd's default runtime.
    (None, False, "container_runtime_set_as_default is False for rig02, but outside CDI mode"),
    (None, "no", "container_runtime_set_as_default is False for rig02"),
    (None, True, None),
    (None, "maybe", "container_runtime_set_as_default is 'maybe' for rig02: allowed true or false"),
    # In CDI mode nvidia is non-default by design.
    (True, False, None),
])
def test_device_plugin_needs_nvidia_as_the_default_runtime_outside_cdi_mode(cdi, default02, error):
    planned = _planners.plan("device_plugin", options("device_plugin"), _cdi_hosts(cdi, cdi, default02=default02))
    if error:
        assert any(error in message for message in planned["errors"]), planned["errors"]
    else:
        assert planned["errors"] == []


def test_device_plugin_refuses_cdi_mode_with_a_plugin_before_its_cdi_variant():
    planned = _planners.plan("device_plugin", options("device_plugin", device_plugin_version="v1.11.0"),
                             _cdi_hosts(True, True))
    assert any("device_plugin_version v1.11.0 has no CDI variant" in error and "allowed v1.12.0 or newer" in error
               for error in planned["errors"]), planned["errors"]
