"""The fast path's controller side: the code digest, the role's inputs, their digest and the verdict on a stamp."""

import pytest

from ansible_collections.gpufleet.vgpu.plugins.plugin_utils import _fast_path as fp


def test_tree_digest(tmp_path):
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "main.yml").write_text("---\n")
    first = fp.tree_digest([str(tmp_path)])
    assert fp.tree_digest([str(tmp_path)]) == first
    # Compiled Python and documentation do not change what a role does on a node.
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    (tmp_path / "y.pyc").write_bytes(b"\0")
    (tmp_path / "README.md").write_text("# docs\n")
    assert fp.tree_digest([str(tmp_path)]) == first
    (tmp_path / "tasks" / "main.yml").write_text("---\n# changed\n")
    second = fp.tree_digest([str(tmp_path)])
    assert second != first
    (tmp_path / "tasks" / "main.yml").rename(tmp_path / "tasks" / "other.yml")
    assert fp.tree_digest([str(tmp_path)]) not in (first, second)


def test_tree_digest_rejects_a_missing_directory(tmp_path):
    with pytest.raises(ValueError, match="is not a directory"):
        fp.tree_digest([str(tmp_path / "absent")])


SPECS = {"argument_specs": {"main": {"options": {"r_b": {}, "r_a": {}, "r_fast_path": {}}}}}


@pytest.mark.parametrize(
    ("specs", "expected"),
    [
        (SPECS, ["r_a", "r_b"]),
        ({"argument_specs": {"main": {"options": {"r_fast_path": {}}}}}, []),
        ({"argument_specs": {"other": {"options": {"r_a": {}}}}}, ValueError),
        ({}, ValueError),
        (None, ValueError),
    ],
)
def test_input_names(specs, expected):
    if expected is ValueError:
        with pytest.raises(ValueError, match="role r has no options"):
            fp.input_names("r", specs)
    else:
        assert fp.input_names("r", specs) == expected


FACTS = {"os_family": "RedHat", "distribution": "AlmaLinux", "distribution_version": "9.5", "architecture": "x86_64",
         "kernel": "5.14.0-503.el9.x86_64", "virtualization_type": "kvm", "date_time": {"epoch": "1"}, "memfree_mb": 1}


@pytest.mark.parametrize(
    ("options", "facts", "code", "same"),
    [
        ({"r_a": 1}, FACTS, "c", True),
        # Facts outside STATE_FACTS change on every run; they must not change the digest.
        ({"r_a": 1}, dict(FACTS, memfree_mb=2, date_time={"epoch": "2"}), "c", True),
        ({"r_a": 2}, FACTS, "c", False),
        ({"r_a": 1, "r_b": None}, FACTS, "c", False),
        ({"r_a": 1}, dict(FACTS, kernel="5.14.0-570.el9.x86_64"), "c", False),
        ({"r_a": 1}, FACTS, "d", False),
    ],
)
def test_inputs_digest(options, facts, code, same):
    base = fp.inputs_digest({"r_a": 1}, FACTS, "c")
    assert (fp.inputs_digest(options, facts, code) == base) is same


def facts_with(stamp, epoch=1000):
    return {"ansible_local": {"gpufleet_state": {"role": stamp}}, "date_time": {"epoch": str(epoch)}}


@pytest.mark.parametrize(
    ("facts", "kwargs", "converged", "reason"),
    [
        (facts_with({"digest": "d1", "intact": True}), {}, True, "unchanged since the last run"),
        (facts_with({"digest": "d1", "intact": True}), {"enabled": False}, False, "the fast path is off"),
        ({}, {}, False, "no state recorded yet"),
        ({"ansible_local": {"gpufleet_state": "error loading facts"}}, {}, False, "the state fact failed"),
        ({"ansible_local": {"gpufleet_state": {}}}, {}, False, "no state recorded yet"),
        (facts_with({"digest": "d0", "intact": True}), {}, False, "the inputs differ from the last run"),
        (facts_with({"digest": "d1", "intact": False, "drift": ["file /a is gone"]}), {}, False,
         "changed on the node: file /a is gone"),
        (facts_with({"digest": None, "intact": False, "drift": ["unreadable stamp: x"]}), {}, False,
         "unreadable stamp: x"),
        (facts_with({"digest": "d1", "intact": True}, epoch=1000), {"now": 1100}, True, "unchanged"),
        (facts_with({"digest": "d1", "intact": True}, epoch=1000), {"now": 4600}, False, "the facts are 3600 s old"),
        ({"ansible_local": {"gpufleet_state": {"role": {"digest": "d1", "intact": True}}}}, {"now": 1}, False,
         "the facts carry no time"),
    ],
)
def test_verdict(facts, kwargs, converged, reason):
    result = fp.verdict(facts, "role", "d1", **kwargs)
    assert result["converged"] is converged
    assert reason in result["reason"]
