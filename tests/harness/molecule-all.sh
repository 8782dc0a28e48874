#!/usr/bin/env bash
# Run molecule scenarios as separate processes, at most $MOLECULE_JOBS (2) at a time: `molecule test --all
# --workers` shares instance state between scenarios and breaks (see shared/reference/test-hosts.md).
# usage: molecule-all.sh [scenario ...]     (default: every molecule/*/molecule.yml)
set -uo pipefail
export NO_COLOR=1 ANSIBLE_NOCOLOR=1 PY_COLORS=0
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1
logs="$root/.build/logs"
mkdir -p "$logs"
jobs=${MOLECULE_JOBS:-2}

scenarios=("$@")
if [ ${#scenarios[@]} -eq 0 ]; then
  # Longest first, so that the slots end together (one run on a 2-core machine: container_runtime 549 s,
  # nvidia_driver 373, gpu_verify 171, node_python 150); scenarios not named here follow.
  for s in container_runtime nvidia_driver gpu_verify node_python; do
    [ -f "molecule/$s/molecule.yml" ] && scenarios+=("$s")
  done
  for f in molecule/*/molecule.yml; do
    s=$(basename "$(dirname "$f")")
    [[ " ${scenarios[*]} " == *" $s "* ]] || scenarios+=("$s")
  done
fi

run_one() {
  local s=$1 t0=$SECONDS rc
  molecule test -s "$s" >"$logs/molecule-$s.log" 2>&1
  rc=$?
  if [ $rc -eq 0 ]; then
    echo "molecule $s: passed ($((SECONDS - t0)) s)"
  else
    echo "molecule $s: FAILED rc=$rc ($((SECONDS - t0)) s), last lines of $logs/molecule-$s.log:"
    tail -n 60 "$logs/molecule-$s.log" | sed 's/^/    /'
  fi
  return $rc
}
export -f run_one
export logs

printf '%s\n' "${scenarios[@]}" | xargs -P "$jobs" -I{} bash -c 'run_one "$@"' _ {}
