"""gpufleet benchmarks (`make bench`): B1 host layers, B2 scheduling quality, B3 a 1000-node simulated fleet.

    python tools/bench/bench.py [--only b1,b2,b3] [--out bench-results] [--b1-sizes 1,4,8] [--b3-sizes 10,100,1000]
    python tools/bench/bench.py report [--out bench-results]     # docs/benchmarks.md from the raw JSON

Each benchmark writes its raw figures to <out>/<name>.json; `report` renders the tables (ratios first: absolute
times vary between machines).
"""

import argparse
import pathlib
import sys
import time
import traceback

# The benchmarks' modules and the collection come through the virtualenv's paths (`make bootstrap`).
import common
import report


def sizes(text):
    return tuple(int(item) for item in text.split(",") if item)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cmd", nargs="?", default="run", choices=("run", "report"))
    parser.add_argument("--only", default="b1,b2,b3")
    parser.add_argument("--out", default=str(common.ROOT / "bench-results"))
    parser.add_argument("--b1-sizes", type=sizes, default=(1, 4, 8))
    parser.add_argument("--b2-splits", type=sizes, default=(2, 4))
    parser.add_argument("--b2-seeds", type=sizes, default=(0,), help="trace seeds per split (repeats)")
    parser.add_argument("--b3-sizes", type=sizes, default=(10, 100, 1000))
    parser.add_argument("--doc", default=str(common.ROOT / "docs" / "benchmarks.md"))
    args = parser.parse_args(argv)
    out = pathlib.Path(args.out)
    failed = []
    if args.cmd == "run":
        started = time.time()
        wanted = args.only.split(",")
        timings = {}
        for name in ("b1", "b2", "b3"):
            if name not in wanted:
                continue
            t0 = time.time()
            try:
                if name == "b1":
                    import b1_hosts  # pylint: disable=import-outside-toplevel
                    b1_hosts.run(out, args.b1_sizes)
                elif name == "b2":
                    import b2_scheduling  # pylint: disable=import-outside-toplevel
                    b2_scheduling.run(out, args.b2_splits, args.b2_seeds)
                else:
                    import b3_scale  # pylint: disable=import-outside-toplevel
                    b3_scale.run(out, args.b3_sizes)
            except Exception:  # pylint: disable=broad-except  # the others still run; the exit status tells
                traceback.print_exc()
                failed.append(name)
            timings[name] = round(time.time() - t0)
            common.log("%s done in %d s" % (name, timings[name]))
        common.log("all done in %.0f s: %s%s" % (time.time() - started, timings,
                                                 "; FAILED: %s" % ", ".join(failed) if failed else ""))
    report.render(out, pathlib.Path(args.doc), template=common.ROOT / "docs" / "benchmarks.md.in")
    common.log("report: %s" % args.doc)
    return 1 if args.cmd == "run" and failed else 0


if __name__ == "__main__":
    sys.exit(main())
