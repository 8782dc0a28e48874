# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Verdict on one node's NVML inventory against the inventory's expectations. Pure functions, no Ansible."""

from __future__ import annotations

import re

from ansible_collections.gpufleet.vgpu.plugins.module_utils import _nvml, _xid

DEFAULT_EXPECT = {
    "expected_count": None,
    "model_pattern": "",
    "min_driver": "",
    "driver_branch": "",
    "mig_mode": "",
    "min_memory_mib": 0,
    "fail_on_retired_pages_pending": True,
    "fail_on_remapped_rows": True,
    "fail_on_uncorrected_ecc": True,
    "warn_on_pcie_degraded": True,
    "warn_on_persistence_off": True,
}


def version_tuple(text):
    """'570.133.20' -> (570, 133, 20); raises ValueError for anything that is not dotted numbers."""
    if not isinstance(text, str) or not re.match(r"^\d+(\.\d+)*$", text.strip()):
        raise ValueError("not a dotted numeric version: %r" % (text,))
    return tuple(int(part) for part in text.strip().split("."))


def validate_expect(expect):
    """Return a list of messages for bad expectations (empty when valid)."""
    errors = []
    unknown = sorted(set(expect) - set(DEFAULT_EXPECT))
    if unknown:
        errors.append("unknown expectation(s) %s; allowed: %s" % (", ".join(unknown), ", ".join(sorted(DEFAULT_EXPECT))))
    count = expect.get("expected_count")
    if count is not None and (not isinstance(count, int) or isinstance(count, bool) or count < 0):
        errors.append("expected_count must be an integer >= 0 or null, got %r" % (count,))
    if expect.get("model_pattern"):
        try:
            re.compile(expect["model_pattern"])
        except re.error as exc:
            errors.append("model_pattern is not a valid regular expression (%s): %r" % (exc, expect["model_pattern"]))
    if expect.get("min_driver"):
        try:
            version_tuple(expect["min_driver"])
        except ValueError:
            errors.append("min_driver must look like '550' or '550.54.15', got %r" % (expect["min_driver"],))
    branch = expect.get("driver_branch") or ""
    if branch and not re.match(r"^\d+$", str(branch)):
        errors.append("driver_branch must be a driver branch such as '570', got %r" % (branch,))
    if expect.get("mig_mode") not in ("", None, "on", "off"):
        errors.append("mig_mode must be one of on, off (or empty: not checked), got %r" % (expect.get("mig_mode"),))
    mem = expect.get("min_memory_mib", 0)
    if not isinstance(mem, int) or isinstance(mem, bool) or mem < 0:
        errors.append("min_memory_mib must be an integer >= 0, got %r" % (mem,))
    return errors


def _gpu_label(gpu):
    bus = gpu.get("pci_bus_id")
    return "GPU %s%s" % (gpu["index"], " (%s)" % bus if bus else "")


def _gpu_findings(gpu, expect):
    """(failures, warnings) for one GPU record."""
    failures, warnings = [], []
    label = _gpu_label(gpu)
    diag = gpu.get("diagnosis")
    if diag:
        failures.append("%s: %s — %s; next: %s" % (label, diag["error"], diag["cause"], diag["next_step"]))
        return failures, warnings
    errors = gpu.get("query_errors") or {}
    by_error = {}
    for field, error in sorted(errors.items()):
        by_error.setdefault(error, []).append(field)
    for error, fields in sorted(by_error.items()):
        code = _nvml.error_code(error)
        found = _nvml.diagnose(code if code is not None else error, gpu_index=gpu["index"])
        failures.append("%s: NVML %s reading %s — %s; next: %s"
                        % (label, error, ", ".join(fields), found["cause"], found["next_step"]))
    name = gpu.get("name") or ""
    if expect["model_pattern"] and "name" not in errors and not re.search(expect["model_pattern"], name):
        failures.append("%s: model '%s' does not match '%s'" % (label, name, expect["model_pattern"]))
    total = gpu.get("memory_total_mib")
    if expect["min_memory_mib"] and "memory" not in errors and (total is None or total < expect["min_memory_mib"]):
        failures.append("%s: %s MiB of memory, expected at least %d MiB" % (label, total, expect["min_memory_mib"]))
    if expect["fail_on_retired_pages_pending"] and gpu.get("retired_pages_pending"):
        failures.append("%s: retired pages are pending — reset the GPU or reboot the node" % label)
    if expect["fail_on_remapped_rows"] and gpu.get("remapped_rows_failure"):
        failures.append("%s: row remapping failed — the GPU needs an RMA" % label)
    elif expect["fail_on_remapped_rows"] and gpu.get("remapped_rows_pending"):
        failures.append("%s: a row remapping is pending — reset the GPU or reboot the node" % label)
    if expect["fail_on_uncorrected_ecc"] and (gpu.get("ecc_uncorrected_volatile") or 0) > 0:
        failures.append("%s: %d uncorrectable ECC errors since the last driver load"
                        % (label, gpu["ecc_uncorrected_volatile"]))
    if expect["warn_on_pcie_degraded"]:
        cur, mx = gpu.get("pcie_link_width_current"), gpu.get("pcie_link_width_max")
        # Width, not generation: idle GPUs legitimately lower the link generation to save power.
        if cur is not None and mx is not None and cur < mx:
            warnings.append("%s: PCIe link x%d of x%d (check riser and seating)" % (label, cur, mx))
    if expect["warn_on_persistence_off"] and gpu.get("persistence_mode") is False:
        warnings.append("%s: persistence mode is off (enable nvidia-persistenced)" % label)
    mig = gpu.get("mig_mode_current")
    if mig is not None and gpu.get("mig_mode_pending") != mig:
        warnings.append("%s: MIG mode change pending — reset the GPU to apply it" % label)
    if expect["mig_mode"] == "off" and mig:
        failures.append("%s: MIG mode is on, but the device plugin's mode needs it off (whole GPUs split by "
                        "hami-core); next: 'nvidia-smi -i %s -mig 0' and reset the GPU" % (label, gpu["index"]))
    elif expect["mig_mode"] == "on" and mig is False:
        failures.append("%s: MIG mode is off, but the device plugin's mig mode needs it on; next: "
                        "'nvidia-smi -i %s -mig 1' and reset the GPU" % (label, gpu["index"]))
    return failures, warnings


def known_identity(inventory, baseline):
    """The inventory's GPU records, each missing UUID or bus ID filled from ``baseline`` (the GPUs of the node's last
    passed check, by index): a GPU that NVML can no longer query is still named by what was read before."""
    before = {gpu.get("index"): gpu for gpu in (baseline or {}).get("gpus") or []}
    gpus = []
    for gpu in inventory.get("gpus", []):
        known = before.get(gpu.get("index")) or {}
        gpus.append(dict(gpu, uuid=gpu.get("uuid") or known.get("uuid"),
                         pci_bus_id=gpu.get("pci_bus_id") or known.get("pci_bus_id")))
    return gpus


def _missing_cards(inventory, baseline):
    """A failure when fewer GPUs are visible than when the node last passed, naming the cards gone, else None."""
    before = (baseline or {}).get("gpus") or []
    count = inventory.get("gpu_count", 0)
    if count >= len(before):
        return None
    seen = {_xid.bus_key(g.get("pci_bus_id")) for g in inventory.get("gpus", [])}
    gone = ["%s (%s)" % (g.get("pci_bus_id"), g.get("uuid")) for g in before
            if _xid.bus_key(g.get("pci_bus_id")) not in seen]
    return ("%d GPU(s) visible, %d when the node last passed its check%s — a card fell off the bus or is not seated; "
            "if it was removed on purpose, set gpu_verify_expected_count: %d"
            % (count, len(before), "; gone: " + ", ".join(gone) if gone else "", count))


def _xid_findings(gpus, xid_events):
    """(failures, warnings, {gpu index: its failures}) of the kernel's Xid events this boot, each named by its card."""
    failures, warnings, failed = [], [], {}
    index_of = {_xid.bus_key(g.get("pci_bus_id")): g for g in gpus}
    for bus, records in sorted(_xid.by_bus(xid_events or {}).items()):
        gpu = index_of.get(bus)
        label = _gpu_label(gpu) if gpu else "the card at PCI %s (not visible to NVML)" % bus
        for record in records:
            line = _xid.finding(record, label).replace("<index>", str(gpu["index"]) if gpu else "<index>")
            if record["action"] in _xid.FAILING:
                failures.append(line)
                if gpu:
                    failed.setdefault(gpu["index"], []).append(line)
            elif record["action"] != "ignore":
                warnings.append(line)
    return failures, warnings, failed


def evaluate(node, inventory, expect=None, xid_events=None, baseline=None):
    """Verdict for ``node`` from an ``nvml_info`` result and expectations (missing keys take DEFAULT_EXPECT).

    ``xid_events`` are the kernel's Xid events of this boot (``_xid.read()``'s ``events``); ``baseline`` the GPUs of
    the node's last passed check (``{"gpus": [{index, uuid, pci_bus_id}]}``): without an expected count, fewer GPUs
    than that fail the node, and a GPU NVML cannot query keeps its earlier identity.

    Returns ``{"node", "ok", "failures", "warnings", "line", "gpus", "driver_ok"}``; ``line`` is one readable line for
    the play output, ``gpus`` the findings per GPU record in the inventory's order (``index``, ``ok``, ``failures``,
    ``warnings``) and ``driver_ok`` whether the loaded driver is the one the inventory asks for (None without NVML).
    """
    exp = dict(DEFAULT_EXPECT)
    exp.update({k: v for k, v in (expect or {}).items() if v is not None or k == "expected_count"})
    bad = validate_expect(exp)
    if bad:
        raise ValueError("; ".join(bad))
    failures, warnings, gpus, driver_ok = [], [], [], True
    diag = inventory.get("diagnosis")
    if not inventory.get("ok"):
        if diag:
            failures.append("NVML unavailable: %s — %s; next: %s" % (diag["error"], diag["cause"], diag["next_step"]))
        else:
            failures.append("NVML unavailable for an unknown reason")
    elif inventory.get("wsl"):
        failures.append("this is a WSL host (the GPU is reached through Windows' WDDM driver %s): the device plugin "
                        "cannot isolate vGPUs here and gpufleet does not support it; use a Linux host with the NVIDIA "
                        "Linux driver" % inventory.get("driver_version"))
    else:
        count = inventory.get("gpu_count", 0)
        wanted = exp["expected_count"]
        if wanted is not None and count != wanted:
            missing = " — a card is missing from the bus or not seated" if count < wanted else ""
            failures.append("%s GPU(s) visible, inventory expects %s%s" % (count, wanted, missing))
        elif wanted is None and _missing_cards(inventory, baseline):
            failures.append(_missing_cards(inventory, baseline))
        driver = inventory.get("driver_version")
        if exp["min_driver"] and driver and version_tuple(driver) < version_tuple(exp["min_driver"]):
            driver_ok = False
            failures.append("driver %s is older than the required %s" % (driver, exp["min_driver"]))
        if exp["driver_branch"] and driver and driver.split(".")[0] != str(exp["driver_branch"]):
            driver_ok = False
            failures.append("driver %s is loaded, but the inventory expects branch %s (nvidia_driver_branch): a "
                            "reboot is pending after a branch change, or the node was installed by hand"
                            % (driver, exp["driver_branch"]))
        known = known_identity(inventory, baseline)
        for gpu in known:
            gpu_failures, gpu_warnings = _gpu_findings(gpu, exp)
            failures.extend(gpu_failures)
            warnings.extend(gpu_warnings)
            gpus.append({"index": gpu["index"], "ok": not gpu_failures, "failures": gpu_failures,
                         "warnings": gpu_warnings})
        xid_failures, xid_warnings, xid_failed = _xid_findings(known, xid_events)
        failures.extend(xid_failures)
        warnings.extend(xid_warnings)
        for judged in gpus:
            if judged["index"] in xid_failed:
                judged["ok"] = False
                judged["failures"].extend(xid_failed[judged["index"]])
    if failures:
        line = "%s: FAILED: %s" % (node, failures[0])
        if len(failures) > 1:
            line += " (+%d more)" % (len(failures) - 1)
    else:
        models = sorted({g.get("name") or "?" for g in inventory.get("gpus", [])})
        line = "%s: OK: %d GPU(s) %s, driver %s" % (
            node, inventory.get("gpu_count", 0), ", ".join(models), inventory.get("driver_version"))
        mig_on = [str(g["index"]) for g in inventory.get("gpus", []) if g.get("mig_mode_current")]
        if mig_on:
            line += ", MIG on for GPU %s" % ", ".join(mig_on)
        if warnings:
            line += "; %d warning(s): %s" % (len(warnings), "; ".join(warnings))
    return {"node": node, "ok": not failures, "failures": failures, "warnings": warnings, "line": line, "gpus": gpus,
            "driver_ok": driver_ok if inventory.get("ok") else None}


def fleet_summary(verdicts):
    """Summary of several nodes' verdicts: counts and one line per problem, node-qualified."""
    verdicts = [v for v in verdicts if v]
    failed = [v for v in verdicts if not v["ok"]]
    lines = ["fleet: %d node(s) OK, %d failed" % (len(verdicts) - len(failed), len(failed))]
    for v in failed:
        lines.extend("  %s: %s" % (v["node"], f) for f in v["failures"])
    for v in verdicts:
        lines.extend("  %s: warning: %s" % (v["node"], w) for w in v["warnings"])
    return {
        "nodes_ok": sorted(v["node"] for v in verdicts if v["ok"]),
        "nodes_failed": sorted(v["node"] for v in failed),
        "lines": lines,
    }
