"""A role's option values against its argument spec: the YAML mistakes Ansible's conversions would hide, and
Ansible's own checks, one message each (plugin_utils._role_options)."""

import pytest

from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _role_options as ro

SPEC = {
    "volcano_chart_version": {"type": "str"},
    "volcano_scheduler_actions": {"type": "list", "elements": "str"},   # also a comma string (COMMA_STRINGS)
    "volcano_admission_namespaces": {"type": "list", "elements": "str"},
    "volcano_deviceshare": {"type": "dict", "options": {"schedule_policy": {"type": "str"}}},
    "volcano_wait_timeout": {"type": "int", "default": 300},
    "volcano_helm_atomic": {"type": "bool"},
    "device_plugin_vgpu": {"type": "dict", "options": {"mode": {"type": "str", "choices": ["hami-core", "mig"]}}},
    "volcano_queues": {"type": "list", "elements": "dict", "options": {"name": {"type": "str"}}},
}


@pytest.mark.parametrize("values, needles", [
    # YAML's own types, which a str, list or dict option would silently convert
    ({"volcano_chart_version": 1.15}, ["volcano_chart_version is the number 1.15 in YAML", '"1.15"']),
    ({"volcano_chart_version": True}, ["volcano_chart_version is the boolean true in YAML"]),
    ({"volcano_admission_namespaces": "mljobs"},
     ["volcano_admission_namespaces must be a YAML list, got the string 'mljobs'"]),
    ({"volcano_deviceshare": "binpack"}, ["volcano_deviceshare must be a YAML mapping", "'binpack'"]),
    ({"volcano_deviceshare": ["binpack"]}, ["volcano_deviceshare must be a YAML mapping", "the list"]),
    ({"volcano_deviceshare": {"schedule_policy": 2.5}}, ["volcano_deviceshare.schedule_policy is the number 2.5"]),
    ({"volcano_queues": [{"name": True}]}, ["volcano_queues[0].name is the boolean true"]),
    # Ansible's checks: type, choice, unknown suboption
    ({"volcano_wait_timeout": "soon"}, ["volcano_wait_timeout", "soon"]),
    ({"volcano_helm_atomic": "perhaps"}, ["volcano_helm_atomic", "perhaps"]),
    ({"device_plugin_vgpu": {"mode": "time-slicing"}}, ["mode must be one of: hami-core, mig, got: time-slicing",
                                                        "device_plugin_vgpu"]),
    ({"device_plugin_vgpu": {"splits": 3}}, ["device_plugin_vgpu.splits"]),
])
def test_mistakes_name_the_variable_and_the_value(values, needles):
    errors = ro.check(SPEC, values)
    assert errors
    for needle in needles:
        assert any(needle in error for error in errors), (needle, errors)


@pytest.mark.parametrize("values", [
    {"volcano_chart_version": "1.15.1", "volcano_scheduler_actions": "enqueue, allocate, backfill"},
    {"volcano_admission_namespaces": ["mljobs"], "volcano_deviceshare": {"schedule_policy": "binpack"}},
    {"volcano_wait_timeout": 300, "volcano_chart_version": None},       # unset (None) is not checked
    {},
])
def test_valid_values_pass(values):
    assert ro.check(SPEC, values) == []


def test_one_message_per_mistake():
    errors = ro.check(SPEC, {"volcano_chart_version": 1.15, "volcano_admission_namespaces": "a,b"})
    assert len(errors) == 2, errors


def test_without_defaults_strips_nested_defaults():
    spec = {"a": {"type": "int", "default": 1},
            "b": {"type": "dict", "default": {}, "options": {"c": {"type": "str", "default": "{{ x }}"}}}}
    assert ro.without_defaults(spec) == {"a": {"type": "int"}, "b": {"type": "dict", "options": {"c": {"type": "str"}}}}
    assert spec["a"]["default"] == 1  # the role's spec itself is left alone


def test_spec_options_of_an_entry_point():
    assert ro.spec_options({"argument_specs": {"main": {"options": {"x": {}}}}}) == {"x": {}}
    with pytest.raises(ValueError, match="argument_specs.uncordon.options"):
        ro.spec_options({"argument_specs": {"main": {"options": {}}}}, "uncordon")


def test_plain_turns_subclasses_into_plain_data():
    class Tagged(str):
        pass

    class TaggedInt(int):
        pass

    value = ro.plain({Tagged("a"): [TaggedInt(3), True, 1.5, None, (Tagged("x"),)]})
    assert value == {"a": [3, True, 1.5, None, ["x"]]}
    assert list(value)[0].__class__ is str and value["a"][0].__class__ is int and value["a"][1] is True
