#!/usr/bin/env bash
# Build the local lab's binaries from the pinned Go modules under tools/lab/<group>/ (each group its own go.mod),
# into $GPUFLEET_CACHE/lab-bin/<group>-<hash of go.mod, go.sum, the group's own Go sources and the command list>/,
# skipping groups already built for those pins. Prints what it built and how long it took.
#
# usage: tools/lab/build.sh [group ...]      groups: kubernetes etcd kwok helm volcano hami (default: all), and
#        volcano-fix: Volcano's scheduler with the patches of tools/upstream/volcano/patches (only when named: the
#        lab runs it only when started with --volcano-fix; what the roles deploy is the stock release)
#
# Modules this workplace's module proxy refuses although they are public (volcano.sh/apis v1.15, the HAMi plugin)
# come from a read-only file proxy in shared/goproxy when that folder exists beside (or in) the checkout; go.sum
# pins them either way, so a machine that reaches the public proxy builds the same bytes without it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cache=${GPUFLEET_CACHE:-/var/cache/gpufleet}/lab-bin
mkdir -p "$cache"
source "$here/goproxy.sh"

declare -A commands=(
  [kubernetes]="k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl ./lab-devicemanager"
  [etcd]="go.etcd.io/etcd/server/v3"
  [kwok]="sigs.k8s.io/kwok/cmd/kwok"
  [helm]="helm.sh/helm/v3/cmd/helm"
  [volcano]="volcano.sh/volcano/cmd/scheduler volcano.sh/volcano/cmd/controller-manager volcano.sh/volcano/cmd/webhook-manager"
  [hami]="volcano.sh/k8s-device-plugin/cmd/vgpu volcano.sh/k8s-device-plugin/cmd/vgpu-monitor"
  [volcano-fix]="volcano.sh/volcano/cmd/scheduler"
)
# A patched group builds in its base group's folder (the same pins), with its module copied out of the module cache
# and patched (tools/upstream/patched_module.py), through `go build -modfile`.
declare -A base=([volcano-fix]=volcano)
declare -A patched=([volcano-fix]="volcano.sh/volcano $root/tools/upstream/volcano/patches")
# go-nvml loads libnvidia-ml.so.1 at run time through cgo (dlopen); everything else is static.
declare -A cgo=([hami]=1)
groups=("$@")
[ ${#groups[@]} -gt 0 ] || groups=(etcd kwok helm kubernetes volcano hami)
# A line every this many seconds while a group builds (Kubernetes takes about half an hour cold on 2 cores).
interval=${GPUFLEET_BUILD_PROGRESS_S:-60}

# build <what> <log> <command...>: runs the command with its stderr in <log> (go build -v names each package it
# compiles there), printing how long it has run and how many packages it compiled every $interval seconds; on
# failure the log's end goes to stderr.
build() {
  local what=$1 log=$2 t0=$SECONDS next rc=0
  shift 2
  "$@" 2>"$log" &
  local pid=$!
  next=$((SECONDS + interval))
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    if [ "$SECONDS" -ge "$next" ]; then
      echo "[lab-build] $what: still building, $((SECONDS - t0)) s, $(grep -c -v '^#' "$log" || true) packages compiled"
      next=$((next + interval))
    fi
  done
  wait "$pid" || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "[lab-build] $what: go build failed (rc $rc); the end of its output:" >&2
    tail -n 40 "$log" >&2
  fi
  return "$rc"
}

index=0
for group in "${groups[@]}"; do
  index=$((index + 1))
  [ -n "${commands[$group]:-}" ] || { echo "unknown group '$group' (allowed: ${!commands[*]})" >&2; exit 2; }
  dir=$here/${base[$group]:-$group}
  patch_dir=
  [ -z "${patched[$group]:-}" ] || patch_dir=${patched[$group]#* }
  # The key covers the pins, the group's own Go sources, its patches and the command list: any of them changes the
  # binaries.
  key=$( (cat "$dir/go.mod" "$dir/go.sum"; find "$dir" -name '*.go' -type f | sort | xargs cat
          [ -z "$patch_dir" ] || cat "$patch_dir"/*.patch
          echo "${commands[$group]}") | sha256sum | cut -c1-16)
  out="$cache/$group-$key"
  if [ -f "$out/.complete" ]; then
    ln -sfn "$group-$key" "$cache/$group"
    echo "[lab-build] $group: cached in $out"
    continue
  fi
  echo "[lab-build] $group ($index of ${#groups[@]}): building ${commands[$group]} (minutes on a 2-core machine)"
  t0=$SECONDS
  rm -rf "$out.tmp" && mkdir -p "$out.tmp"
  # -trimpath + no VCS stamping: the same pins give the same binaries wherever they are built.
  read -r -a pkgs <<<"${commands[$group]}"
  ldflags="-s -w"
  if [ "$group" = kubernetes ]; then
    # Without these the servers report v0.0.0, and clients that check the server version (helm's kubeVersion) fail.
    v=$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3} $1 == "k8s.io/kubernetes" {print $2}' \
      "$here/$group/go.mod" | head -1)
    minor=${v#v1.}; minor=${minor%%.*}
    ldflags="$ldflags -X k8s.io/component-base/version.gitVersion=$v -X k8s.io/component-base/version.gitMajor=1"
    ldflags="$ldflags -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
  fi
  modfile=()
  if [ -n "$patch_dir" ]; then
    modfile=("-modfile=$(python3 "$root/tools/upstream/patched_module.py" "$dir" "${patched[$group]%% *}" \
      "$patch_dir" "$cache/$group-$key.src")")
  fi
  (cd "$dir" && CGO_ENABLED=${cgo[$group]:-0} build "$group" "$out.log" go build -v "${modfile[@]}" -trimpath \
    -buildvcs=false -ldflags="$ldflags" -o "$out.tmp/" "${pkgs[@]}")
  # etcd's main package is the module root go.etcd.io/etcd/server/v3 and builds as "server": give it its name.
  if [ -f "$out.tmp/server" ]; then mv "$out.tmp/server" "$out.tmp/etcd"; fi
  touch "$out.tmp/.complete"
  rm -rf "$out" && mv "$out.tmp" "$out"
  # $cache/<group> always names the build of the current pins (older builds stay until the cache is pruned).
  ln -sfn "$group-$key" "$cache/$group"
  rm -f "$out.log"
  echo "[lab-build] $group: built $(find "$out" -maxdepth 1 -type f -perm -u+x -printf '%f ' | sort)in $((SECONDS - t0)) s"
done
