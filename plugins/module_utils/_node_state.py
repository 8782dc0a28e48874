# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Converged-state stamps, node side: what a node role left on a node, observed again during fact gathering.

A node role that converged records a stamp: the digest of its inputs (its options, the facts it depends on and
its own code) and a spec of the state it manages (files, directory trees and listings, packages, services), with
that state as observed right after the run. The executable local fact that the record module installs re-observes
every stamp's spec during fact gathering, so a rerun learns whether anything drifted without a round trip of its
own. The verdict (the same digest and an intact state: skip the role) is the controller's, in
plugin_utils/_fast_path.py, so that nothing but observation is copied to a node.

This file is also that local fact: it depends on the standard library only and runs as a script.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import stat
import subprocess
import sys

SPEC_KEYS = ("files", "trees", "listings", "packages", "services")
PACKAGE_MANAGERS = ("rpm", "dpkg")
MAX_DRIFT = 10
STAMP_DIR = "/var/lib/gpufleet/stamps"
# A tree larger than this is not hashed (a stamp that watches a big tree would slow every fact gathering down);
# such a tree always counts as drift, so it can never vouch for a fast path.
MAX_TREE_FILES = 2000
TOO_MANY_FILES = "too many files"


def normalize_spec(spec):
    """The spec with every list sorted and deduplicated; raises ValueError naming what is wrong."""
    if not isinstance(spec, dict):
        raise ValueError("spec must be a dict")
    unknown = sorted(set(spec) - set(SPEC_KEYS) - {"package_manager"})
    if unknown:
        raise ValueError("unknown spec keys: %s (allowed: %s, package_manager)" % (", ".join(unknown), ", ".join(SPEC_KEYS)))
    result = {}
    for key in SPEC_KEYS:
        values = spec.get(key) or []
        if not isinstance(values, (list, tuple)) or not all(isinstance(v, str) and v for v in values):
            raise ValueError("%s must be a list of non-empty strings" % key)
        if key in ("files", "trees", "listings") and not all(os.path.isabs(v) for v in values):
            raise ValueError("%s must be absolute paths" % key)
        result[key] = sorted(set(values))
    manager = spec.get("package_manager")
    if result["packages"] and manager not in PACKAGE_MANAGERS:
        raise ValueError("package_manager must be one of %s when packages are given" % ", ".join(PACKAGE_MANAGERS))
    result["package_manager"] = manager if result["packages"] else None
    return result


def _sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def observe_file(path):
    """Content digest and mode of a file, the target of a symlink, or None when it does not exist or is unreadable."""
    try:
        info = os.stat(path)
        if stat.S_ISDIR(info.st_mode):
            return "dir %o" % stat.S_IMODE(info.st_mode)
        return "%s %o" % (_sha256(path), stat.S_IMODE(info.st_mode))
    except OSError:
        return None


def observe_tree(path):
    """One digest over every entry under path (names, modes, link targets, file contents), or None when absent."""
    if not os.path.lexists(path):
        return None
    digest = hashlib.sha256()
    count = 0
    for root, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(files) + [d + "/" for d in dirs]:
            full = os.path.join(root, name.rstrip("/"))
            digest.update(os.path.relpath(full, path).encode() + b"\0")
            if os.path.islink(full):
                digest.update(b"-> " + os.readlink(full).encode())
            elif not name.endswith("/"):
                count += 1
                if count > MAX_TREE_FILES:
                    return TOO_MANY_FILES
                digest.update((observe_file(full) or "unreadable").encode())
            digest.update(b"\n")
    return digest.hexdigest()


def observe_listing(pattern):
    """Sorted entry names of every directory matching the glob pattern, or None when none matches."""
    matches = sorted(glob.glob(pattern))
    if not matches:
        return None
    return {match: sorted(os.listdir(match)) if os.path.isdir(match) else None for match in matches}


def parse_rpm(output, names):
    """`rpm -q --qf '%{NAME} %{EPOCHNUM}:%{VERSION}-%{RELEASE}.%{ARCH}\\n' NAMES` -> {name: [versions] or None}."""
    found = {}
    for line in output.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] in names:
            found.setdefault(parts[0], []).append(parts[1])
    return {name: sorted(found[name]) if name in found else None for name in names}


def parse_dpkg(output, names):
    """`dpkg-query -W -f '${Package} ${Version} ${db:Status-Abbrev}\\n' NAMES` -> {name: [versions] or None}.

    Only installed packages count ("ii"); a removed package that left its configuration behind ("rc") does not.
    """
    found = {}
    for line in output.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[2].startswith("ii"):
            name = parts[0].split(":", 1)[0]
            if name in names:
                found.setdefault(name, []).append(parts[1])
    return {name: sorted(found[name]) if name in found else None for name in names}


def parse_systemctl_show(output, names):
    """`systemctl show -p Id,UnitFileState,ActiveState UNITS` (blocks in the order asked) -> {unit: "state/active"}."""
    blocks = output.strip().split("\n\n") if output.strip() else []
    result = {}
    for name, block in zip(names, blocks):
        props = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        result[name] = "%s/%s" % (props.get("UnitFileState") or "-", props.get("ActiveState") or "-")
    for name in names:
        result.setdefault(name, None)
    return result


def _run(argv):
    try:
        result = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return ""
    return result.stdout


def observe(spec, run=_run):
    """The node's state for a normalized spec. ``run(argv) -> stdout`` runs the package and service queries."""
    observed = {
        "files": {path: observe_file(path) for path in spec["files"]},
        "trees": {path: observe_tree(path) for path in spec["trees"]},
        "listings": {pattern: observe_listing(pattern) for pattern in spec["listings"]},
        "packages": {},
        "services": {},
    }
    names = spec["packages"]
    if names and spec["package_manager"] == "rpm":
        observed["packages"] = parse_rpm(run(["rpm", "-q", "--qf", "%{NAME} %{EPOCHNUM}:%{VERSION}-%{RELEASE}.%{ARCH}\\n"]
                                             + names), names)
    elif names:
        observed["packages"] = parse_dpkg(run(["dpkg-query", "-W", "-f", "${Package} ${Version} ${db:Status-Abbrev}\\n"]
                                              + names), names)
    if spec["services"]:
        observed["services"] = parse_systemctl_show(
            run(["systemctl", "show", "-p", "Id,UnitFileState,ActiveState"] + spec["services"]), spec["services"])
    return observed


def drift(recorded, observed):
    """What differs between two observations, as short sentences (at most MAX_DRIFT, then a count)."""
    changes = []
    for key in SPEC_KEYS:
        before, after = recorded.get(key) or {}, observed.get(key) or {}
        for item in sorted(set(before) | set(after)):
            old, new = before.get(item), after.get(item)
            if new == TOO_MANY_FILES:
                changes.append("%s %s has more than %d files, too many to watch" % (key[:-1], item, MAX_TREE_FILES))
                continue
            if old == new:
                continue
            if old is None:
                changes.append("%s %s appeared" % (key[:-1], item))
            elif new is None:
                changes.append("%s %s is gone" % (key[:-1], item))
            else:
                changes.append("%s %s changed" % (key[:-1], item))
    if len(changes) > MAX_DRIFT:
        changes = changes[:MAX_DRIFT] + ["and %d more" % (len(changes) - MAX_DRIFT)]
    return changes


def build_stamp(name, digest, spec, data, observed):
    return {"name": name, "digest": digest, "spec": spec, "data": data, "observed": observed}


def report(stamp_dir, run=_run):
    """The local fact: for every stamp, its digest, whether the node still matches it, what drifted and its data."""
    result = {}
    for path in sorted(glob.glob(os.path.join(stamp_dir, "*.json"))):
        name = os.path.basename(path)[:-len(".json")]
        try:
            with open(path, encoding="utf-8") as handle:
                stamp = json.load(handle)
            spec = normalize_spec(stamp["spec"])
            changes = drift(stamp["observed"], observe(spec, run))
            result[name] = {"digest": stamp["digest"], "intact": not changes, "drift": changes,
                            "data": stamp.get("data") or {}}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            result[name] = {"digest": None, "intact": False, "drift": ["unreadable stamp: %s" % exc], "data": {}}
    return result


def fact_main(stamp_dir=STAMP_DIR):
    """Entry point of the executable local fact (Ansible runs it without arguments)."""
    sys.stdout.write(json.dumps(report(stamp_dir), sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    fact_main()
