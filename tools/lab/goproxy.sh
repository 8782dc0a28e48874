# shellcheck shell=bash
# Sourced by the scripts that build the lab's Go modules. Modules this workplace's module proxy refuses although
# they are public (volcano.sh/apis v1.15, the HAMi plugin) come from a read-only file proxy in shared/goproxy when
# that folder exists beside (or in) the checkout; go.sum pins them either way, so a machine that reaches the public
# proxy builds the same bytes without it.
for _shared in "$(dirname "${BASH_SOURCE[0]}")/../../shared/goproxy" "$(dirname "${BASH_SOURCE[0]}")/../../../shared/goproxy"; do
  if [ -d "$_shared" ]; then
    GOPROXY="file://$(cd "$_shared" && pwd),$(go env GOPROXY)"
    export GOPROXY
    break
  fi
done
unset _shared
