"""The code digest changes with any file's content or name, and ignores compiled Python and Markdown."""

import pytest
from ansible.errors import AnsibleLookupError

from ansible_collections.gpufleet.vgpu.plugins.lookup.code_digest import tree_digest


def test_code_digest(tmp_path):
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "main.yml").write_text("---\n")
    first = tree_digest([str(tmp_path)])
    assert tree_digest([str(tmp_path)]) == first
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    (tmp_path / "y.pyc").write_bytes(b"\0")
    (tmp_path / "README.md").write_text("# docs\n")
    assert tree_digest([str(tmp_path)]) == first
    (tmp_path / "tasks" / "main.yml").write_text("---\n# changed\n")
    second = tree_digest([str(tmp_path)])
    assert second != first
    (tmp_path / "tasks" / "main.yml").rename(tmp_path / "tasks" / "other.yml")
    assert tree_digest([str(tmp_path)]) not in (first, second)


def test_code_digest_rejects_a_missing_directory(tmp_path):
    with pytest.raises(AnsibleLookupError, match="is not a directory"):
        tree_digest([str(tmp_path / "absent")])
