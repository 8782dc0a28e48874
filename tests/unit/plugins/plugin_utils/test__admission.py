"""The vGPU memory admission policy's content (its CEL is evaluated by the lab's real API server, tests/lab)."""

import pytest

from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _admission

FLEET = {"rig01": [{"model": "NVIDIA GeForce RTX 4090", "memory_mib": 24564}] * 5,
         "rig02": [{"model": "NVIDIA GeForce RTX 4070 SUPER", "memory_mib": 16376}] * 5}


def test_largest_card_in_units_of_the_factor():
    assert _admission.largest_gpu(FLEET, 3) == {"node": "rig01", "model": "NVIDIA GeForce RTX 4090",
                                                "memory_mib": 24564, "units": 8188}
    assert _admission.largest_gpu(FLEET, 1)["units"] == 24564
    assert _admission.largest_gpu({}, 3) is None


def test_policy_refuses_more_than_the_largest_card_and_explains_the_unit():
    policy, binding = _admission.policy("gpufleet-vgpu-memory", _admission.largest_gpu(FLEET, 3), 3)
    assert policy["kind"] == "ValidatingAdmissionPolicy" and binding["spec"]["policyName"] == "gpufleet-vgpu-memory"
    assert binding["spec"]["validationActions"] == ["Deny"]
    [validation] = policy["spec"]["validations"]
    assert "compareTo(quantity('8188')) <= 0" in validation["expression"]
    message = validation["messageExpression"]
    for fragment in ("units of 3 MiB", "N units = N x 3 MiB", "NVIDIA GeForce RTX 4090 on rig01 with 24564 MiB = 8188",
                     "at most 8188"):
        assert fragment in message, (fragment, message)
    # The message is one CEL string expression: no quote of its own text may end it early.
    assert message.count("'") % 2 == 0
    assert "initContainers" in policy["spec"]["variables"][0]["expression"]


def test_the_percentage_is_not_offered_as_a_way_out():
    """vgpu-memory-percentage is no node resource: a pod asking for it is never placed (tests/lab)."""
    policy, dummy = _admission.policy("p", _admission.largest_gpu(FLEET, 3), 3)
    assert "percentage" not in policy["spec"]["validations"][0]["messageExpression"]


@pytest.mark.parametrize("splits, factor, want", [
    # The article's fleet, split 2 everywhere: a 4070 Super (16376 MiB = 5458 units at factor 3) halved.
    ({"rig01": 2, "rig02": 2}, 3, ("rig02", 2729, 8187)),
    # A finer split on the 4090s makes theirs the smaller share: 8188 / 4.
    ({"rig01": 4, "rig02": 2}, 3, ("rig01", 2047, 6141)),
    ({"rig01": 1, "rig02": 1}, 1, ("rig02", 16376, 16376)),
    # Rounded down, so that `split` shares always fit on the card.
    ({"rig01": 2, "rig02": 3}, 3, ("rig02", 1819, 5457)),
])
def test_even_share_fits_split_vgpus_on_every_card(splits, factor, want):
    share = _admission.even_share(FLEET, splits, factor)
    assert (share["node"], share["units"], share["mib"]) == want
    for node, cards in FLEET.items():
        assert all(share["units"] * splits[node] <= card["memory_mib"] // factor for card in cards)


def test_even_share_without_gpus_is_none():
    assert _admission.even_share({}, {}, 3) is None


def test_default_memory_policy_adds_the_share_only_where_memory_is_missing():
    share = _admission.even_share(FLEET, {"rig01": 2, "rig02": 2}, 3)
    policy, binding = _admission.default_memory_policy("gpufleet-vgpu-default-memory", share,
                                                       "admissionregistration.k8s.io/v1beta1")
    assert (policy["apiVersion"], policy["kind"]) == ("admissionregistration.k8s.io/v1beta1", "MutatingAdmissionPolicy")
    assert (binding["kind"], binding["spec"]["policyName"]) == ("MutatingAdmissionPolicyBinding",
                                                                "gpufleet-vgpu-default-memory")
    [condition] = policy["spec"]["matchConditions"]
    for fragment in ("'volcano.sh/vgpu-number' in c.resources.limits", "!(has(c.resources.limits) && "
                     "'volcano.sh/vgpu-memory' in c.resources.limits", "'volcano.sh/vgpu-memory-percentage'"):
        assert fragment in condition["expression"], fragment
    [mutation] = policy["spec"]["mutations"]
    assert mutation["patchType"] == "ApplyConfiguration"
    expression = mutation["applyConfiguration"]["expression"]
    assert expression.count("{'volcano.sh/vgpu-memory': '2729'}") == 2  # limits and requests
    assert policy["metadata"]["annotations"]["gpufleet.io/vgpu-default-memory"] == (
        "2729 units = 8187 MiB: NVIDIA GeForce RTX 4070 SUPER on rig02 (16376 MiB) / split 2")


def test_default_memory_policy_follows_renamed_resources():
    share = _admission.even_share(FLEET, {"rig01": 2, "rig02": 2}, 3)
    policy, dummy = _admission.default_memory_policy("p", share, "admissionregistration.k8s.io/v1",
                                                     {"number": "example.com/vgpu", "memory": "example.com/vmem"})
    expression = policy["spec"]["mutations"][0]["applyConfiguration"]["expression"]
    assert "'example.com/vgpu' in c.resources.limits" in expression and "{'example.com/vmem': '2729'}" in expression


PLAN = {"expected": {"rig01": {"split": 2}, "rig02": {"split": 2}}, "gpus": FLEET, "memory_factor": 3}


@pytest.mark.parametrize("config, number, memory", [
    ({}, "volcano.sh/vgpu-number", "volcano.sh/vgpu-memory"),
    ({"resourceCountName": "example.com/vgpu", "resourceMemoryName": "example.com/vmem"}, "example.com/vgpu",
     "example.com/vmem"),
])
def test_default_memory_probe_asks_what_the_policy_answers(config, number, memory):
    probe = _admission.default_memory_probe_for_plan(dict(PLAN, device_config=config), "kube-system", "img:v1")
    [container] = probe["pod"]["spec"]["containers"]
    assert container["resources"] == {"limits": {number: "1"}} and container["image"] == "img:v1"
    assert probe["pod"]["metadata"]["namespace"] == "kube-system" and probe["pod"]["spec"]["schedulerName"] == "volcano"
    # The policy's own share, as the API server returns a quantity.
    assert (probe["resource"], probe["units"]) == (memory, "2729")
    policy, dummy = _admission.default_memory_policy_for_plan(dict(PLAN, device_config=config))
    assert "{'%s': '2729'}" % memory in policy["spec"]["mutations"][0]["applyConfiguration"]["expression"]


def test_default_memory_probe_without_gpus_is_none():
    assert _admission.default_memory_probe_for_plan(dict(PLAN, gpus={}), "kube-system", "img:v1") is None


NODE_WITH_GPUS = {"metadata": {"name": "gpu-a"}, "status": {"allocatable": {"cpu": "8", "nvidia.com/gpu": "4"}}}
NODE_WITHOUT = {"metadata": {"name": "rig01"}, "status": {"allocatable": {"volcano.sh/vgpu-number": "10"}}}


def _messages(policy):
    return [v["messageExpression"] for v in policy["spec"]["validations"]]


@pytest.mark.parametrize("nodes, refused", [
    ([NODE_WITHOUT], True),
    ([], True),
    ([NODE_WITHOUT, NODE_WITH_GPUS], False),
    # A node whose NVIDIA plugin is gone reports 0, which offers nothing.
    ([dict(NODE_WITH_GPUS, status={"allocatable": {"nvidia.com/gpu": "0"}})], True),
])
def test_whole_gpus_are_refused_only_where_no_node_offers_them(nodes, refused):
    policy, binding, warn, warn_binding = _admission.request_policies_for_plan(PLAN, "p", ["volcano"], nodes)
    assert binding["spec"]["validationActions"] == ["Deny"] and warn_binding["spec"]["validationActions"] == ["Warn"]
    assert (warn["metadata"]["name"], warn_binding["spec"]["policyName"]) == ("p-units", "p-units")
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    assert ("wholeGpu" in variables) is refused
    assert any("nvidia.com/gpu" in m for m in _messages(policy)) is refused


def test_every_shape_rule_names_the_field_and_the_way_out():
    policy, dummy, dummy_warn, dummy_binding = _admission.request_policies_for_plan(PLAN, "p", ["volcano"], [])
    validations = policy["spec"]["validations"]
    # The memory rule first: a pod that breaks several rules is told about its memory (the API server reports the
    # first refusal).
    assert "compareTo(quantity('8188')) <= 0" in validations[0]["expression"]
    wanted = [("variables.percentage.size() == 0",
               ["volcano.sh/vgpu-memory-percentage", "no node of this fleet offers", "write volcano.sh/vgpu-memory: 4094"]),
              ("variables.vgpuInitContainers.size() == 0", ["init container", "Ask for them in a container"]),
              ("variables.vgpuContainers.size() <= 1", ["cannot get valid pod", "one container"]),
              ("variables.overNumber.size() == 0", ["no node of this fleet has more than 5 GPUs",
                                                    "at most 5 per container"]),
              ("object.spec.schedulerName in [\"volcano\"]", ["spec.schedulerName is ", "Set spec.schedulerName: volcano",
                                                              "volcano_admission_namespaces"]),
              ("variables.wholeGpu.size() == 0", ["asks for nvidia.com/gpu", "ask for volcano.sh/vgpu-number: 1",
                                                  "units of 3 MiB"])]
    assert len(validations) == 1 + len(wanted)
    for validation, (expression, fragments) in zip(validations[1:], wanted):
        assert expression in validation["expression"], validation
        for fragment in fragments:
            assert fragment in validation["messageExpression"], (fragment, validation)
        assert validation["reason"] == "Invalid"


def test_the_rules_follow_renamed_resources_and_scheduler_names():
    config = {"resourceCountName": "example.com/vgpu", "resourceMemoryName": "example.com/vmem",
              "resourceCoreName": "example.com/vcores", "resourceMemoryPercentageName": "example.com/vpct"}
    policy, dummy, warn, dummy_binding = _admission.request_policies_for_plan(
        dict(PLAN, device_config=config), "p", ["volcano", "volcano-b"], [])
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    for resource in ("example.com/vgpu", "example.com/vmem", "example.com/vcores"):
        assert '"%s"' % resource in variables["vgpuContainers"]
    assert '"example.com/vpct"' in variables["percentage"] and "volcano.sh" not in variables["percentage"]
    assert '"example.com/vgpu"' in variables["overNumber"] and "volcano.sh" not in variables["overNumber"]
    assert 'in ["volcano", "volcano-b"]' in policy["spec"]["validations"][5]["expression"]
    assert "example.com/vmem" in warn["spec"]["variables"][0]["expression"]


def test_a_quote_in_a_name_cannot_end_a_message_early():
    assert _admission._lit('say "hi" \\ o') == '"say \\"hi\\" \\\\ o"'  # pylint: disable=protected-access
    policy, dummy, dummy_warn, dummy_binding = _admission.request_policies_for_plan(
        dict(PLAN, gpus={"rig'01": [{"model": 'RTX "X"', "memory_mib": 24564}]}), "p", ['vol"cano'], [])
    for message in _messages(policy)[1:]:
        # Outside the escaped quotes every literal opens and closes.
        assert message.replace('\\"', "").count('"') % 2 == 0, message


@pytest.mark.parametrize("factor, warns", [(3, True), (1, False)])
def test_the_units_warning_only_where_a_unit_is_not_a_mib(factor, warns):
    dummy, dummy_binding, warn, binding = _admission.request_policies_for_plan(
        dict(PLAN, memory_factor=factor), "p", ["volcano"], [])
    [validation] = warn["spec"]["validations"]
    assert (validation["expression"] != "true") is warns
    assert warn["spec"]["failurePolicy"] == "Ignore" and binding["spec"]["validationActions"] == ["Warn"]
    if warns:
        assert validation["expression"] == "variables.mibLike.size() == 0"
        assert "asInteger() % 1024 == 0)" in warn["spec"]["variables"][1]["expression"]
        assert "%%" not in warn["spec"]["variables"][1]["expression"]
        for fragment in ("counts units of 3 MiB on this fleet", " * 3)", " / 3)", "If you meant "):
            assert fragment in validation["messageExpression"], fragment


def test_no_policies_without_gpus():
    assert _admission.request_policies_for_plan(dict(PLAN, gpus={}), "p", ["volcano"], []) == []
