#!/usr/bin/env bash
# Install the Debian packages that the tests need and the machine lacks (runs as root; no-op when all present).
# usage: install-deps.sh [--check]
# podman+runc: test hosts (crun cannot run on hybrid cgroups v1); debootstrap: their images;
# dnf/rpm/createrepo-c: the EL9-like host and the rpm repo; dpkg-dev/apt-utils/gnupg: the signed apt repo;
# gcc: the fake NVML library and the lab's cgo build of the vGPU plugin; shellcheck: ansible-test sanity; python3-venv:
# the toolchain virtualenv; iproute2: loopback in the lab's pod network namespaces.
set -euo pipefail
packages=(podman runc debootstrap dnf rpm createrepo-c dpkg-dev apt-utils gnupg gcc make git shellcheck iproute2
  python3-venv ca-certificates)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
# --check: only say whether any is missing (exit 1), for `make bench`'s record of what a run found installed.
[ "${1:-}" = --check ] && exit 1
if [ "$(id -u)" -ne 0 ]; then
  echo "missing Debian packages: ${missing[*]} (run as root, or install them first)" >&2
  exit 2
fi
echo "[deps] installing: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# debconf preconfigures packages with apt-utils' apt-extracttemplates; while apt-utils itself is missing it says
# "delaying package configuration" and configures them after unpacking instead - the same result under the
# noninteractive frontend. Installing apt-utils first, alone and without that line, leaves the rest quiet.
if [[ " ${missing[*]} " == *" apt-utils "* ]]; then
  apt-get install -y -qq apt-utils 2>&1 >/dev/null | { grep -v '^debconf: delaying package configuration' || true; } >&2
fi
apt-get install -y -qq "${missing[@]}" >/dev/null
echo "[deps] installed in $SECONDS s" >&2
