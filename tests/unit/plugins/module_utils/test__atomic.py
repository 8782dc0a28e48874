"""write_if_different: writes only on a difference of content or mode, never in check mode, creates the parent."""

import os
from types import SimpleNamespace

import pytest

from ansible_collections.gpufleet.vgpu.plugins.module_utils import _atomic as atomic


def module(check_mode=False):
    return SimpleNamespace(check_mode=check_mode, atomic_move=os.replace)


@pytest.mark.parametrize("before, before_mode, data, mode, changed", [
    (None, None, b"key", 0o644, True),                 # a new file
    (b"key", 0o644, b"key", 0o644, False),            # same content, same mode
    (b"key", 0o644, "key", 0o644, False),             # text is written as UTF-8
    (b"old", 0o644, b"key", 0o644, True),
    (b"key", 0o600, b"key", 0o644, True),             # the mode alone differs
    (b"#!/bin/sh\n", 0o644, "#!/bin/sh\n", 0o755, True),
])
def test_write_if_different(tmp_path, before, before_mode, data, mode, changed):
    path = tmp_path / "sub" / "file"
    if before is not None:
        path.parent.mkdir()
        path.write_bytes(before)
        path.chmod(before_mode)
    assert atomic.write_if_different(module(), str(path), data, mode) is changed
    assert path.read_bytes() == (data.encode() if isinstance(data, str) else data)
    assert path.stat().st_mode & 0o7777 == mode
    assert [p.name for p in path.parent.iterdir()] == ["file"]  # no temporary file left


def test_check_mode_writes_nothing(tmp_path):
    path = tmp_path / "missing" / "file"
    assert atomic.write_if_different(module(check_mode=True), str(path), b"key", 0o644) is True
    assert not path.parent.exists()
