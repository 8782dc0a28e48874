"""The vGPU memory admission policy's content (its CEL is evaluated by the lab's real API server, tests/lab)."""

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
