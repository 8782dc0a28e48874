# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one Markdown table writer of the collection (smoke results, capacity report, version pairs, benchmarks).

Pure, no Ansible: it ships with ``vgpu_smoke`` (whose report holds two of the tables) and serves the controller.
"""

from __future__ import annotations


def cell(value):
    """A value as one table cell: None is empty; a pipe is escaped and a line break folded, so a row stays a row."""
    return "" if value is None else str(value).replace("|", "\\|").replace("\n", " ")


def table(header, rows, right=()):
    """Markdown table lines: ``header`` cells, then ``rows`` (sequences of values); columns whose index is in
    ``right`` are right-aligned (numbers)."""
    lines = ["| " + " | ".join(cell(name) for name in header) + " |",
             "|" + "|".join("---:" if index in right else "---" for index in range(len(header))) + "|"]
    for row in rows:
        if len(row) != len(header):
            raise ValueError("a row of %d cells under %d columns: %r" % (len(row), len(header), row))
        lines.append("| " + " | ".join(cell(value) for value in row) + " |")
    return lines
