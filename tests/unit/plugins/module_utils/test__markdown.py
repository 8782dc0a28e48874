"""The collection's one Markdown table writer."""

import pytest

from ansible_collections.gpufleet.vgpu.plugins.module_utils import _markdown

TABLES = [
    ("plain", ("a", "b"), [(1, "x")], (), ["| a | b |", "|---|---|", "| 1 | x |"]),
    ("numbers right", ("node", "MiB"), [("rig01", 24564)], (1,), ["| node | MiB |", "|---|---:|", "| rig01 | 24564 |"]),
    ("none is empty", ("a", "b"), [(None, 0)], (), ["| a | b |", "|---|---|", "|  | 0 |"]),
    # A pipe or a line break in a value (an error message, a node name) must not split or end the row.
    ("pipe escaped", ("detail",), [("a|b",)], (), ["| detail |", "|---|", "| a\\|b |"]),
    ("line break folded", ("detail",), [("one\ntwo",)], (), ["| detail |", "|---|", "| one two |"]),
    ("no rows", ("a",), [], (), ["| a |", "|---|"]),
]


@pytest.mark.parametrize(("case", "header", "rows", "right", "lines"), TABLES, ids=[t[0] for t in TABLES])
def test_table(case, header, rows, right, lines):
    assert _markdown.table(header, rows, right) == lines


def test_a_row_of_the_wrong_width_is_refused():
    with pytest.raises(ValueError, match="a row of 1 cells under 2 columns"):
        _markdown.table(("a", "b"), [(1,)])
