"""tools/docs/timings.py: docs/timings.md rows from make test's records, the budget verdict, and the page as the
filed records give it."""

import pytest

import timings  # tools/docs, through the virtualenv's paths (make bootstrap)


def record(total, clean=True, failed=()):
    return {"date": "2026-12-05T18:00:00Z", "commit": "abc1234", "tree_clean": clean, "cpus": 2, "memory_gib": 24,
            "total_seconds": total,
            "stages": [{"stage": s, "result": "FAILED" if s in failed else "passed", "seconds": 10}
                       for s in timings.STAGES]}


@pytest.mark.parametrize("rec, expected", [
    (record(2699), "| 2026-12-05 | abc1234 | 2 CPUs, 24 GiB | 10 s | 10 s | 10 s | 10 s | 10 s | 10 s | 44:59 (within) |"),
    (record(2701, clean=False, failed=("sanity",)),
     "| 2026-12-05 | abc1234 + changes | 2 CPUs, 24 GiB | 10 s | 10 s (FAILED) | 10 s | 10 s | 10 s | 10 s | "
     "45:01 (**over**) |"),
])
def test_row(rec, expected):
    assert timings.row(rec) == expected


def test_a_stage_beside_another_says_so():
    rec = record(2400)
    rec["stages"][-1]["beside"] = "lab-test"
    assert timings.row(rec).endswith("| 10 s | 10 s beside lab-test | 40:00 (within) |")


def test_newest_first_and_a_stage_not_run_is_blank():
    older = dict(record(100), date="2026-12-01T00:00:00Z")
    newer = dict(record(200), stages=[{"stage": "lint", "result": "passed", "seconds": 31}])
    rows = [line for line in timings.page([older, newer]).splitlines() if line.startswith("| 2026")]
    assert rows[0].startswith("| 2026-12-05") and "| 31 s |  |  |  |  |  | 3:20 (within) |" in rows[0]
    assert rows[1].startswith("| 2026-12-01")


def test_the_page_is_what_the_filed_records_give():
    assert timings.main(["--check"]) == 0, "run `make timings`"
