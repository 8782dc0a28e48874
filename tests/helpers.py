"""Helpers shared by gpufleet's tests: running playbooks with the JSON callback and reading their results, and a copy of
inventories/example whose hosts lead nowhere (each at its own closed loopback port)."""

import importlib.metadata
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest
import yaml

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


def example(tmp_path, hosts=None, **group_vars):
    """A copy of inventories/example with every host at 127.0.0.<n>:9, then ``hosts`` ({group: {host: vars}}) merged
    into hosts.yml and ``group_vars`` into its group files."""
    dest = tmp_path / "mysite"
    shutil.copytree(ROOT / "inventories" / "example", dest)
    inventory = yaml.safe_load((dest / "hosts.yml").read_text())
    children = inventory["all"]["children"]
    groups = dict(children, **children["gpu_nodes"]["children"])
    addressed = [values for body in groups.values() for values in (body.get("hosts") or {}).values()
                 if values and "ansible_host" in values]
    for number, values in enumerate(addressed, start=2):
        values.update(ansible_host="127.0.0.%d" % number, ansible_port=9, ansible_connection="ssh")
    for group, members in (hosts or {}).items():
        if group not in groups:
            groups[group] = children[group] = {"hosts": {}}
        body = groups[group].setdefault("hosts", {})
        for host, values in members.items():
            body[host] = dict(body.get(host) or {}, **values)
    (dest / "hosts.yml").write_text(yaml.safe_dump(inventory, sort_keys=False))
    for group, values in group_vars.items():
        path = dest / "group_vars" / ("%s.yml" % group)
        current = yaml.safe_load(path.read_text()) if path.exists() else {}
        current.update(values)
        path.write_text(yaml.safe_dump(current))
    return str(dest)
