# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Write a file on the node so that readers see the old content or the new one, never a half-written file."""

from __future__ import annotations

import os
import tempfile


def write_if_different(module, path, data, mode):
    """Write `data` (bytes or text) to `path` with `mode` when its content or mode differ; returns whether they did.

    Check mode only says so. A missing parent directory is created (0755). The new file goes through a temporary file
    in the same directory and module.atomic_move, then gets `mode` (atomic_move gives a new file the umask's mode)."""
    data = data.encode("utf-8") if isinstance(data, str) else data
    try:
        with open(path, "rb") as handle:
            if handle.read() == data and (os.stat(path).st_mode & 0o7777) == mode:
                return False
    except OSError:
        pass
    if module.check_mode:
        return True
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, mode=0o755, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".gpufleet-")
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.chmod(tmp, mode)
    module.atomic_move(tmp, path)
    os.chmod(path, mode)
    return True
