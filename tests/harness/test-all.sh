#!/usr/bin/env bash
# `make test`: run every stage even when one fails, then print one line per stage and a closing summary.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1
# The README's main job (make site) runs in lab-test, on that stage's fresh lab (tests/lab/test_site.py).
stages=(lint sanity units integration lab-test molecule)
[ -n "${GPUFLEET_TEST_STAGES:-}" ] && read -r -a stages <<<"$GPUFLEET_TEST_STAGES"
declare -A result duration
passed=0 failed=0
for s in "${stages[@]}"; do
  echo "===== make $s"
  t0=$SECONDS
  if make --no-print-directory "$s"; then result[$s]=passed; passed=$((passed + 1))
  else result[$s]=FAILED; failed=$((failed + 1)); fi
  duration[$s]=$((SECONDS - t0))
done
echo
echo "===== make test: stages"
for s in "${stages[@]}"; do printf '  %-12s %-7s %5s s\n' "$s" "${result[$s]}" "${duration[$s]}"; done
echo "summary: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
