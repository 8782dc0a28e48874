#!/usr/bin/env bash
# `make test`: run every stage even when one fails, then print one line per stage, the total and a closing
# summary, and leave the record docs/timings.md is rendered from (.build/timings/make-test.json; `make timings`).
# The stages run one after another: on 2 cores they are CPU-bound, and molecule beside lab-test took about as long
# as both in a row while slowing the lab's timed waits.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1
# The README's main job (make site) runs in lab-test, on that stage's fresh lab (tests/lab/test_site.py).
stages=(lint sanity units integration lab-test molecule)
[ -n "${GPUFLEET_TEST_STAGES:-}" ] && read -r -a stages <<<"$GPUFLEET_TEST_STAGES"
declare -A result duration
passed=0 failed=0 t_all=$SECONDS
for s in "${stages[@]}"; do
  echo "===== make $s"
  t0=$SECONDS
  if make --no-print-directory "$s"; then result[$s]=passed; passed=$((passed + 1))
  else result[$s]=FAILED; failed=$((failed + 1)); fi
  duration[$s]=$((SECONDS - t0))
done
total=$((SECONDS - t_all))
echo
echo "===== make test: stages"
for s in "${stages[@]}"; do printf '  %-12s %-7s %5s s\n' "$s" "${result[$s]}" "${duration[$s]}"; done
printf '  %-20s %5s s\n' total "$total"
mkdir -p .build/timings
{ printf '{"date": "%s", "commit": "%s", "tree_clean": %s, "cpus": %s, "memory_gib": %s, "total_seconds": %s, "stages": [' \
    "$(date -u +%FT%TZ)" "$(git rev-parse --short HEAD 2>/dev/null)" \
    "$([ -z "$(git status --porcelain 2>/dev/null)" ] && echo true || echo false)" "$(nproc)" \
    "$(awk '/MemTotal/ {printf "%.0f", $2 / 1048576}' /proc/meminfo)" "$total"
  sep=""; for s in "${stages[@]}"; do
    printf '%s{"stage": "%s", "result": "%s", "seconds": %s}' "$sep" "$s" "${result[$s]}" "${duration[$s]}"; sep=", "
  done; printf ']}\n'; } >.build/timings/make-test.json
echo "summary: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
