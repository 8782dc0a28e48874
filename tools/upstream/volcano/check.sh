#!/usr/bin/env bash
# The patches of tools/upstream/volcano/patches against the pinned Volcano (tools/lab/volcano/go.mod): the patched
# packages' whole test suites (Volcano's tests and the patches' own) and each benchmark once, in seconds once the Go
# build cache is warm. With --bench, the benchmarks properly (-count 5; what make bench records).
#
# usage: tools/upstream/volcano/check.sh [--bench OUT_FILE]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
cache=${GPUFLEET_CACHE:-/var/cache/gpufleet}
source "$root/tools/lab/goproxy.sh"
group=$root/tools/lab/volcano
modfile=$(python3 "$root/tools/upstream/patched_module.py" "$group" volcano.sh/volcano "$here/patches" \
  "$cache/upstream/volcano")
packages=(volcano.sh/volcano/pkg/scheduler/api volcano.sh/volcano/pkg/scheduler/api/devices/nvidia/vgpu
  volcano.sh/volcano/pkg/scheduler/plugins/predicates volcano.sh/volcano/pkg/scheduler/cache)
cd "$group"
if [ "${1:-}" = --bench ]; then
  go test -modfile="$modfile" -run '^$' -bench . -benchmem -count 5 "${packages[@]}" | tee "$2"
  exit
fi
# Volcano's tests log through klog to stderr: only go test's own lines are shown, all of it when a test fails.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! go test -modfile="$modfile" -count 1 -bench . -benchtime 1x -run . "${packages[@]}" >"$log" 2>&1; then
  cat "$log"
  exit 1
fi
grep -E '^(ok|PASS|FAIL|Benchmark)' "$log"
