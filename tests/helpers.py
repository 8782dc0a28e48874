"""Helpers shared by gpufleet's tests: running playbooks with the JSON callback and reading their results."""

import importlib.metadata
import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def run_playbook(playbook, *args, env=None, inventory="localhost,", local=True):
    """Run ansible-playbook with the JSON callback; return (rc, parsed JSON output, stderr)."""
    full_env = dict(os.environ)
    full_env.update(
        {
            "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
            "ANSIBLE_COLLECTIONS_PATH": str(ROOT / ".build" / "collections"),
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_RETRY_FILES_ENABLED": "0",
        }
    )
    full_env.update(env or {})
    proc = subprocess.run(
        # The controller's own interpreter: discovery on this machine may pick a pyenv shim that does not run.
        ["ansible-playbook", "-i", inventory]
        + (["-c", "local", "-e", "ansible_python_interpreter=" + sys.executable] if local else [])
        + [str(playbook), *args],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=ROOT,
        check=False,
    )
    try:
        out = json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail("ansible-playbook did not print JSON:\n%s\n%s" % (proc.stdout[-3000:], proc.stderr[-3000:]))
    return proc.returncode, out, proc.stderr


def failed_messages(out):
    """All failure messages in a JSON-callback result, in play order."""
    msgs = []
    for play in out["plays"]:
        for task in play["tasks"]:
            for res in task["hosts"].values():
                if res.get("failed"):
                    msgs.append(res.get("msg", ""))
                    # A loop's failed items carry their own messages ("One or more items failed" above them).
                    msgs.extend(item.get("msg", "") for item in res.get("results") or [] if item.get("failed"))
    return msgs


def bundled_collection_version(fqcn):
    """The version of collection `fqcn` that the pinned `ansible` package bundles (what every test runs)."""
    namespace, name = fqcn.split(".")
    manifest = importlib.metadata.distribution("ansible").locate_file(
        "ansible_collections/%s/%s/MANIFEST.json" % (namespace, name))
    return json.loads(pathlib.Path(manifest).read_text())["collection_info"]["version"]
