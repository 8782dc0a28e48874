"""docs/timings.md from the records `make test` writes (.build/timings/make-test.json, filed under docs/timings/ by
`make timings`): one row per run, its stages' seconds, the machine's size, and whether the tree was clean.

usage: timings.py [--file RECORD] [--check]
"""

import argparse
import json
import pathlib
import shutil
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
RECORDS = ROOT / "docs" / "timings"
PAGE = ROOT / "docs" / "timings.md"
BUDGET_MINUTES = 45
STAGES = ["lint", "sanity", "units", "integration", "lab-test", "molecule"]


def minutes(seconds):
    return "%d:%02d" % divmod(int(seconds), 60)


def row(record):
    stages = {s["stage"]: s for s in record["stages"]}
    cells = []
    for name in STAGES:
        stage = stages.get(name)
        if stage is None:
            cells.append("")
            continue
        note = "" if stage["result"] == "passed" else " (%s)" % stage["result"]
        # A stage that ran beside another (molecule beside lab-test): its time overlaps the other's.
        if stage.get("beside"):
            note += " beside %s" % stage["beside"]
        cells.append("%s s%s" % (stage["seconds"], note))
    total = record["total_seconds"]
    verdict = "within" if total <= BUDGET_MINUTES * 60 else "**over**"
    return "| %s | %s%s | %s CPUs, %s GiB | %s | %s (%s) |" % (
        record["date"][:10], record["commit"], "" if record["tree_clean"] else " + changes", record["cpus"],
        record["memory_gib"], " | ".join(cells), minutes(total), verdict)


def page(records):
    lines = [
        "# How long `make test` takes",
        "",
        "Written by `make timings` from the records `make test` leaves in `.build/timings/` (filed in",
        "[docs/timings/](timings/)); do not edit by hand. Times are wall-clock seconds on the machine named, warm",
        "(the lab's Go builds, the test-host images and the virtualenv cached; a cold machine adds their builds, about",
        "30 min on 2 cores). The budget is %d minutes warm on 2 cores. `make lab-test` prints its slowest tests. A" % (
            BUDGET_MINUTES),
        "stage marked *beside* another ran at the same time as it, so the total is less than the sum of the stages.",
        "",
        "| date | commit | machine | %s | total |" % " | ".join(STAGES),
        "|---|---|---|%s---|" % ("---|" * len(STAGES)),
    ]
    lines += [row(r) for r in sorted(records, key=lambda r: r["date"], reverse=True)]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", type=pathlib.Path, help="a make-test.json record to file under docs/timings/")
    parser.add_argument("--check", action="store_true", help="fail when docs/timings.md is not what the records give")
    args = parser.parse_args(argv)
    if args.file:
        record = json.loads(args.file.read_text())
        RECORDS.mkdir(parents=True, exist_ok=True)
        shutil.copy(args.file, RECORDS / ("make-test-%s.json" % record["date"].replace(":", "")))
    records = [json.loads(p.read_text()) for p in sorted(RECORDS.glob("*.json"))]
    wanted = page(records)
    if args.check:
        if not PAGE.exists() or PAGE.read_text() != wanted:
            print("docs/timings.md differs from docs/timings/*.json: run `make timings`", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main())
