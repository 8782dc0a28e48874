"""Processes the lab starts and stops: by PID, one process group each, never a PID that is not the lab's."""

import os
import pathlib
import signal
import subprocess
import time

from .paths import BIN, LAB, log, write_json

# kubelet's container restart back-off: 10 s doubling to 5 min, forgotten after 10 min of running.
BACKOFF_BASE, BACKOFF_MAX, BACKOFF_RESET = 10.0, 300.0, 600.0


def start(name, argv, state, env=None):
    """A lab component: its own process group, its log in $LAB/logs, its PID in state.json."""
    with open(LAB / "logs" / ("%s.log" % name), "ab") as logfile:
        proc = subprocess.Popen(argv, stdout=logfile, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    state["pids"][name] = proc.pid
    write_json(LAB / "state.json", state)
    log("started %s (pid %d)" % (name, proc.pid))
    return proc


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def start_time(pid):
    """The kernel's start time of a process (clock ticks since boot): with the PID, its identity."""
    try:
        return int(pathlib.Path("/proc/%d/stat" % pid).read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def running(pid, started):
    """Whether the process started at `started` still runs (a zombie left to an init that does not reap is gone)."""
    try:
        fields = pathlib.Path("/proc/%d/stat" % pid).read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z" and int(fields[19]) == started


def ours(pid, started=None):
    """Whether a PID is still the lab's process: the one started at `started`, or one whose command line names the
    lab (a recycled PID is someone else's)."""
    if started is not None:
        return start_time(pid) == started
    try:
        cmdline = pathlib.Path("/proc/%d/cmdline" % pid).read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return any(mark in cmdline for mark in (str(LAB), "gpufleet_lab", "lab.py", str(BIN)))


def running_from(folder):
    """PIDs of processes (not this one) whose command line names a path inside `folder`."""
    mark = str(folder).rstrip("/") + "/"
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if mark in cmdline:
            found.append(int(entry.name))
    return found


def stop_process(name, pid, grace=5.0):
    """SIGTERM to one process (not its group), SIGKILL after `grace` seconds; waits until it is gone."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            break
        deadline = time.time() + wait
        while time.time() < deadline and _running(pid):
            time.sleep(0.1)
        if not _running(pid):
            break
    log("stopped %s (pid %d)" % (name, pid))


def _running(pid):
    """Alive and not a zombie (a zombie has exited; only its parent's wait is missing)."""
    try:
        stat = pathlib.Path("/proc/%d/stat" % pid).read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def stop(name, pid, grace=5.0, started=None, owned=False):
    """SIGTERM to the process group a lab process leads, SIGKILL after `grace` seconds; waits until the group is
    gone, so nothing of it writes to the lab's files afterwards. owned: the caller holds the unreaped process, so
    the PID cannot have been recycled."""
    if not owned and not ours(pid, started):
        return
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.time() + grace
    while time.time() < deadline and _group_alive(pid):
        time.sleep(0.1)
    if _group_alive(pid):
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        deadline = time.time() + 10
        while time.time() < deadline and _group_alive(pid):
            time.sleep(0.1)
    log("stopped %s (pid %d)" % (name, pid))


def _group_alive(pgid):
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie leader keeps the group "alive" until reaped; reap it if it is our child.
    try:
        os.waitpid(pgid, os.WNOHANG)
    except ChildProcessError:
        pass
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return _has_live_member(pgid)


def _has_live_member(pgid):
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def rss_kib(pid):
    try:
        for line in pathlib.Path("/proc/%d/status" % pid).read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


class Child:
    """A process the controller runs for something the cluster describes (a Deployment's pod, a container of a
    DaemonSet's pod): started again when what it was started from changes, and after it exits with kubelet's
    restart back-off."""

    def __init__(self, name, logfile=None):
        self.name = name
        self.logfile = logfile or LAB / "logs" / ("%s.log" % name)
        self.proc = None
        self.fingerprint = None
        self.started = 0.0
        self.restarts = 0
        self.backoff = 0.0
        self.next_start = 0.0
        self.last_exit = None

    def ensure(self, fingerprint, argv, env=None, prepare=None, grace=10.0):
        """Running with `fingerprint`: returns True when it (re)started the process now."""
        now = time.time()
        if self.proc is not None and self.proc.poll() is None:
            if fingerprint == self.fingerprint:
                return False
            self.stop(grace)
            self.backoff, self.next_start = 0.0, 0.0
        elif self.proc is not None:
            # Exited: kubelet restarts a container after a back-off that doubles while it keeps failing.
            self.last_exit = self.proc.returncode
            ran = now - self.started
            self.backoff = 0.0 if ran >= BACKOFF_RESET else min(BACKOFF_MAX, max(BACKOFF_BASE, self.backoff * 2))
            self.next_start = now + self.backoff
            log("controller: %s exited with %s after %.0f s; restarting in %.0f s (back-off)"
                % (self.name, self.last_exit, ran, self.backoff))
            self.proc = None
            self.restarts += 1
        if fingerprint != self.fingerprint:
            self.backoff, self.next_start = 0.0, 0.0
        if now < self.next_start:
            return False
        if prepare:
            prepare()
        self.logfile.parent.mkdir(parents=True, exist_ok=True)
        with open(self.logfile, "ab") as logfile:
            self.proc = subprocess.Popen(argv, stdout=logfile, stderr=subprocess.STDOUT, start_new_session=True,
                                         env=env)
        self.fingerprint, self.started = fingerprint, time.time()
        log("controller: started %s (pid %d)" % (self.name, self.proc.pid))
        return True

    def stop(self, grace=10.0):
        if self.proc is not None and self.proc.poll() is None:
            stop(self.name, self.proc.pid, grace, owned=True)
            self.proc.wait()
        self.proc, self.fingerprint = None, None

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def pid(self):
        return self.proc.pid if self.alive() else None

    def identity(self):
        """{pid, started} for the lab's state files: `down` stops exactly this process, whatever it exec'd."""
        pid = self.pid()
        return {"pid": pid, "started": start_time(pid) if pid else None}
