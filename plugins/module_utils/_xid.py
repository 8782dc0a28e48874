# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""NVIDIA Xid events from the kernel log: what the driver reported, on which card, and what it calls for.

NVML does not report Xids: a GPU can answer every NVML query after an Xid 119 (GSP timeout) and still need a reset.
The driver writes each event to the kernel log as ``NVRM: Xid (PCI:<domain>:<bus>:<device>): <code>, <text>``.
``read()`` takes the lines added since the last position (``/dev/kmsg``, the journal or a log file such as rsyslog's
kern.log) with bounded work per call; ``remember()`` folds them into per-boot state. Standard library only: this
runs in the health check's timer and in nvml_info. Private to the collection: no API promise.
"""

from __future__ import annotations

import errno
import json
import os
import re
import subprocess
import time

# What each documented Xid calls for, after NVIDIA's Xid catalog ("Resolution Bucket (Immediate Action)"):
# code -> (what it means, action). Actions: ignore (informational), restart_app (the application's error, the GPU
# is fine), reset_gpu (drain, then reset the GPU or reboot), reboot (drain and reboot; check power and seating if it
# recurs). Codes not listed get "check": look the code up in NVIDIA's catalog.
CATALOG = {
    8: ("GPU stopped processing (idle timeout)", "restart_app"),
    13: ("graphics engine exception", "restart_app"),
    31: ("GPU memory page fault", "restart_app"),
    32: ("invalid or corrupted push buffer stream", "restart_app"),
    43: ("GPU stopped processing", "restart_app"),
    45: ("preemptive cleanup, due to previous errors", "ignore"),
    48: ("double bit ECC error", "reset_gpu"),
    61: ("internal micro-controller breakpoint/warning", "reset_gpu"),
    62: ("internal micro-controller halt", "reset_gpu"),
    63: ("ECC page retirement or row remapping recorded", "reset_gpu"),
    64: ("ECC page retirement or row remapping failed", "reset_gpu"),
    68: ("video processor exception", "restart_app"),
    69: ("graphics engine class error", "restart_app"),
    74: ("NVLink error", "reset_gpu"),
    79: ("GPU has fallen off the bus", "reboot"),
    92: ("high single-bit ECC error rate", "ignore"),
    94: ("contained ECC error", "restart_app"),
    95: ("uncontained ECC error", "reset_gpu"),
    119: ("GSP RPC timeout", "reset_gpu"),
    120: ("GSP error", "reset_gpu"),
    140: ("unrecovered ECC error", "reset_gpu"),
}
# Xid 154 states the recovery the driver now needs ("GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset
# Required)"): the action follows its target value.
RECOVERY_ACTIONS = {0: "ignore", 1: "reset_gpu", 2: "reboot", 3: "reset_gpu", 4: "reset_gpu"}
ACTIONS = {
    "ignore": "none",
    "restart_app": "restart the application (the GPU itself is fine)",
    "reset_gpu": "drain the node, then reset the GPU ('nvidia-smi -r -i <index>') or reboot",
    "reboot": "drain and reboot the node; if it recurs, check the card's power, riser and seating",
    "check": "look the code up in NVIDIA's Xid catalog",
}
# The actions after which the GPU is not fit for work until the node reboots (a per-boot record clears them).
FAILING = frozenset(("reset_gpu", "reboot"))

_LINE = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})(?:\.\d)?\): (\d+),\s*(.*)")
_RECOVERY = re.compile(r"recovery action changed from \S+ \([^)]*\) to 0x([0-9a-fA-F]+)")
# Work per call: what the kernel's ring buffer holds at most, and a file's tail of that size.
MAX_RECORDS = 20000
MAX_BYTES = 4 * 1024 * 1024


def bus_key(pci_bus_id):
    """'00000000:65:00.0' (NVML) or '0000:65:00' (the kernel log) -> '0000:65:00'; None when it is neither."""
    match = re.match(r"^([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})", pci_bus_id or "")
    if not match:
        return None
    return "%04x:%s:%s" % (int(match.group(1), 16), match.group(2).lower(), match.group(3).lower())


def parse(line):
    """{'bus', 'code', 'text', 'meaning', 'action'} of one kernel log line, or None when it is not an Xid."""
    match = _LINE.search(line)
    if not match:
        return None
    code, text = int(match.group(4)), match.group(5).strip()
    meaning, action = CATALOG.get(code, ("Xid %d" % code, "check"))
    if code == 154:
        recovery = _RECOVERY.search(text)
        meaning = "GPU recovery action changed"
        action = RECOVERY_ACTIONS.get(int(recovery.group(1), 16), "check") if recovery else "check"
    return {"bus": "%04x:%s:%s" % (int(match.group(1), 16), match.group(2).lower(), match.group(3).lower()),
            "code": code, "text": text[:200], "meaning": meaning, "action": action}


def boot_id():
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def _read_kmsg(path, position):
    """(lines, position) of the records after sequence number ``position`` in a /dev/kmsg-like device."""
    lines, last = [], position
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        for dummy in range(MAX_RECORDS):
            try:
                record = os.read(fd, 8192)
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # overwritten before it was read: go on with the next one
                    continue
                if exc.errno == errno.EAGAIN:
                    break
                raise
            if not record:
                break
            header, dummy, message = record.decode("utf-8", "replace").partition(";")
            fields = header.split(",")
            seq = int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None
            if seq is None or (position is not None and seq <= position):
                continue
            last = seq
            lines.append(message.split("\n", 1)[0])
    finally:
        os.close(fd)
    return lines, last


def _read_journal(journalctl, position):
    """(lines, position) of the kernel messages of this boot after the journal cursor ``position``."""
    command = [journalctl, "-k", "-o", "json", "--no-pager"]
    if position:
        command += ["--after-cursor", position]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    lines, last = [], position
    try:
        for count, raw in enumerate(proc.stdout):
            if count >= MAX_RECORDS:
                break
            entry = json.loads(raw)
            message = entry.get("MESSAGE")
            if isinstance(message, list):  # the journal's form of a message that is not valid UTF-8
                message = bytes(message).decode("utf-8", "replace")
            lines.append(message or "")
            last = entry.get("__CURSOR", last)
    finally:
        proc.stdout.close()
        proc.kill()
        proc.wait()
    return lines, last


def _read_file(path, position):
    """(lines, position) of the lines a log file gained since ``position`` ([inode, offset]). A first read starts at
    the end: the file may hold earlier boots. A rotated (new inode) or truncated file is read from its start."""
    stat = os.stat(path)
    inode, offset = position if isinstance(position, list) and len(position) == 2 else (None, None)
    if offset is None:
        return [], [stat.st_ino, stat.st_size]
    if inode != stat.st_ino or stat.st_size < offset:
        offset = 0
    offset = max(offset, stat.st_size - MAX_BYTES)
    with open(path, "rb") as handle:
        handle.seek(offset)
        data = handle.read(MAX_BYTES)
    complete = data[:data.rfind(b"\n") + 1]
    return complete.decode("utf-8", "replace").splitlines(), [stat.st_ino, offset + len(complete)]


def resolve_source(source, kmsg="/dev/kmsg", journalctl="/usr/bin/journalctl"):
    """The reader for ``source`` (auto, kmsg, journal or a file path): ('kmsg'|'journal'|'file', path) or None."""
    if source in ("auto", "kmsg") and os.access(kmsg, os.R_OK):
        return "kmsg", kmsg
    if source in ("auto", "journal") and os.access(journalctl, os.X_OK):
        return "journal", journalctl
    if source not in ("auto", "kmsg", "journal"):
        return "file", source
    return None


def read(source, state, now=None, kmsg="/dev/kmsg", journalctl="/usr/bin/journalctl"):
    """New Xid events since ``state`` (a previous return value, or {}): returns the new state.

    The state holds, for this boot only, each (bus, code) seen with its count, first and last time and last text,
    and ``error`` when the log could not be read (the events known so far are kept).
    """
    now = time.time() if now is None else now
    boot = boot_id()
    if state.get("boot_id") != boot:
        state = {}
    new = {"boot_id": boot, "events": dict(state.get("events") or {}), "error": "", "source": "none",
           "position": state.get("position")}
    reader = resolve_source(source, kmsg, journalctl)
    if reader is None:
        new["error"] = "no kernel log readable (no /dev/kmsg access, no journalctl)"
        return new
    kind, path = reader
    if state.get("source") not in (None, kind):
        new["position"] = None
    new["source"] = kind
    try:
        lines, new["position"] = {"kmsg": _read_kmsg, "journal": _read_journal, "file": _read_file}[kind](
            path, new["position"])
    except (OSError, ValueError) as exc:
        new["error"] = "%s: %s" % (path, exc)
        if kind == "file" and isinstance(exc, FileNotFoundError):
            # A log file that appears later is read from its start: all of it is new.
            new["position"] = [0, 0]
        return new
    remember(new["events"], (parse(line) for line in lines), now)
    return new


def remember(events, found, now):
    """Fold parsed events (None entries skipped) into ``events`` ({'bus code': record}), in place."""
    for event in found:
        if event is None:
            continue
        key = "%s %d" % (event["bus"], event["code"])
        record = events.setdefault(key, dict(event, count=0, first_seen=now))
        record.update(event, count=record["count"] + 1, last_seen=now)
    return events


def by_bus(events):
    """{bus: [record, ...]} of a state's events, each list ordered by code."""
    found = {}
    for record in sorted(events.values(), key=lambda r: (r["bus"], r["code"])):
        found.setdefault(record["bus"], []).append(record)
    return found


def finding(record, label):
    """One line for a verdict: the card, the event, how often, and what to do."""
    return "%s: Xid %d (%s) %d time(s) this boot, last: %s — next: %s" % (
        label, record["code"], record["meaning"], record["count"], record["text"] or "-", ACTIONS[record["action"]])
