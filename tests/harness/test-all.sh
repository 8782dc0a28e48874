#!/usr/bin/env bash
# `make test`: run every stage even when one fails, then print one line per stage, the total and a closing
# summary, and leave the record docs/timings.md is rendered from (.build/timings/make-test.json; `make timings`).
# The stages run one after another, except molecule, which runs one scenario at a time beside lab-test: the lab
# test waits on its cluster much of the time (a playbook run keeps about one core busy), and the molecule scenarios
# use the other core. GPUFLEET_TEST_SERIAL=1 runs them one after the other (MOLECULE_JOBS=2 then).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1
# The README's main job (make site) runs in lab-test, on that stage's fresh lab (tests/lab/test_site.py).
stages=(lint sanity units integration lab-test molecule)
[ -n "${GPUFLEET_TEST_STAGES:-}" ] && read -r -a stages <<<"$GPUFLEET_TEST_STAGES"
declare -A result duration
passed=0 failed=0 t_all=$SECONDS
# What is tested is the tree as the run starts (a commit made meanwhile is not what ran).
start_commit=$(git rev-parse --short HEAD 2>/dev/null)
start_clean=$([ -z "$(git status --porcelain 2>/dev/null)" ] && echo true || echo false)
logs=$root/.build/logs
mkdir -p "$logs"

record() {  # record <stage> <rc> <seconds>
  if [ "$2" -eq 0 ]; then result[$1]=passed; passed=$((passed + 1)); else result[$1]=FAILED; failed=$((failed + 1)); fi
  duration[$1]=$3
}

beside=""
if [ "${GPUFLEET_TEST_SERIAL:-0}" != 1 ] && [[ " ${stages[*]} " == *" lab-test "* ]] \
    && [[ " ${stages[*]} " == *" molecule "* ]]; then
  beside=molecule
fi
for s in "${stages[@]}"; do
  [ "$s" = "$beside" ] && continue
  if [ "$s" = lab-test ] && [ -n "$beside" ]; then
    # Both stages need the test-host images and package repositories: built once, before either starts.
    echo "===== make images repos (for lab-test and molecule)"
    make --no-print-directory images repos
    echo "===== make lab-test, and beside it make molecule (one scenario at a time; its lines follow in" \
      ".build/logs/make-molecule.log, printed at its end)"
    t0=$SECONDS
    ( t1=$SECONDS; MOLECULE_JOBS=1 make --no-print-directory molecule >"$logs/make-molecule.log" 2>&1
      echo "$? $((SECONDS - t1))" >"$logs/make-molecule.rc" ) &
    molecule_pid=$!
    make --no-print-directory lab-test
    record lab-test $? $((SECONDS - t0))
    wait "$molecule_pid"
    echo "===== make molecule (beside lab-test)"
    cat "$logs/make-molecule.log"
    read -r rc seconds <"$logs/make-molecule.rc"
    record molecule "$rc" "$seconds"
    continue
  fi
  echo "===== make $s"
  t0=$SECONDS
  make --no-print-directory "$s"
  record "$s" $? $((SECONDS - t0))
done
total=$((SECONDS - t_all))
echo
echo "===== make test: stages"
for s in "${stages[@]}"; do
  printf '  %-12s %-7s %5s s%s\n' "$s" "${result[$s]}" "${duration[$s]}" "$([ "$s" = "$beside" ] && echo ' (beside lab-test)')"
done
printf '  %-20s %5s s\n' total "$total"
mkdir -p .build/timings
{ printf '{"date": "%s", "commit": "%s", "tree_clean": %s, "cpus": %s, "memory_gib": %s, "total_seconds": %s, "stages": [' \
    "$(date -u +%FT%TZ)" "$start_commit" "$start_clean" "$(nproc)" \
    "$(awk '/MemTotal/ {printf "%.0f", $2 / 1048576}' /proc/meminfo)" "$total"
  sep=""; for s in "${stages[@]}"; do
    extra=""; [ "$s" = "$beside" ] && extra=', "beside": "lab-test"'
    printf '%s{"stage": "%s", "result": "%s", "seconds": %s%s}' "$sep" "$s" "${result[$s]}" "${duration[$s]}" "$extra"
    sep=", "
  done; printf ']}\n'; } >.build/timings/make-test.json
echo "summary: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
