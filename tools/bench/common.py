"""Shared plumbing of the benchmarks: the lab, playbook runs, timing, machine facts, raw JSON."""

import datetime
import json
import os
import pathlib
import platform
import re
import subprocess
import sys
import time

from gpufleet_lab import controller

ROOT = pathlib.Path(__file__).resolve().parents[2]
LAB_PY = [sys.executable, str(ROOT / "tools" / "lab" / "lab.py")]
CACHE = pathlib.Path(os.environ.get("GPUFLEET_CACHE", "/var/cache/gpufleet"))


def log(msg):
    print("[bench %s] %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


def machine():
    """Where the figures come from (absolute times only compare on the same machine)."""
    mem_kib = int(next(line.split()[1] for line in open("/proc/meminfo", encoding="ascii")
                       if line.startswith("MemTotal:")))
    model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo", encoding="ascii")
                  if line.startswith("model name")), platform.processor())
    return {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "cpus": os.cpu_count(), "cpu_model": model, "memory_gib": round(mem_kib / 1048576, 1),
            "kernel": platform.release(), "python": platform.python_version(), "commit": _AT_START[0][:7]}


# The pinned Go modules the lab builds (tools/lab/<folder>/go.mod): what the figures were measured on.
LAB_MODULES = {"kubernetes": ("kubernetes", "k8s.io/kubernetes"), "volcano": ("volcano", "volcano.sh/volcano"),
               "vgpu_plugin": ("hami", "volcano.sh/k8s-device-plugin"), "kwok": ("kwok", "sigs.k8s.io/kwok"),
               "etcd": ("etcd", "go.etcd.io/etcd/server/v3"), "helm": ("helm", "helm.sh/helm/v3")}
# What the roles deploy by default (the lab must run exactly these: tests/lab checks it; recorded beside them).
ROLE_DEFAULTS = {"volcano_image_tag": "volcano", "volcano_chart_version": "volcano",
                 "device_plugin_version": "device_plugin"}
# Written by the benchmarks themselves: a change there does not make the measured code dirty.
OUTPUTS = ("docs/benchmarks/", "docs/benchmarks.md", "bench-results/")


def versions():
    """{component: version} of the lab's pinned modules, and the roles' default versions."""
    found = {}
    for name, (folder, module) in LAB_MODULES.items():
        text = (ROOT / "tools" / "lab" / folder / "go.mod").read_text()
        match = re.search(r"^\s*(?:require\s+)?%s (v\S+)" % re.escape(module), text, re.M)
        found[name] = match.group(1) if match else None
    import yaml  # pylint: disable=import-outside-toplevel
    for variable, role in ROLE_DEFAULTS.items():
        defaults = yaml.safe_load((ROOT / "roles" / role / "defaults" / "main.yml").read_text())
        found[variable] = str(defaults[variable])
    return found


def _tree():
    def git(*args):
        return subprocess.run(["git", "-C", str(ROOT)] + list(args), capture_output=True, text=True,
                              check=False).stdout
    changed = sorted({line[3:].split(" -> ")[-1] for line in git("status", "--porcelain").splitlines()
                      if line[3:] and not line[3:].startswith(OUTPUTS)})
    return git("rev-parse", "HEAD").strip(), changed


# The code a run measures is the code its process loaded at the start: a commit made while it runs is not in it.
_AT_START = _tree()


def source():
    """The commit measured (HEAD when the run started) and whether the working tree differed from it, at the start
    or now, or HEAD moved meanwhile (the benchmarks' own outputs aside)."""
    (commit, changed), (now, changed_now) = _AT_START, _tree()
    paths = sorted(set(changed) | set(changed_now))
    result = {"commit": commit, "dirty": bool(paths) or now != commit, "changed_paths": paths[:50]}
    if now != commit:
        result["commit_at_write"] = now
    return result


def portable(value):
    """`value` with the paths of this machine made relative: the checkout's as paths from its root, the cache's
    as $GPUFLEET_CACHE/..., anything else under /tmp as <tmp>/...: the JSON says where, not whose machine."""
    if isinstance(value, dict):
        return {key: portable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [portable(item) for item in value]
    if isinstance(value, str):
        value = value.replace(str(ROOT) + "/", "").replace(str(CACHE), "$GPUFLEET_CACHE")
        return re.sub(r"(^|[=\s])/tmp/[^/\s]+", r"\1<tmp>", value)
    return value


def write_result(out_dir, name, data):
    out_dir.mkdir(parents=True, exist_ok=True)
    data = portable(dict(data, machine=machine(), versions=versions(), source=source()))
    (out_dir / ("%s.json" % name)).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    log("raw figures: %s" % (out_dir / ("%s.json" % name)))
    return data


class Lab:
    """A lab of the benchmark's own (its own directory, so `make site`'s lab is never touched)."""

    def __init__(self, name, nodes_file=None, hosts=False, options=()):
        self.dir = CACHE / ("bench-%s" % name)
        self.env = dict(os.environ, GPUFLEET_LAB_DIR=str(self.dir))
        self.nodes_file, self.hosts, self.options = nodes_file, hosts, list(options)

    def up(self):
        subprocess.run(LAB_PY + ["down"], env=self.env, check=True, capture_output=True)
        argv = LAB_PY + ["up"] + (["--nodes", str(self.nodes_file)] if self.nodes_file else [])
        # No Prometheus: its scrapes would take CPU from what the benchmarks measure.
        argv += ([] if self.hosts else ["--no-hosts"]) + ["--no-prometheus"] + self.options
        self.argv = argv[len(LAB_PY):]
        started = time.time()
        subprocess.run(argv, env=self.env, check=True)
        self.up_seconds = time.time() - started
        self.info = json.loads((self.dir / "lab.json").read_text())
        return self

    def settings(self):
        """What this lab ran, for the JSON: how it was started, its options now, and Volcano's scheduler as its
        Deployment gives it (the lab runs Volcano's processes with their Deployments' arguments and adds nothing:
        tools/lab/README.md) with the build that ran it (stock, or with tools/upstream/volcano's patches)."""
        from kubernetes import client  # pylint: disable=import-outside-toplevel
        container = client.AppsV1Api(self.api()).read_namespaced_deployment(
            "volcano-scheduler", "volcano-system").spec.template.spec.containers[0]
        lab = json.loads((self.dir / "lab.json").read_text())
        return {"lab_up": self.argv, "scheduler_image": container.image, "scheduler_args": list(container.args or []),
                "scheduler_build": self.scheduler().get("build"), "volcano_fix": lab.get("volcano_fix"),
                "plugin_register": lab.get("plugin_register")}

    def scheduler(self):
        """The lab controller's record of Volcano's scheduler process: pid, build, metrics_url."""
        return json.loads((self.dir / "children.json").read_text()).get("vc-scheduler") or {}

    def set_option(self, option):
        subprocess.run(LAB_PY + ["set", option], env=self.env, check=True, capture_output=True)

    def down(self):
        subprocess.run(LAB_PY + ["down"], env=self.env, check=False, capture_output=True)

    def api(self):
        from kubernetes import config  # pylint: disable=import-outside-toplevel
        return config.new_client_from_config(str(self.dir / "kubeconfig"))

    def processes(self):
        """{name: [pid]} of every lab process: the control plane and kwok as lab.py started them, then what the
        lab's controller runs (Volcano's by name, the nodes' device managers and plugin containers by what they are)."""
        state = json.loads((self.dir / "state.json").read_text())
        found = {name: [pid] for name, pid in state["pids"].items()}
        for name, child in controller.named_children(self.dir):
            found.setdefault(name, []).append(child["pid"])
        return found

    def rss_mib(self):
        """Resident memory of every lab process (control plane, kwok, controller, Volcano) together."""
        total = 0
        for pid in [pid for pids in self.processes().values() for pid in pids]:
            try:
                total += int(next(line.split()[1] for line in open("/proc/%d/status" % pid, encoding="ascii")
                                  if line.startswith("VmRSS:")))
            except (OSError, StopIteration):
                continue
        return round(total / 1024.0, 1)

    def playbook(self, playbook, inventory, extra=None, tags=None):
        """ansible-playbook against this lab; returns (seconds, rc, recap)."""
        argv = ["ansible-playbook", "-i", str(inventory), str(ROOT / "playbooks" / playbook)]
        if extra:
            argv += ["-e", json.dumps(extra)]  # JSON keeps types: key=value would pass the string "2"
        if tags:
            argv += ["--tags", tags]
        env = dict(self.env, ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
        started = time.time()
        result = subprocess.run(argv, env=env, cwd=str(ROOT), capture_output=True, text=True, check=False)
        seconds = time.time() - started
        return seconds, result.returncode, recap(result.stdout, result.stderr)


def _callback_output(stdout):
    try:
        return json.loads(stdout[stdout.index("{"):])
    except ValueError:
        return {}


def task_profile(stdout):
    """Every task of a run, from the json callback: [{play, task, seconds, ok, changed, skipped, failed}], slowest
    first. ``seconds`` is the task's wall time (all its hosts), summed over the batches of a serial play, as
    ansible.posix.profile_tasks would add them up; the counts are of host results."""
    tasks = {}
    for play in _callback_output(stdout).get("plays", []):
        for task in play.get("tasks", []):
            key = (play["play"]["name"], task["task"]["name"])
            row = tasks.setdefault(key, {"play": key[0], "task": key[1], "seconds": 0.0, "ok": 0, "changed": 0,
                                         "skipped": 0, "failed": 0})
            duration = task["task"].get("duration") or {}
            if duration.get("start") and duration.get("end"):
                start, end = (datetime.datetime.fromisoformat(duration[k].replace("Z", "+00:00"))
                              for k in ("start", "end"))
                row["seconds"] += (end - start).total_seconds()
            for result in task.get("hosts", {}).values():
                status = ("failed" if result.get("failed") or result.get("unreachable") else
                          "skipped" if result.get("skipped") else "changed" if result.get("changed") else "ok")
                row[status] += 1
    for row in tasks.values():
        row["seconds"] = round(row["seconds"], 3)
    return sorted(tasks.values(), key=lambda r: -r["seconds"])


def play_batches(stdout, prefix):
    """The hosts of each batch of the plays whose name starts with ``prefix``, in order (the json callback starts a
    serial play again for each batch); [[]] for a play that matched no host."""
    return [sorted({host for task in play.get("tasks", []) for host in task.get("hosts", {})})
            for play in _callback_output(stdout).get("plays", []) if play["play"]["name"].startswith(prefix)]


def recap(stdout, stderr=""):
    """changed/failed counts from the json callback's stats; the failure messages when there are any, and which
    tasks changed ("host: task", in run order), so that a rerun that changed something says what."""
    data = _callback_output(stdout)
    if not data:
        return {"error": (stdout + stderr)[-2000:]}
    stats = data.get("stats", {})
    failures, changed = [], []
    for play in data.get("plays", []):
        for task in play.get("tasks", []):
            for host, res in task.get("hosts", {}).items():
                if res.get("failed") or res.get("unreachable"):
                    failures.append("%s: %s: %s" % (host, task["task"]["name"], res.get("msg", "")))
                elif res.get("changed"):
                    changed.append("%s: %s" % (host, task["task"]["name"]))
    return {"changed": sum(s.get("changed", 0) for s in stats.values()),
            "failed": sum(s.get("failures", 0) + s.get("unreachable", 0) for s in stats.values()),
            "ok": sum(s.get("ok", 0) for s in stats.values()), "hosts": len(stats), "failures": failures[:10],
            "changed_tasks": changed[:10]}
