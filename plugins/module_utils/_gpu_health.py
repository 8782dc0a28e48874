# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""GPU health between playbook runs: gpu_verify's verdict as node_exporter textfile-collector metrics.

The same code runs in three places: the gpu_health_timer module installs it on the node (with _nvml and
_gpu_policy, the code nvml_info and the gpu_verdict filter run), a systemd timer runs it there from node_python's
virtualenv as ``python -m ansible_collections.gpufleet.vgpu.plugins.module_utils._gpu_health CONFIG``, and the
unit tests call ``samples`` and ``registry`` directly. Private to the collection: no API promise.
"""

from __future__ import annotations

import json
import os
import sys
import time

from ansible_collections.gpufleet.vgpu.plugins.module_utils import _gpu_policy, _nvml, _xid

UNIT = "gpufleet-gpu-health"
# Next to the check's config: the kernel log's read position, this boot's Xid events, the last passed GPUs.
STATE_FILE = "state.json"
# Every series the check writes: name -> (labels, help). The monitoring role's alerts and dashboard read these.
NODE = ("node",)
GPU = ("node", "gpu", "uuid", "pci_bus_id")
METRICS = {
    "gpufleet_gpu_check_timestamp_seconds": (NODE, "When the GPU health check last ran (Unix time)."),
    "gpufleet_gpu_nvml_up": (NODE + ("error",), "1 when NVML answered; error names the NVML error when it did not."),
    "gpufleet_gpu_node_healthy": (NODE, "1 when the node passed every check gpu_verify makes (count, driver, GPUs)."),
    "gpufleet_gpu_findings": (NODE + ("severity",), "Number of gpu_verify findings, by severity."),
    "gpufleet_gpu_visible": (NODE, "GPUs NVML enumerates."),
    "gpufleet_gpu_expected": (NODE, "GPUs the inventory expects (gpu_verify_expected_count)."),
    "gpufleet_gpu_driver_info": (NODE + ("version", "expected_branch", "min_driver"),
                                 "The loaded driver's version and what the inventory asks for (always 1)."),
    "gpufleet_gpu_driver_ok": (NODE, "1 when the loaded driver is the branch and at least the version the inventory "
                                     "asks for."),
    "gpufleet_gpu_healthy": (GPU, "1 when the GPU passed gpu_verify's checks (reachable, no pending retired pages "
                                  "or row remapping, no uncorrectable ECC errors, model and memory as expected)."),
    "gpufleet_gpu_uncorrected_ecc_errors": (GPU + ("counter",), "Uncorrectable ECC errors (volatile: since the "
                                                                "driver loaded; aggregate: the GPU's lifetime)."),
    "gpufleet_gpu_retired_pages_pending": (GPU, "1 when retired pages wait for a GPU reset."),
    "gpufleet_gpu_remapped_rows_pending": (GPU, "1 when a row remapping waits for a GPU reset."),
    "gpufleet_gpu_remapped_rows_failed": (GPU, "1 when a row remapping failed (the GPU needs an RMA)."),
    "gpufleet_gpu_pcie_link_width": (GPU, "Current PCIe link width (lanes)."),
    "gpufleet_gpu_pcie_link_width_max": (GPU, "Maximum PCIe link width of the GPU and its slot (lanes)."),
    "gpufleet_gpu_xid_events": (GPU + ("code", "action"), "Xid events of this code the kernel logged for the card "
                                                          "this boot; action: what NVIDIA's Xid catalog calls for "
                                                          "(ignore, restart_app, reset_gpu, reboot, check)."),
    "gpufleet_gpu_xid_last_seen_seconds": (GPU + ("code", "action"), "When the check last found this Xid in the "
                                                                     "kernel log (Unix time)."),
    "gpufleet_gpu_xid_reader_up": (NODE + ("source", "error"), "1 when the kernel log was read (source: kmsg, "
                                                               "journal or file); error says why not."),
}


def _xid_samples(base, gpus, xid):
    found = [("gpufleet_gpu_xid_reader_up", dict(base, source=xid.get("source") or "none", error=xid.get("error") or ""),
              int(not xid.get("error")))]
    gpu_of = {_xid.bus_key(g.get("pci_bus_id")): g for g in gpus}
    for record in (xid.get("events") or {}).values():
        gpu = gpu_of.get(record["bus"]) or {}
        labels = dict(base, gpu=str(gpu.get("index", "")), uuid=gpu.get("uuid") or "",
                      pci_bus_id=gpu.get("pci_bus_id") or record["bus"], code=str(record["code"]),
                      action=record["action"])
        found.append(("gpufleet_gpu_xid_events", labels, record["count"]))
        found.append(("gpufleet_gpu_xid_last_seen_seconds", labels, record["last_seen"]))
    return found


def samples(node, inventory, verdict, expect, now, xid=None, baseline=None):
    """[(metric, labels, value)] of one check: ``inventory`` is _nvml.collect()'s result, ``verdict`` _gpu_policy's
    evaluate() of it with ``expect``, ``now`` the Unix time of the check, ``xid`` _xid.read()'s state and ``baseline``
    the GPUs of the last passed check (a GPU NVML cannot query keeps their identity in its labels)."""
    base = {"node": node}
    diagnosis = inventory.get("diagnosis") or {}
    found = [
        ("gpufleet_gpu_check_timestamp_seconds", base, now),
        ("gpufleet_gpu_nvml_up", dict(base, error="" if inventory.get("ok") else diagnosis.get("error", "UNKNOWN")),
         int(bool(inventory.get("ok")))),
        ("gpufleet_gpu_node_healthy", base, int(verdict["ok"])),
        ("gpufleet_gpu_findings", dict(base, severity="failure"), len(verdict["failures"])),
        ("gpufleet_gpu_findings", dict(base, severity="warning"), len(verdict["warnings"])),
    ]
    if expect.get("expected_count") is not None:
        found.append(("gpufleet_gpu_expected", base, expect["expected_count"]))
    elif (baseline or {}).get("gpus"):
        found.append(("gpufleet_gpu_expected", base, len(baseline["gpus"])))
    gpus = _gpu_policy.known_identity(inventory, baseline)
    if xid is not None:
        found.extend(_xid_samples(base, gpus, xid))
    if not inventory.get("ok"):
        return found
    found.append(("gpufleet_gpu_visible", base, inventory.get("gpu_count", 0)))
    found.append(("gpufleet_gpu_driver_info", dict(base, version=inventory.get("driver_version") or "",
                                                   expected_branch=str(expect.get("driver_branch") or ""),
                                                   min_driver=str(expect.get("min_driver") or "")), 1))
    found.append(("gpufleet_gpu_driver_ok", base, int(bool(verdict.get("driver_ok")))))
    # evaluate() judges every GPU record, in the inventory's order.
    for gpu, judged in zip(gpus, verdict["gpus"]):
        labels = dict(base, gpu=str(gpu["index"]), uuid=gpu.get("uuid") or "", pci_bus_id=gpu.get("pci_bus_id") or "")
        found.append(("gpufleet_gpu_healthy", labels, int(judged["ok"])))
        for counter in ("volatile", "aggregate"):
            value = gpu.get("ecc_uncorrected_" + counter)
            if value is not None:
                found.append(("gpufleet_gpu_uncorrected_ecc_errors", dict(labels, counter=counter), value))
        for metric, field in (("gpufleet_gpu_retired_pages_pending", "retired_pages_pending"),
                              ("gpufleet_gpu_remapped_rows_pending", "remapped_rows_pending"),
                              ("gpufleet_gpu_remapped_rows_failed", "remapped_rows_failure"),
                              ("gpufleet_gpu_pcie_link_width", "pcie_link_width_current"),
                              ("gpufleet_gpu_pcie_link_width_max", "pcie_link_width_max")):
            value = gpu.get(field)
            if value is not None:
                found.append((metric, labels, int(value)))
    return found


def registry(found):
    """A prometheus-client registry holding ``samples()``, one gauge per metric."""
    # prometheus-client is installed where this runs (node_python's virtualenv, the controller's); the module that
    # installs this file only needs the standard library.
    from prometheus_client import CollectorRegistry, Gauge  # pylint: disable=import-outside-toplevel

    found_registry = CollectorRegistry()
    gauges = {}
    for metric, labels, value in found:
        names, text = METRICS[metric]
        if metric not in gauges:
            gauges[metric] = Gauge(metric, text, list(names), registry=found_registry)
        gauges[metric].labels(**{name: labels[name] for name in names}).set(value)
    return found_registry


def check(nvml, config, now, state=None):
    """(verdict, samples, state) of one check with the installed ``config`` (node, expect, xid_source).

    ``state`` is the previous check's (or {}): the kernel log's read position and this boot's Xid events, and the
    GPUs of the last passed check (``baseline``), which the new state keeps or, after a pass, replaces.
    """
    state = state or {}
    inventory, expect = _nvml.collect(nvml), config.get("expect") or {}
    inventory["wsl"] = _nvml.is_wsl()
    xid = _xid.read(config.get("xid_source") or "auto", state.get("xid") or {}, now)
    baseline = state.get("baseline")
    verdict = _gpu_policy.evaluate(config["node"], inventory, expect, xid["events"], baseline)
    found = samples(config["node"], inventory, verdict, expect, now, xid, baseline)
    if verdict["ok"] and inventory.get("ok"):
        baseline = {"gpus": [{"index": g["index"], "uuid": g.get("uuid"), "pci_bus_id": g.get("pci_bus_id")}
                             for g in inventory.get("gpus", [])]}
    return verdict, found, {"xid": xid, "baseline": baseline}


def load_state(path):
    """The state a previous check saved at ``path``, or {} (none yet, or unreadable: the check starts afresh)."""
    try:
        with open(path, encoding="utf-8") as handle:
            state = json.load(handle)
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def save_state(path, state):
    """Write ``state`` to ``path`` through a temporary file and a rename: an interrupted check leaves the old one."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(state, handle, sort_keys=True)
    os.replace(tmp, path)


def units(config_path, interpreter, install_dir, interval):
    """{file name: content} of the systemd service and timer that run the check every ``interval``."""
    service = (
        "# Managed by gpufleet.vgpu (role gpu_verify): the GPU health check between playbook runs.\n"
        "[Unit]\n"
        "Description=gpufleet GPU health check (NVML, node_exporter textfile metrics)\n"
        "Documentation=https://github.com/gpufleet/gpufleet/blob/main/roles/gpu_verify/README.md\n"
        "\n"
        "[Service]\n"
        "Type=oneshot\n"
        # The code is the collection's own module_utils, laid out as its package; only this interpreter reads it.
        "Environment=PYTHONPATH=%s\n"
        "ExecStart=%s -m ansible_collections.gpufleet.vgpu.plugins.module_utils._gpu_health %s\n"
        "Nice=10\n"
        "IOSchedulingClass=idle\n"
        "TimeoutStartSec=120\n" % (install_dir, interpreter, config_path))
    timer = (
        "# Managed by gpufleet.vgpu (role gpu_verify).\n"
        "[Unit]\n"
        "Description=Run the gpufleet GPU health check every %s\n"
        "\n"
        "[Timer]\n"
        # At once when the timer starts (boot, install), then every interval after the last run.
        "OnActiveSec=0\n"
        "OnUnitActiveSec=%s\n"
        "AccuracySec=5s\n"
        "\n"
        "[Install]\n"
        "WantedBy=timers.target\n" % (interval, interval))
    return {UNIT + ".service": service, UNIT + ".timer": timer}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        sys.stderr.write("usage: python -m %s CONFIG.json\n" % __name__)
        return 2
    with open(argv[0], encoding="utf-8") as handle:
        config = json.load(handle)
    import pynvml  # pylint: disable=import-outside-toplevel
    from prometheus_client import write_to_textfile  # pylint: disable=import-outside-toplevel

    state_path = os.path.join(os.path.dirname(os.path.abspath(argv[0])), STATE_FILE)
    verdict, found, state = check(pynvml, config, time.time(), load_state(state_path))
    # Written to a temporary file and renamed: node_exporter never reads half a file.
    write_to_textfile(config["textfile"], registry(found))
    save_state(state_path, state)
    # The journal keeps what the metrics only count: each finding with its cause and next step. (This runs under
    # systemd, not as a module: standard output is the journal.)
    # The verdict line names the first failure (and an OK line its warnings); the rest follow, one a line.
    more = [] if verdict["ok"] else verdict["failures"][1:] + ["warning: " + w for w in verdict["warnings"]]
    sys.stdout.write("".join("%s\n" % line for line in [verdict["line"]] + ["  " + finding for finding in more]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
