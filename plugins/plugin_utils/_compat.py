# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Which Volcano and volcano-vgpu-device-plugin versions work together: a table, each row with its source.

Controller-side data, read by the preflight (filter ``vgpu_version_compatibility``) and rendered into the
``device_plugin`` role's README (a unit test keeps the two equal). The rows are checked in order; the first whose
version ranges hold gives the verdict.

Why the pairs differ (upstream code, see the sources): up to Volcano v1.14.3 and v1.15.0 the scheduler drops a GPU
node whose plugin does not refresh the ``volcano.sh/node-vgpu-handshake`` annotation within 60 s. Volcano v1.14.4
and v1.15.1 removed that handshake (volcano-sh/volcano#5388 and #5392, backported in release-1.15 #5433) and only
need the node's allocatable vGPU resources. Plugin v1.12.0 writes both; the plugin after v1.12.0 (its main
branch, commit 9a6973b) stopped writing the handshake.
"""

from __future__ import annotations

import re

from ansible_collections.gpufleet.vgpu.plugins.module_utils import _markdown

WORKS, BROKEN, CAVEAT = "works", "broken", "works, with a caveat"

# Version ranges are half-open: (from, before); None is open. (volcano range, plugin range, verdict, what happens,
# sources). The rows do not overlap (a unit test checks it).
TABLE = (
    (((1, 15, 1), None), (None, (1, 12, 1)), WORKS,
     "no handshake in the scheduler; plugin v1.12.0 registers the allocatable vGPU resources it needs",
     "gpufleet lab: Volcano v1.15.1 with the real plugin v1.12.0 binary (make test); volcano-sh/volcano#5433"),
    (((1, 15, 0), (1, 15, 1)), (None, (1, 12, 1)), CAVEAT,
     "the scheduler answers every node's handshake with API patches at 5 requests/s under its cache lock: "
     "200 nodes x 8 GPUs took over 10 minutes to schedule",
     "plugin README version matrix (v1.12.0 and below with Volcano v1.15.0 and below); volcano-sh/volcano#5361; "
     "Project-HAMi/volcano-vgpu-device-plugin#132"),
    (((1, 14, 4), (1, 15, 0)), (None, (1, 12, 1)), WORKS,
     "no handshake in the scheduler (backport of volcano-sh/volcano#5388)",
     "volcano-sh/volcano#5392"),
    ((None, (1, 14, 4)), (None, (1, 12, 1)), CAVEAT,
     "handshake as in v1.15.0 (5 requests/s handshake answers on large fleets)",
     "plugin README version matrix; volcano-sh/volcano#5361"),
    (((1, 15, 0), (1, 15, 1)), ((1, 12, 1), None), BROKEN,
     "the plugin no longer writes the handshake, so the scheduler drops every GPU node after 60 s",
     "plugin commit 9a6973b (after v1.12.0); volcano-sh/volcano#5388"),
    ((None, (1, 14, 4)), ((1, 12, 1), None), BROKEN,
     "the plugin no longer writes the handshake, so the scheduler drops every GPU node after 60 s",
     "plugin commit 9a6973b (after v1.12.0); plugin README version matrix (master with Volcano master)"),
    (((1, 14, 4), (1, 15, 0)), ((1, 12, 1), None), WORKS,
     "neither side uses the handshake",
     "volcano-sh/volcano#5392 (backport of #5388)"),
    (((1, 15, 1), None), ((1, 12, 1), None), WORKS,
     "neither side uses the handshake",
     "plugin README version matrix (master with Volcano master); volcano-sh/volcano#5388"),
)


def parse(version):
    """'v1.15.1', '1.15.1' or 'registry/x:v1.15.1' -> (1, 15, 1); None when it is no version (a digest, 'latest')."""
    match = re.search(r"(?:^|[:v])(\d+)\.(\d+)(?:\.(\d+))?(?:[-+].*)?$", str(version or "").strip())
    if not match:
        return None
    return tuple(int(part or 0) for part in match.groups())


def _within(version, bounds):
    low, high = bounds
    return (low is None or version >= low) and (high is None or version < high)


def _dotted(version):
    return ".".join(map(str, version))


def _show(bounds):
    """(from, before) in words: "1.15.0", "1.14.4 to before 1.15.0", "up to 1.14.3", ">= 1.15.1"."""
    low, high = bounds
    if high is None:
        return ">= %s" % _dotted(low)
    last = _dotted(high[:2] + (high[2] - 1,)) if high[2] else None
    if low is None:
        return "up to %s" % last if last else "before %s" % _dotted(high)
    if last == _dotted(low):
        return last
    return "%s to %s" % (_dotted(low), last or "before %s" % _dotted(high))


def check(volcano_version, plugin_version):
    """The verdict on a pair: {verdict, volcano, plugin, why, source}; verdict 'unknown' when a version does not
    parse or no row covers the pair."""
    volcano, plugin = parse(volcano_version), parse(plugin_version)
    result = {"volcano": volcano_version, "plugin": plugin_version, "verdict": "unknown", "why": "", "source": ""}
    if volcano is None or plugin is None:
        result["why"] = "not a version number: %s" % (
            " and ".join(repr(v) for v, p in ((volcano_version, volcano), (plugin_version, plugin)) if p is None))
        return result
    for volcano_range, plugin_range, verdict, why, source in TABLE:
        if _within(volcano, volcano_range) and _within(plugin, plugin_range):
            result.update(verdict=verdict, why=why, source=source)
            return result
    result["why"] = "no known result for this pair"
    return result


def markdown():
    """The table as Markdown rows (the device_plugin README carries exactly these lines)."""
    rows = [(_show(volcano_range), _show(plugin_range), verdict, why, source)
            for volcano_range, plugin_range, verdict, why, source in TABLE]
    return "\n".join(_markdown.table(("Volcano", "plugin", "verdict", "what happens", "source"), rows)) + "\n"
