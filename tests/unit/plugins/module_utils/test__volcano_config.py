"""Table tests for Volcano's scheduler/admission configuration built from structured settings."""

import pytest

from ansible_collections.gpufleet.vgpu.plugins.module_utils import _volcano_config as vc

ACTIONS = ["enqueue", "allocate", "backfill"]


def plugins(conf, tier=1):
    return [p["name"] for p in conf["tiers"][tier]["plugins"]]


def plugin(conf, name):
    return next(p for t in conf["tiers"] for p in t["plugins"] if p["name"] == name)


def test_default_keeps_the_chart_default_and_adds_deviceshare():
    conf = vc.scheduler_conf(ACTIONS, vc.DEFAULT_TIERS, {"vgpu_enable": True, "schedule_policy": "binpack"})
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
    conf = vc.scheduler_conf(ACTIONS, vc.DEFAULT_TIERS, {"vgpu_enable": False})
    assert "deviceshare" not in plugins(conf)


def test_binpack_arguments():
    conf = vc.scheduler_conf(ACTIONS, vc.DEFAULT_TIERS, {"vgpu_enable": True},
                             {"weight": 10, "resources": {"volcano.sh/vgpu-number": 5, "volcano.sh/vgpu-memory": 1}})
    assert plugin(conf, "binpack")["arguments"] == {
        "binpack.weight": 10, "binpack.resources": "volcano.sh/vgpu-memory,volcano.sh/vgpu-number",
        "binpack.resources.volcano.sh/vgpu-memory": 1, "binpack.resources.volcano.sh/vgpu-number": 5}


@pytest.mark.parametrize("actions, tiers, deviceshare, binpack, message", [
    (ACTIONS, vc.DEFAULT_TIERS, {"vgpu_enable": True, "gpu_sharing_enable": True}, {},
     "vgpu_enable and gpu_sharing_enable cannot be combined"),
    (ACTIONS, vc.DEFAULT_TIERS, {"gpu_sharing_enable": True, "gpu_number_enable": True}, {},
     "gpu_sharing_enable and gpu_number_enable cannot be combined"),
    (ACTIONS, vc.DEFAULT_TIERS, {"vgpu_enable": True, "schedule_policy": "pack"}, {},
     "schedule_policy must be one of binpack, spread"),
    (ACTIONS, vc.DEFAULT_TIERS, {"vgpu_enable": "yes"}, {}, "vgpu_enable must be true or false"),
    (ACTIONS, vc.DEFAULT_TIERS, {"vgpu_enable": True, "schedule_weight": -1}, {}, "schedule_weight must be an integer"),
    (ACTIONS, vc.DEFAULT_TIERS, {"vgpuEnable": True}, {}, "unknown key(s) vgpuEnable"),
    (["enqueue", "place"], vc.DEFAULT_TIERS, {}, {}, "unknown action 'place'"),
    ([], vc.DEFAULT_TIERS, {}, {}, "volcano_scheduler_actions must not be empty"),
    (ACTIONS, [{"plugins": []}], {}, {}, "needs a non-empty 'plugins' list"),
    (ACTIONS, [{"plugins": [{"name": "gang"}, {"name": "gang"}]}], {}, {}, "listed twice: gang"),
    (ACTIONS, [{"plugins": [{"name": "gang"}]}], {"vgpu_enable": True}, {}, "nowhere to put it"),
    (ACTIONS, vc.DEFAULT_TIERS, {}, {"weight": -2}, "volcano_binpack.weight must be an integer >= 0"),
])
def test_validate(actions, tiers, deviceshare, binpack, message):
    errors = vc.validate(actions, tiers, deviceshare, binpack)
    assert any(message in e for e in errors), errors


def test_validate_accepts_the_defaults():
    assert vc.validate(ACTIONS, vc.DEFAULT_TIERS, {"vgpu_enable": True, "schedule_policy": "spread",
                                                   "schedule_weight": 10}) == []


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
    one = vc.scheduler_conf(ACTIONS, vc.DEFAULT_TIERS, {"vgpu_enable": True})
    two = vc.scheduler_conf(ACTIONS, vc.DEFAULT_TIERS, {"vgpu_enable": True, "schedule_policy": "spread"})
    assert vc.config_hash(one) == vc.config_hash(dict(one))
    assert vc.config_hash(one) != vc.config_hash(two)
