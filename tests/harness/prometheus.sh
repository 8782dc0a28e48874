#!/usr/bin/env bash
# Debian's prometheus package (prometheus and promtool), unpacked into the cache rather than installed: an installed
# package would enable and start a Prometheus service on :9090 of the machine. Prints the directory holding
# prometheus and promtool. The lab's Prometheus and the promtool tests use it.
set -euo pipefail
cache=${GPUFLEET_CACHE:-/var/cache/gpufleet}/prometheus
version=$(apt-cache policy prometheus 2>/dev/null | sed -n 's/^  Candidate: //p')
if [ -z "$version" ] || [ "$version" = "(none)" ]; then
  apt-get update -qq >&2
  version=$(apt-cache policy prometheus | sed -n 's/^  Candidate: //p')
fi
dest="$cache/$version"
if [ ! -x "$dest/usr/bin/promtool" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  # As root apt drops to its _apt user, which cannot write a private temporary directory.
  (cd "$work" && apt-get download -qq -o APT::Sandbox::User=root "prometheus=$version" >&2)
  rm -rf "$dest.tmp" && mkdir -p "$dest.tmp"
  dpkg-deb -x "$work"/prometheus_*.deb "$dest.tmp"
  mv -T "$dest.tmp" "$dest"
  echo "[prometheus] unpacked Debian's prometheus $version into $dest" >&2
fi
echo "$dest/usr/bin"
