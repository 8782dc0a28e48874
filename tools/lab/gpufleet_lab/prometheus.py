"""The lab's Prometheus: Debian's package (unpacked by tests/harness/prometheus.sh), scraping the real vc-scheduler,
vc-controller-manager, each GPU node's plugin monitor and each GPU host's node_exporter (Debian's package in the
test-host image, reading the textfile gpu_verify's health timer writes), and evaluating the rules the monitoring role
writes.

A site's Prometheus finds those targets with kubernetes_sd (the role's scrape-configs.yml); the lab's pods have
kwok's addresses, which lead nowhere, so the lab lists the real processes' addresses in file_sd files instead, under
the job names a site's scrape config gives them and with the node label its relabelling adds. The job names are the
monitoring role's defaults, written here on purpose and not imported: a change on one side fails the lab test. The
node_exporter job is the site's own, under a name of the lab's: the health series name their node themselves.
"""

import subprocess
import time
import urllib.request

from .paths import LAB, ROOT, free_port, log, write_json

JOBS = {"scheduler": "gpufleet-volcano-scheduler", "controllers": "gpufleet-volcano-controllers",
        "monitor": "gpufleet-vgpu-monitor"}
NODE_EXPORTER_JOB = "lab-node-exporter"
DIR = LAB / "prometheus"
# Where the lab inventory points monitoring_files_dir; the controller reloads Prometheus when the rules change there
# (what the Prometheus Operator's config-reloader does in a cluster).
RULES = DIR / "gpufleet" / "gpufleet-rules.yml"


def binaries():
    found = subprocess.run(["bash", str(ROOT / "tests" / "harness" / "prometheus.sh")], capture_output=True,
                           text=True, check=True)
    return found.stdout.strip()


def config(node_exporters):
    return {
        # A scrape and an evaluation every 5 s: this Prometheus's own setting (a site picks its own), so a test
        # sees a change within seconds.
        "global": {"scrape_interval": "5s", "evaluation_interval": "5s", "scrape_timeout": "4s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [{"job_name": job, "file_sd_configs": [{"files": [str(DIR / "targets" / ("%s.json" % key))]}]}
                           for key, job in JOBS.items()] + [
            {"job_name": NODE_EXPORTER_JOB, "static_configs": [{"targets": sorted(node_exporters.values())}]}],
    }


def start(state, node_exporters):
    """Start Prometheus; ``node_exporters`` is {node: host:port} of the GPU hosts' node_exporter."""
    import yaml  # pylint: disable=import-outside-toplevel

    bin_dir = binaries()
    for sub in ("targets", "data", "gpufleet"):
        (DIR / sub).mkdir(parents=True, exist_ok=True)
    for key in JOBS:
        write_json(DIR / "targets" / ("%s.json" % key), [])
    (DIR / "prometheus.yml").write_text(yaml.safe_dump(config(node_exporters), sort_keys=False))
    port = free_port()
    state["ports"]["prometheus"] = port
    from . import procs  # pylint: disable=import-outside-toplevel

    procs.start("prometheus", [bin_dir + "/prometheus", "--config.file", str(DIR / "prometheus.yml"),
                               "--storage.tsdb.path", str(DIR / "data"), "--web.enable-lifecycle",
                               "--web.listen-address", "127.0.0.1:%d" % port], state)
    url = "http://127.0.0.1:%d" % port
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url + "/-/ready", timeout=2):  # noqa: S310 (lab loopback)
                return url
        except OSError:
            time.sleep(0.5)
    raise SystemExit("the lab's Prometheus did not get ready in 60 s; see %s" % (LAB / "logs" / "prometheus.log"))


def _target(url):
    return url.split("//", 1)[-1].split("/", 1)[0]


def write_targets(children):
    """file_sd targets from the controller's state (what runs where, this pass)."""
    scheduler = children.get("vc-scheduler", {})
    controllers = children.get("vc-controller-manager", {})
    found = {
        "scheduler": [{"targets": [_target(scheduler["metrics_url"])]}] if scheduler.get("ready") else [],
        "controllers": [{"targets": [_target(controllers["metrics_url"])]}] if controllers.get("ready") else [],
        "monitor": [{"targets": [_target(url)], "labels": {"node": node}}
                    for node, url in sorted(children.get("plugin_monitors", {}).items())],
    }
    for key, targets in found.items():
        path = DIR / "targets" / ("%s.json" % key)
        if path.parent.exists():
            write_json(path, targets)


class Reloader:
    """Reload Prometheus when the rules file changes (a config-reloader's job)."""

    def __init__(self, url):
        self.url, self.seen = url, None

    def sync(self):
        try:
            stamp = RULES.stat().st_mtime_ns
        except OSError:
            stamp = None
        if stamp == self.seen:
            return
        request = urllib.request.Request(self.url + "/-/reload", method="POST")
        with urllib.request.urlopen(request, timeout=10):  # noqa: S310 (lab loopback)
            pass
        self.seen = stamp
        log("controller: Prometheus reloaded (%s %s)" % (RULES.name, "changed" if stamp else "absent"))
