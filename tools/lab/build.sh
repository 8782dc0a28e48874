#!/usr/bin/env bash
# Build the local lab's binaries from the pinned Go modules under tools/lab/<group>/ (each group its own go.mod),
# into $GPUFLEET_CACHE/lab-bin/<group>-<hash of go.mod+go.sum>/, skipping groups already built for those pins.
# Prints what it built and how long it took.
#
# usage: tools/lab/build.sh [group ...]      groups: kubernetes etcd kwok helm volcano (default: all)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${GPUFLEET_CACHE:-/var/cache/gpufleet}/lab-bin
mkdir -p "$cache"

declare -A commands=(
  [kubernetes]="k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler"
  [etcd]="go.etcd.io/etcd/server/v3"
  [kwok]="sigs.k8s.io/kwok/cmd/kwok"
  [helm]="helm.sh/helm/v3/cmd/helm"
  [volcano]="volcano.sh/volcano/cmd/scheduler volcano.sh/volcano/cmd/controller-manager volcano.sh/volcano/cmd/webhook-manager"
)
groups=("$@")
[ ${#groups[@]} -gt 0 ] || groups=(etcd kwok helm kubernetes volcano)

for group in "${groups[@]}"; do
  [ -n "${commands[$group]:-}" ] || { echo "unknown group '$group' (allowed: ${!commands[*]})" >&2; exit 2; }
  # The key covers the pins and the command list, so adding a command rebuilds the group.
  key=$( (cat "$here/$group/go.mod" "$here/$group/go.sum"; echo "${commands[$group]}") | sha256sum | cut -c1-16)
  out="$cache/$group-$key"
  if [ -f "$out/.complete" ]; then
    ln -sfn "$group-$key" "$cache/$group"
    echo "[lab-build] $group: cached in $out"
    continue
  fi
  t0=$SECONDS
  rm -rf "$out.tmp" && mkdir -p "$out.tmp"
  # -trimpath + no VCS stamping: the same pins give the same binaries wherever they are built.
  read -r -a pkgs <<<"${commands[$group]}"
  ldflags="-s -w"
  if [ "$group" = kubernetes ]; then
    # Without these the servers report v0.0.0, and clients that check the server version (helm's kubeVersion) fail.
    v=$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3}' "$here/$group/go.mod")
    minor=${v#v1.}; minor=${minor%%.*}
    ldflags="$ldflags -X k8s.io/component-base/version.gitVersion=$v -X k8s.io/component-base/version.gitMajor=1"
    ldflags="$ldflags -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
  fi
  (cd "$here/$group" && CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags="$ldflags" -o "$out.tmp/" "${pkgs[@]}")
  # etcd's main package is the module root go.etcd.io/etcd/server/v3 and builds as "server": give it its name.
  if [ -f "$out.tmp/server" ]; then mv "$out.tmp/server" "$out.tmp/etcd"; fi
  touch "$out.tmp/.complete"
  rm -rf "$out" && mv "$out.tmp" "$out"
  # $cache/<group> always names the build of the current pins (older builds stay until the cache is pruned).
  ln -sfn "$group-$key" "$cache/$group"
  echo "[lab-build] $group: built $(find "$out" -maxdepth 1 -type f -perm -u+x -printf '%f ')in $((SECONDS - t0)) s"
done
