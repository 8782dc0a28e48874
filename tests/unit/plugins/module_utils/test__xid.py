"""The kernel's Xid lines: which card, which code, what it calls for, and reading only what is new."""

import errno
import json
import os
import stat

import pytest

from ansible_collections.gpufleet.vgpu.plugins.module_utils import _xid

# Lines as the driver writes them (NVIDIA's Xid documentation, kernel logs of real faults), with the prefixes dmesg,
# the journal and rsyslog put before them.
PARSED = [
    ("[ 6154.283019] NVRM: Xid (PCI:0000:3b:00): 79, pid=0, name=, GPU has fallen off the bus.",
     "0000:3b:00", 79, "reboot"),
    ("Dec  5 10:01:00 rig01 kernel: NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for "
     "remapping, reset gpu to activate.", "0000:10:1c", 63, "reset_gpu"),
    ("NVRM: Xid (PCI:0000:65:00): 119, pid='N/A', Timeout waiting for RPC from GSP", "0000:65:00", 119, "reset_gpu"),
    ("NVRM: Xid (PCI:0000:86:00): 48, pid=2817, name=python, An uncorrectable double bit error (DBE) has been "
     "detected on GPU in the framebuffer at partition 0, subpartition 0.", "0000:86:00", 48, "reset_gpu"),
    ("NVRM: Xid (PCI:0000:41:00): 13, pid=5521, name=python, Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): "
     "Out Of Range Address", "0000:41:00", 13, "restart_app"),
    ("NVRM: Xid (PCI:0000:05:00): 31, pid=4321, name=python3, Ch 00000010, intr 10000000. MMU Fault: ENGINE "
     "GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f3c_8f000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
     "0000:05:00", 31, "restart_app"),
    ("NVRM: Xid (PCI:0000:01:00): 62, 323f0f30 0000c3d8 00000000 206dae68 206da022 206da190 206d85f6 206d8d86",
     "0000:01:00", 62, "reset_gpu"),
    ("NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
     "0000:01:00", 154, "reset_gpu"),
    ("NVRM: Xid (PCI:0000:c1:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)",
     "0000:c1:00", 154, "reboot"),
    ("NVRM: Xid (PCI:0000:06:00): 41, ROBUST_CHANNEL_CE2_ERROR: Copy Engine Exception", "0000:06:00", 41, "check"),
    ("NVRM: Xid (PCI:0000:2A:00): 45, pid=1234, name=python, Ch 00000008", "0000:2a:00", 45, "ignore"),
]


@pytest.mark.parametrize(("line", "bus", "code", "action"), PARSED, ids=[str(p[2]) + p[3] for p in PARSED])
def test_parse(line, bus, code, action):
    event = _xid.parse(line)
    assert (event["bus"], event["code"], event["action"]) == (bus, code, action)
    assert event["action"] in _xid.ACTIONS


@pytest.mark.parametrize("line", [
    "NVRM: GPU at PCI:0000:65:00: GPU-7e3c2a51-8f0b-4c2e-9d1a-3b5c6d7e8f90",
    "NVRM: GPU0 kgspHealthCheck_TU102: ********** GSP-CrashCat Report **********",
    "nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver for UNIX platforms  570.133.20",
    "",
])
def test_other_lines_are_not_events(line):
    assert _xid.parse(line) is None


@pytest.mark.parametrize(("nvml", "kernel"), [("00000000:65:00.0", "0000:65:00"), ("0000:3B:00.0", "0000:3b:00")])
def test_nvml_and_kernel_bus_ids_meet(nvml, kernel):
    assert _xid.bus_key(nvml) == _xid.bus_key(kernel) == kernel


def test_remember_counts_per_card_and_code():
    events = _xid.remember({}, [_xid.parse(PARSED[2][0]), None, _xid.parse(PARSED[2][0])], 10.0)
    _xid.remember(events, [_xid.parse(PARSED[0][0])], 20.0)
    record = events["0000:65:00 119"]
    assert (record["count"], record["first_seen"], record["last_seen"]) == (2, 10.0, 10.0)
    assert [r["code"] for r in _xid.by_bus(events)["0000:3b:00"]] == [79]


def test_a_file_is_read_from_its_end_then_line_by_line_and_after_rotation(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text("old boot: " + PARSED[0][0] + "\n")
    state = _xid.read(str(log), {}, now=1.0)
    assert state["source"] == "file" and state["events"] == {}
    with log.open("a") as handle:
        handle.write(PARSED[2][0] + "\nhalf a li")
    state = _xid.read(str(log), state, now=2.0)
    assert list(state["events"]) == ["0000:65:00 119"]
    with log.open("a") as handle:
        handle.write("ne\n")
    state = _xid.read(str(log), state, now=3.0)
    assert state["events"]["0000:65:00 119"]["count"] == 1
    # logrotate: a new file at the same path is read from its start.
    log.unlink()
    log.write_text(PARSED[0][0] + "\n")
    state = _xid.read(str(log), state, now=4.0)
    assert sorted(state["events"]) == ["0000:3b:00 79", "0000:65:00 119"]


def test_an_unreadable_source_keeps_what_is_known(tmp_path):
    state = {"boot_id": _xid.boot_id(), "events": _xid.remember({}, [_xid.parse(PARSED[2][0])], 1.0),
             "source": "file", "position": [1, 0]}
    after = _xid.read(str(tmp_path / "missing.log"), state, now=2.0)
    assert "missing.log" in after["error"] and list(after["events"]) == ["0000:65:00 119"]


def test_a_log_file_that_appears_later_is_read_whole(tmp_path):
    log = tmp_path / "kern.log"
    state = _xid.read(str(log), {}, now=1.0)
    assert "kern.log" in state["error"]
    log.write_text(PARSED[0][0] + "\n")
    state = _xid.read(str(log), state, now=2.0)
    assert state["error"] == "" and list(state["events"]) == ["0000:3b:00 79"]


def test_a_new_boot_forgets_the_last_one(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text("")
    state = {"boot_id": "an-earlier-boot", "events": _xid.remember({}, [_xid.parse(PARSED[0][0])], 1.0),
             "source": "file", "position": None}
    assert _xid.read(str(log), state, now=2.0)["events"] == {}


def test_the_journal_is_read_after_its_cursor(tmp_path):
    journalctl = tmp_path / "journalctl"
    # Prints its arguments' cursor back, as the journal does, and a message the journal stores as bytes.
    journalctl.write_text("#!/bin/sh\n"
                          "case \"$*\" in *--after-cursor*) exit 0;; esac\n"
                          "cat <<'EOF'\n%s\n%s\nEOF\n" % (
                              json.dumps({"MESSAGE": PARSED[2][0], "__CURSOR": "s=1;i=1"}),
                              json.dumps({"MESSAGE": list(PARSED[0][0].encode()), "__CURSOR": "s=1;i=2"})))
    journalctl.chmod(journalctl.stat().st_mode | stat.S_IEXEC)
    state = _xid.read("journal", {}, now=1.0, journalctl=str(journalctl), kmsg=str(tmp_path / "none"))
    assert state["source"] == "journal" and state["position"] == "s=1;i=2"
    assert sorted(state["events"]) == ["0000:3b:00 79", "0000:65:00 119"]
    again = _xid.read("auto", state, now=2.0, journalctl=str(journalctl), kmsg=str(tmp_path / "none"))
    assert again["position"] == "s=1;i=2" and again["events"]["0000:3b:00 79"]["count"] == 1


def test_kmsg_records_after_the_last_sequence_number(monkeypatch, tmp_path):
    device = tmp_path / "kmsg"
    device.write_text("")
    records = [b"6,100,6154283019,-;" + PARSED[0][0].split("] ", 1)[1].encode() + b"\n SUBSYSTEM=pci\n",
               b"4,101,6160000000,-;" + PARSED[2][0].encode() + b"\n"]
    reads = []

    def fake_read(fd, size):  # a record per read, then EAGAIN, as /dev/kmsg opened O_NONBLOCK does
        if reads:
            return reads.pop(0)
        raise OSError(errno.EAGAIN, "again")

    monkeypatch.setattr(os, "read", fake_read)
    reads.extend(records)
    state = _xid.read("kmsg", {}, now=1.0, kmsg=str(device))
    assert state["source"] == "kmsg" and state["position"] == 101 and len(state["events"]) == 2
    reads.extend(records)  # the ring buffer again: nothing new after 101
    state = _xid.read("kmsg", state, now=2.0, kmsg=str(device))
    assert all(r["count"] == 1 for r in state["events"].values())


def test_no_source_is_an_error_not_a_pass(tmp_path):
    state = _xid.read("auto", {}, kmsg=str(tmp_path / "none"), journalctl=str(tmp_path / "none"))
    assert state["source"] == "none" and "no kernel log readable" in state["error"]
