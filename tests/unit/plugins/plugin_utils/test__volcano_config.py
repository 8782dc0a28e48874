"""Table tests for Volcano's scheduler/admission configuration built from structured settings."""

import pathlib

import pytest
import yaml

from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _volcano_config as vc

ACTIONS = ["enqueue", "allocate", "backfill"]
# The tiers the role ships (its defaults), not a copy of them.
DEFAULT_TIERS = yaml.safe_load((pathlib.Path(__file__).resolve().parents[4] / "roles" / "volcano" / "defaults"
                                / "main.yml").read_text())["volcano_scheduler_tiers"]


def plugins(conf, tier=1):
    return [p["name"] for p in conf["tiers"][tier]["plugins"]]


def plugin(conf, name):
    return next(p for t in conf["tiers"] for p in t["plugins"] if p["name"] == name)


def test_default_keeps_the_chart_default_and_adds_deviceshare():
    conf = vc.scheduler_conf(ACTIONS, DEFAULT_TIERS, {"vgpu_enable": True, "schedule_policy": "binpack"})
    assert conf["actions"] == "enqueue, allocate, backfill"
    # What the article's override lost: overcommit and enablePreemptable: false.
    assert plugins(conf) == ["overcommit", "drf", "deviceshare", "predicates", "proportion", "nodeorder", "binpack"]
    assert plugin(conf, "gang")["enablePreemptable"] is False
    assert plugin(conf, "deviceshare")["arguments"] == {"deviceshare.VGPUEnable": True,
                                                        "deviceshare.SchedulePolicy": "binpack"}


def test_deviceshare_inserted_before_predicates_when_missing():
    tiers = [{"plugins": [{"name": "gang"}, {"name": "predicates"}, {"name": "binpack"}]}]
    conf = vc.scheduler_conf(ACTIONS, tiers, {"vgpu_enable": True})
    assert plugins(conf, 0) == ["gang", "deviceshare", "predicates", "binpack"]
    assert tiers[0]["plugins"][1]["name"] == "predicates"  # the input is not modified


def test_deviceshare_left_out_when_nothing_is_shared():
    conf = vc.scheduler_conf(ACTIONS, DEFAULT_TIERS, {"vgpu_enable": False})
    assert "deviceshare" not in plugins(conf)


def test_binpack_arguments():
    conf = vc.scheduler_conf(ACTIONS, DEFAULT_TIERS, {"vgpu_enable": True},
                             {"weight": 10, "resources": {"volcano.sh/vgpu-number": 5, "volcano.sh/vgpu-memory": 1}})
    assert plugin(conf, "binpack")["arguments"] == {
        "binpack.weight": 10, "binpack.resources": "volcano.sh/vgpu-memory,volcano.sh/vgpu-number",
        "binpack.resources.volcano.sh/vgpu-memory": 1, "binpack.resources.volcano.sh/vgpu-number": 5}


@pytest.mark.parametrize("actions, tiers, deviceshare, binpack, message", [
    (ACTIONS, DEFAULT_TIERS, {"vgpu_enable": True, "gpu_sharing_enable": True}, {},
     "vgpu_enable and gpu_sharing_enable cannot be combined"),
    (ACTIONS, DEFAULT_TIERS, {"gpu_sharing_enable": True, "gpu_number_enable": True}, {},
     "gpu_sharing_enable and gpu_number_enable cannot be combined"),
    (ACTIONS, DEFAULT_TIERS, {"vgpu_enable": True, "schedule_policy": "pack"}, {},
     "schedule_policy must be one of binpack, spread"),
    (ACTIONS, DEFAULT_TIERS, {"vgpu_enable": "yes"}, {}, "vgpu_enable must be true or false"),
    (ACTIONS, DEFAULT_TIERS, {"vgpu_enable": True, "schedule_weight": -1}, {}, "schedule_weight must be an integer"),
    (ACTIONS, DEFAULT_TIERS, {"vgpuEnable": True}, {}, "unknown key(s) vgpuEnable"),
    (["enqueue", "place"], DEFAULT_TIERS, {}, {}, "unknown action 'place'"),
    ([], DEFAULT_TIERS, {}, {}, "volcano_scheduler_actions must not be empty"),
    (ACTIONS, [{"plugins": []}], {}, {}, "needs a non-empty 'plugins' list"),
    (ACTIONS, [{"plugins": [{"name": "gang"}, {"name": "gang"}]}], {}, {}, "listed twice: gang"),
    (ACTIONS, [{"plugins": [{"name": "gang"}]}], {"vgpu_enable": True}, {}, "nowhere to put it"),
    (ACTIONS, DEFAULT_TIERS, {}, {"weight": -2}, "volcano_binpack.weight must be an integer >= 0"),
])
def test_validate(actions, tiers, deviceshare, binpack, message):
    errors = vc.validate(actions, tiers, deviceshare, binpack)
    assert any(message in e for e in errors), errors


# Tiers as Volcano's docs and issue threads write them: deviceshare arguments inside the tier.
DOC_TIERS = [{"plugins": [{"name": "priority"}, {"name": "gang"}]},
             {"plugins": [{"name": "predicates"},
                          {"name": "deviceshare", "arguments": {"deviceshare.VGPUEnable": True,
                                                                "deviceshare.SchedulePolicy": "spread"}}]}]


@pytest.mark.parametrize("actions, tiers, deviceshare, message", [
    # Every character of a comma string used to be read as an action.
    ("enqueue, allocate, teleport", DEFAULT_TIERS, {}, "unknown action 'teleport'"),
    ("enqueue,,allocate", DEFAULT_TIERS, {}, "unknown action ''"),
    (7, DEFAULT_TIERS, {}, "must be a list or a comma-separated string"),
    (ACTIONS, [{"plugins": [{"name": "gang"}, {"name": "predicate"}]}], {}, "unknown plugin 'predicate'"),
    # Tier arguments are checked like the structured ones ...
    (ACTIONS, [{"plugins": [{"name": "predicates"}, {"name": "deviceshare", "arguments": {
        "deviceshare.VGPUEnable": True, "deviceshare.GPUSharingEnable": True}}]}], {},
     "vgpu_enable and gpu_sharing_enable cannot be combined"),
    (ACTIONS, [{"plugins": [{"name": "deviceshare", "arguments": {"deviceshare.VGPUEnable": "yes"}}]}], {},
     "vgpu_enable must be true or false, got 'yes'"),
    (ACTIONS, [{"plugins": [{"name": "deviceshare", "arguments": {"deviceshare.ScheduleWeight": "10"}}]}], {},
     "schedule_weight must be an integer >= 0, got '10'"),
    (ACTIONS, [{"plugins": [{"name": "deviceshare", "arguments": {"deviceshare.VgpuEnable": True}}]}], {},
     "deviceshare argument 'deviceshare.VgpuEnable' is unknown"),
    (ACTIONS, [{"plugins": [{"name": "deviceshare", "arguments": ["deviceshare.VGPUEnable"]}]}], {},
     "deviceshare's arguments must be a mapping"),
    # ... with the structured ones: a tier argument combined with a structured flag, or contradicting it.
    (ACTIONS, [{"plugins": [{"name": "predicates"}, {"name": "deviceshare", "arguments": {
        "deviceshare.GPUSharingEnable": True}}]}], {"vgpu_enable": True},
     "vgpu_enable and gpu_sharing_enable cannot be combined"),
    (ACTIONS, DOC_TIERS, {"vgpu_enable": True, "schedule_policy": "binpack"},
     "deviceshare.SchedulePolicy is 'spread' in volcano_scheduler_tiers but 'binpack' in "
     "volcano_deviceshare.schedule_policy"),
])
def test_validate_real_world_shapes(actions, tiers, deviceshare, message):
    errors = vc.validate(actions, tiers, deviceshare)
    assert any(message in e for e in errors), errors


# Volcano 1.15's GPU exclusivity (pkg/scheduler/plugins/deviceshare/gpuexclusive.go), written in the tiers as its
# tests and docs write it, or through volcano_deviceshare.
EXCLUSIVE_TIERS = [{"plugins": [{"name": "predicates"}, {"name": "deviceshare", "arguments": {
    "deviceshare.VGPUEnable": True,
    "deviceshare.GPUExclusiveRules": [{"app": "training"}, {"team": "a", "tier": "gold"}]}}]}]


def test_gpu_exclusive_rules_are_accepted_and_rendered():
    assert vc.validate(ACTIONS, EXCLUSIVE_TIERS, {}) == []
    conf = vc.scheduler_conf(ACTIONS, EXCLUSIVE_TIERS, {})
    assert plugin(conf, "deviceshare")["arguments"]["deviceshare.GPUExclusiveRules"] == [
        {"app": "training"}, {"team": "a", "tier": "gold"}]
    structured = {"vgpu_enable": True, "gpu_exclusive_rules": [{"app": "training"}]}
    assert vc.validate(ACTIONS, DEFAULT_TIERS, structured) == []
    assert plugin(vc.scheduler_conf(ACTIONS, DEFAULT_TIERS, structured), "deviceshare")["arguments"][
        "deviceshare.GPUExclusiveRules"] == [{"app": "training"}]


@pytest.mark.parametrize(("rules", "message"), [
    ({"app": "training"}, "gpu_exclusive_rules must be a list of label mappings"),
    ([{}], "gpu_exclusive_rules[0] must be a non-empty mapping"),
    (["app=training"], "gpu_exclusive_rules[0] must be a non-empty mapping"),
    # YAML reads true and 1 as a bool and an int; Volcano would drop such a label without a word.
    ([{"app": "training"}, {"exclusive": True, "gpus": 1}], "gpu_exclusive_rules[1]: label values must be strings"),
])
def test_gpu_exclusive_rules_that_volcano_would_drop_are_refused(rules, message):
    errors = vc.validate(ACTIONS, DEFAULT_TIERS, {"vgpu_enable": True, "gpu_exclusive_rules": rules})
    assert [e for e in errors if message in e], errors


def test_comma_string_actions_as_volcano_writes_them():
    assert vc.validate("enqueue, allocate, backfill", DEFAULT_TIERS, {"vgpu_enable": True}) == []
    conf = vc.scheduler_conf("enqueue,allocate , backfill", DEFAULT_TIERS, {"vgpu_enable": True})
    assert conf["actions"] == "enqueue, allocate, backfill"


@pytest.mark.parametrize("action", ["gangpreempt", "gangreclaim", "preempt", "reclaim", "shuffle"])
def test_actions_of_the_pinned_volcano_are_accepted(action):
    assert vc.validate(ACTIONS + [action], DEFAULT_TIERS, {}) == []


def test_custom_plugins_are_accepted_when_declared():
    tiers = [{"plugins": [{"name": "gang"}, {"name": "my-topology"}]}]
    assert any("unknown plugin 'my-topology'" in e for e in vc.validate(ACTIONS, tiers, {}))
    assert vc.validate(ACTIONS, tiers, {}, custom_plugins=["my-topology"]) == []


def test_deviceshare_arguments_in_tiers_are_kept_without_structured_settings():
    """Volcano's documented form, with volcano_deviceshare empty: deviceshare used to be dropped."""
    assert vc.validate(ACTIONS, DOC_TIERS, {}) == []
    conf = vc.scheduler_conf(ACTIONS, DOC_TIERS, {})
    assert plugin(conf, "deviceshare")["arguments"] == {"deviceshare.VGPUEnable": True,
                                                        "deviceshare.SchedulePolicy": "spread"}


def test_deviceshare_arguments_in_tiers_merge_with_structured_settings():
    tiers = [{"plugins": [{"name": "predicates"}, {"name": "deviceshare", "arguments": {
        "deviceshare.VGPUEnable": "true", "deviceshare.NodeLockEnable": "false"}}]}]
    deviceshare = {"vgpu_enable": True, "schedule_policy": "binpack", "schedule_weight": 10}
    assert vc.validate(ACTIONS, tiers, deviceshare) == []
    conf = vc.scheduler_conf(ACTIONS, tiers, deviceshare)
    assert plugin(conf, "deviceshare")["arguments"] == {
        "deviceshare.VGPUEnable": True, "deviceshare.NodeLockEnable": False, "deviceshare.SchedulePolicy": "binpack",
        "deviceshare.ScheduleWeight": 10}


def test_validate_accepts_the_defaults():
    deviceshare = {"vgpu_enable": True, "schedule_policy": "spread", "schedule_weight": 10}
    assert vc.validate(ACTIONS, DEFAULT_TIERS, deviceshare) == []


@pytest.mark.parametrize("admissions, namespaces, want", [
    (["/jobs/mutate"], ["mljobs"], "/jobs/mutate,/pods/mutate"),
    (["/jobs/mutate", "/pods/mutate"], ["mljobs"], "/jobs/mutate,/pods/mutate"),
    (["/jobs/mutate"], [], "/jobs/mutate"),
])
def test_enabled_admissions(admissions, namespaces, want):
    assert vc.enabled_admissions(admissions, namespaces) == want


def test_admission_conf():
    assert vc.admission_conf([]) == {}
    conf = vc.admission_conf(["teamb", "mljobs"])
    assert conf["resourceGroups"][0]["object"] == {"key": "namespace", "value": ["mljobs", "teamb"]}
    assert conf["resourceGroups"][0]["schedulerName"] == "volcano"


def test_config_hash_is_stable_and_sensitive():
    one = vc.scheduler_conf(ACTIONS, DEFAULT_TIERS, {"vgpu_enable": True})
    two = vc.scheduler_conf(ACTIONS, DEFAULT_TIERS, {"vgpu_enable": True, "schedule_policy": "spread"})
    assert vc.config_hash(one) == vc.config_hash(dict(one))
    assert vc.config_hash(one) != vc.config_hash(two)


@pytest.mark.parametrize("deviceshare, want", [
    ({"vgpu_enable": True}, {"namespace": "kube-system", "name": "volcano-vgpu-device-config"}),
    # The arguments as Volcano's docs spell them, moved elsewhere.
    ({"vgpu_enable": True, "known_geometries_cm_name": "gpu-config", "known_geometries_cm_namespace": "gpu"},
     {"namespace": "gpu", "name": "gpu-config"}),
    ({"vgpu_enable": False}, None),                     # no deviceshare in the conf: nothing read once
])
def test_device_configmap_is_the_one_deviceshare_loads(deviceshare, want):
    settings = {"actions": ACTIONS, "tiers": DEFAULT_TIERS, "deviceshare": deviceshare}
    assert vc.plan(settings)["device_configmap"] == want


def test_scheduler_labels_follow_the_device_configmap_as_the_cluster_has_it():
    """deviceshare loads the ConfigMap once: its content, whoever wrote it, is in the scheduler's pod labels, so a
    change rolls the scheduler; a missing ConfigMap has a label of its own (created later, it rolls too)."""
    planned = vc.plan({"actions": ACTIONS, "tiers": DEFAULT_TIERS, "deviceshare": {"vgpu_enable": True}})
    data = {"device-config.yaml": "nvidia:\n  gpuMemoryFactor: 3\n"}
    first = vc.scheduler_pod_labels(planned, [{"data": data}])
    assert first["gpufleet.io/scheduler-config"] == planned["config_hash"]
    assert first == vc.scheduler_pod_labels(planned, [{"data": dict(data)}])
    changed = vc.scheduler_pod_labels(planned, [{"data": {"device-config.yaml": "nvidia:\n  gpuMemoryFactor: 2\n"}}])
    assert changed["gpufleet.io/device-config"] != first["gpufleet.io/device-config"]
    assert vc.scheduler_pod_labels(planned, [])["gpufleet.io/device-config"] == "missing"
    # Label values: at most 63 characters of [A-Za-z0-9._-].
    assert all(len(v) <= 63 and v.replace("-", "").isalnum() for v in first.values())
    without = vc.plan({"actions": ACTIONS, "tiers": DEFAULT_TIERS, "deviceshare": {"vgpu_enable": False}})
    assert vc.scheduler_pod_labels(without, [{"data": data}]) == {"gpufleet.io/scheduler-config": without["config_hash"]}


def test_configurations_are_rendered_and_checked():
    settings = {"actions": ACTIONS + ["preempt"], "tiers": DEFAULT_TIERS, "deviceshare": {"vgpu_enable": True}}
    without = vc.plan(settings)
    assert without["errors"] == [] and "configurations" not in without["scheduler_conf"]
    configured = vc.plan(dict(settings, configurations=[
        {"name": "preempt", "arguments": {"enableTopologyAwarePreemption": True}}, {"name": "allocate"}]))
    assert configured["errors"] == []
    assert configured["scheduler_conf"]["configurations"] == [
        {"name": "preempt", "arguments": {"enableTopologyAwarePreemption": True}}, {"name": "allocate", "arguments": {}}]
    assert configured["config_hash"] != without["config_hash"]


@pytest.mark.parametrize(("configurations", "message"), [
    ({"preempt": {}}, "volcano_scheduler_configurations must be a list"),
    ([{"name": "prempt", "arguments": {}}], "volcano_scheduler_configurations[0].name 'prempt' is no action"),
    ([{"name": "preempt"}, {"name": "preempt", "arguments": {"a": 1}}], "action 'preempt' is configured twice"),
    ([{"name": "allocate", "arguments": ["x"]}], "volcano_scheduler_configurations[0].arguments must be a mapping"),
    ([{"name": "allocate", "args": {}}], "volcano_scheduler_configurations[0] must be {name: <action>"),
])
def test_configurations_volcano_would_misread_are_refused(configurations, message):
    errors = vc.plan({"actions": ACTIONS, "tiers": DEFAULT_TIERS, "deviceshare": {"vgpu_enable": True},
                      "configurations": configurations})["errors"]
    assert [e for e in errors if message in e], errors


def queue(name, status=None, **spec):
    """A Queue as the cluster returns it: the admission webhook's defaults and the controller's status beside what
    the role set."""
    return {"apiVersion": vc.QUEUE_API, "kind": "Queue", "metadata": {"name": name, "resourceVersion": "42"},
            "spec": dict({"weight": 1, "reclaimable": True, "parent": "root"}, **spec),
            "status": status or {"state": "Open", "running": 3, "pending": 1}}


@pytest.mark.parametrize("queues, existing, applied", [
    ([{"name": "ml"}], [], [{"weight": 1, "reclaimable": True}]),                          # a first run
    ([{"name": "ml"}], [queue("ml")], []),                                                 # a rerun, jobs running
    ([{"name": "ml", "weight": 4}], [queue("ml")], [{"weight": 4, "reclaimable": True}]),  # a changed weight
    ([{"name": "ml", "reclaimable": False}], [queue("ml")], [{"weight": 1, "reclaimable": False}]),
    # capability as YAML writes it against the cluster's copy: 4 and "4" are one cpu; another memory is a change
    ([{"name": "ml", "capability": {"cpu": 4, "memory": "8Gi"}}],
     [queue("ml", capability={"cpu": "4", "memory": "8Gi"})], []),
    ([{"name": "ml", "capability": {"cpu": 4, "memory": "16Gi"}}],
     [queue("ml", capability={"cpu": "4", "memory": "8Gi"})],
     [{"weight": 1, "reclaimable": True, "capability": {"cpu": 4, "memory": "16Gi"}}]),
    ([{"name": "ml", "capability": {"cpu": 4}}], [queue("ml")], [{"weight": 1, "reclaimable": True,
                                                                  "capability": {"cpu": 4}}]),
    ([{"name": "ml"}], [queue("ml", capability={"cpu": "4"})], [{"weight": 1, "reclaimable": True}]),  # dropped
    ([{"name": "ml"}, {"name": "batch", "weight": 2}], [queue("ml"), queue("default", weight=1)],
     [{"weight": 2, "reclaimable": True}]),                                               # only the missing one
])
def test_queues_applied_are_those_the_cluster_lacks_or_holds_otherwise(queues, existing, applied):
    definitions = vc.queue_definitions(queues, existing)
    assert [d["spec"] for d in definitions] == applied
    assert all(d["apiVersion"] == vc.QUEUE_API and d["kind"] == "Queue" for d in definitions)
    wanted = {q["name"] for q in queues} - {q["metadata"]["name"] for q in existing}
    assert wanted <= {d["metadata"]["name"] for d in definitions}
