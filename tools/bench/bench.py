"""gpufleet benchmarks (`make bench`): B1 host layers, B2 scheduling quality, B3 a 1000-node simulated fleet.

    python tools/bench/bench.py [--only b1,b2,b3] [--out docs/benchmarks] [--b1-sizes 1,4,8,16] [--b3-sizes ...]
    python tools/bench/bench.py --only b3-settings     # B3 under the scheduler settings a site can change (the sweep
                                                       # behind the volcano role's defaults; not in make bench)
    # the share of the nodes found per pod, with the stock and the patched scheduler (b3-settings-sampling-*.json):
    python tools/bench/bench.py --only b3-settings --b3-settings-sizes 1000 --b3-deadline 400 --b3-variants stock,p10,fixed,fixed+p10
    python tools/bench/bench.py report [--out DIR] [--doc PATH]     # the page from existing JSON

Each benchmark writes its raw figures to <out>/<name>.json (by default docs/benchmarks/, the JSON the page names),
the run itself <out>/run.json (options, durations); then docs/benchmarks.md is rendered from them, every figure of
it (tools/bench/report.py).
"""

import argparse
import json
import pathlib
import sys
import time
import traceback

# The benchmarks' modules and the collection come through the virtualenv's paths (`make bootstrap`).
import common
import report


def sizes(text):
    return tuple(int(item) for item in text.split(",") if item)


def names(text):
    return tuple(item for item in text.split(",") if item)


# The sweep of the scheduler's settings a site can change with stock images: node worker threads x log level.
SETTINGS_SWEEP = ("w20-v3", "w20-v2", "w2-v3", "w2-v2", "w1-v3", "w1-v2")
SETTINGS_DEADLINE_S = 300


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cmd", nargs="?", default="run", choices=("run", "report"))
    parser.add_argument("--only", default="b1,b2,b3")
    parser.add_argument("--out", default=str(common.ROOT / "docs" / "benchmarks"))
    parser.add_argument("--b1-sizes", type=sizes, default=(1, 4, 8, 16))
    parser.add_argument("--b1-repeats", type=int, default=3, help="rounds of baselines and rerun per size, on its converged hosts (medians reported)")
    parser.add_argument("--b2-splits", type=sizes, default=(2, 4))
    parser.add_argument("--b2-seeds", type=sizes, default=(0, 1, 2, 3, 4), help="trace seeds per split")
    parser.add_argument("--b2-repeats", type=int, default=2, help="runs of each trace under each configuration")
    parser.add_argument("--b3-sizes", type=sizes, default=(10, 100, 1000))
    parser.add_argument("--b3-variants", type=names, default=None,
                        help="B3's variants, in order (default: stock,fixed,quiet-plugin; b3-settings: the sweep). A "
                        "variant is stock, fixed or quiet-plugin, scheduler settings w<threads>-v<level>-p<percent> "
                        "(any of them: p10), or a variant and settings joined by '+' (fixed+p10)")
    parser.add_argument("--b3-deadline", type=int, default=None, help="seconds after the release a B3 run stops "
                        "(default 900; b3-settings: 300)")
    parser.add_argument("--b3-rounds", type=int, default=3, help="B3: rounds of plain pods and --b3-repeat-variants' "
                        "binds per size (the first round binds every variant; the goals are judged on the median "
                        "round)")
    parser.add_argument("--b3-repeat-variants", type=names, default=("fixed",),
                        help="B3's variants bound again in rounds 2 and on (default: fixed)")
    parser.add_argument("--b3-settings-sizes", type=sizes, default=(100, 1000))
    parser.add_argument("--doc", default=str(common.ROOT / "docs" / "benchmarks.md"))
    parser.add_argument("--start-file", help="JSON of `make bench`'s start (its time, the caches it found)")
    args = parser.parse_args(argv)
    out = pathlib.Path(args.out)
    failed = []
    if args.cmd == "run":
        started = time.time()
        make = json.loads(pathlib.Path(args.start_file).read_text()) if args.start_file else None
        wanted = args.only.split(",")
        timings = {}
        unknown = sorted(set(wanted) - {"b1", "b2", "b3", "b3-settings"})
        if unknown:
            parser.error("unknown benchmark(s) %s (allowed: b1, b2, b3, b3-settings)" % ", ".join(unknown))
        for name in ("b1", "b2", "b3", "b3-settings"):
            if name not in wanted:
                continue
            t0 = time.time()
            try:
                if name == "b1":
                    import b1_hosts  # pylint: disable=import-outside-toplevel
                    b1_hosts.run(out, args.b1_sizes, args.b1_repeats)
                elif name == "b2":
                    import b2_scheduling  # pylint: disable=import-outside-toplevel
                    b2_scheduling.run(out, args.b2_splits, args.b2_seeds, args.b2_repeats)
                elif name == "b3":
                    import b3_scale  # pylint: disable=import-outside-toplevel
                    b3_scale.run(out, args.b3_sizes, args.b3_variants or b3_scale.DEFAULT_VARIANTS,
                                 args.b3_deadline or b3_scale.BIND_DEADLINE_S, rounds=args.b3_rounds,
                                 repeat_variants=args.b3_repeat_variants)
                else:
                    import b3_scale  # pylint: disable=import-outside-toplevel
                    b3_scale.run(out, args.b3_settings_sizes, args.b3_variants or SETTINGS_SWEEP,
                                 args.b3_deadline or SETTINGS_DEADLINE_S, name="b3-settings")
            except Exception:  # pylint: disable=broad-except  # the others still run; the exit status tells
                traceback.print_exc()
                failed.append(name)
            timings[name] = round(time.time() - t0)
            common.log("%s done in %d s" % (name, timings[name]))
        common.log("all done in %.0f s: %s%s" % (time.time() - started, timings,
                                                 "; FAILED: %s" % ", ".join(failed) if failed else ""))
        run = {"argv": [a for a in (argv if argv is not None else sys.argv[1:]) if not a.startswith("--start-file")
                        and a != args.start_file], "seconds": timings, "total_s": round(time.time() - started),
               "failed": failed}
        if make:
            # make bench as a whole: the installs and builds before the benchmarks, from the caches it found.
            run["make"] = dict(make, total_s=round(time.time() - make["started"]),
                               before_benchmarks_s=round(started - make["started"]))
        common.write_result(out, "run", run)
    report.render(out, pathlib.Path(args.doc), template=common.ROOT / "docs" / "benchmarks.md.in",
                  current=common.versions())
    common.log("report: %s" % args.doc)
    return 1 if args.cmd == "run" and failed else 0


if __name__ == "__main__":
    sys.exit(main())
