#!/usr/bin/env bash
# Build the systemd test-host images (Debian 12, Debian 13, EL9-like, EL10-like) with debootstrap + podman import.
# Each image carries a label with the hash of its recipe; an image is rebuilt only when the recipe changed.
#
# usage: build-images.sh [debian12|debian13|el9|el10 ...]     (default: all)
# env:   GPUFLEET_CACHE (default /var/cache/gpufleet)     where rootfs tarballs are built
#        GPUFLEET_DEBIAN_MIRROR                           default: the build host's own apt mirror
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${GPUFLEET_CACHE:-/var/cache/gpufleet}
work="$cache/images"
mkdir -p "$work"
export CONTAINERS_CONF=${CONTAINERS_CONF:-$here/containers.conf}

log() { printf '[images] %s\n' "$*" >&2; }

# The host's own mirror is the one known to be reachable (air-gapped sites point it at their mirror).
host_mirror() {
  local uri
  uri=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | grep -v security | head -n1)
  [ -n "$uri" ] || uri=$(awk '$1=="deb" && $0 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null)
  [ -n "$uri" ] || { echo "cannot find a Debian mirror in the host's apt sources; set GPUFLEET_DEBIAN_MIRROR" >&2; exit 2; }
  echo "$uri"
}
mirror=${GPUFLEET_DEBIAN_MIRROR:-$(host_mirror)}
security_mirror=${GPUFLEET_DEBIAN_SECURITY_MIRROR:-${mirror%/debian}/debian-security}

recipe_hash() {  # $1 = image key; the hash covers this script and the image's own recipe files
  { cat "$here/build-images.sh"; case "$1" in el9) cat "$here/el9/"* ;; el*) cat "$here/el9/Containerfile" "$here/$1/"* ;; esac
    echo "$1 $mirror"; } | sha256sum | cut -c1-16
}

image_is_current() {  # $1 = image ref, $2 = wanted hash
  local have
  have=$(podman image inspect --format '{{ index .Labels "io.gpufleet.recipe" }}' "$1" 2>/dev/null || true)
  [ "$have" = "$2" ]
}

build_debian() {  # $1 = suite, $2 = image ref, $3 = hash
  local suite=$1 ref=$2 hash=$3 root="$work/rootfs-$1" t0=$SECONDS
  rm -rf "$root"
  log "debootstrap $suite from $mirror"
  debootstrap --variant=minbase \
    --include=systemd,systemd-sysv,dbus,python3,python3-apt,sudo,iproute2,procps,ca-certificates,gnupg,kmod,apt-utils \
    "$suite" "$root" "$mirror" >"$work/debootstrap-$suite.log" 2>&1 \
    || { tail -n 30 "$work/debootstrap-$suite.log" >&2; exit 1; }
  cat >"$root/etc/apt/sources.list" <<EOF
deb $mirror $suite main
deb $mirror $suite-updates main
deb $security_mirror $suite-security main
EOF
  # The host's apt settings (e.g. Check-Valid-Until for snapshot mirrors) must hold inside too.
  cp /etc/apt/apt.conf.d/99* "$root/etc/apt/apt.conf.d/" 2>/dev/null || true
  # Trust the same extra CAs as the build host (TLS-intercepting proxies), for pip inside the hosts.
  if compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
    chroot "$root" update-ca-certificates >/dev/null 2>&1 || true
    printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' >"$root/etc/pip.conf"
  fi
  # Units that cannot work in an unprivileged container.
  chroot "$root" systemctl mask systemd-udevd.service systemd-udevd-kernel.socket systemd-udevd-control.socket \
    getty@tty1.service console-getty.service systemd-remount-fs.service systemd-logind.service \
    sys-kernel-debug.mount sys-kernel-tracing.mount >/dev/null 2>&1
  chroot "$root" systemctl set-default multi-user.target >/dev/null 2>&1
  # Keep fresh package lists: an empty lists dir with a recent mtime fools apt's cache_valid_time.
  chroot "$root" apt-get update -qq
  chroot "$root" apt-get clean
  : >"$root/etc/machine-id"
  tar -C "$root" -c . | podman import --quiet \
    --change 'CMD ["/sbin/init"]' --change 'STOPSIGNAL=SIGRTMIN+3' \
    --change "LABEL io.gpufleet.recipe=$hash" - "$ref" >/dev/null
  rm -rf "$root"
  log "built $ref in $((SECONDS - t0)) s"
}

# The EL-like images share one Containerfile (el9/); each release has its own os-release, redhat-release and
# release package (el9/, el10/).
build_el() {  # $1 = key (el9, el10), $2 = image ref, $3 = hash
  local key=$1 ref=$2 hash=$3 ctx="$work/$1-context" t0=$SECONDS
  rm -rf "$ctx"; mkdir -p "$ctx/rpmbuild"
  cp "$here/$key/"* "$ctx/"
  [ -f "$ctx/Containerfile" ] || cp "$here/el9/Containerfile" "$ctx/"
  rpmbuild --quiet --define "_topdir $ctx/rpmbuild" -bb "$here/$key/almalinux-release.spec" >/dev/null
  cp "$ctx"/rpmbuild/RPMS/noarch/*.rpm "$ctx/"
  podman build --quiet --label "io.gpufleet.recipe=$hash" -t "$ref" -f "$ctx/Containerfile" "$ctx" >/dev/null
  rm -rf "$ctx"
  log "built $ref in $((SECONDS - t0)) s"
}

ensure() {  # $1 = key
  local key=$1 ref hash
  case "$key" in
    debian12) ref=localhost/gpufleet-debian:12 ;;
    debian13) ref=localhost/gpufleet-debian:13 ;;
    el9) ref=localhost/gpufleet-el9:9 ;;
    el10) ref=localhost/gpufleet-el10:10 ;;
    *) echo "unknown image '$key' (allowed: debian12 debian13 el9 el10)" >&2; exit 2 ;;
  esac
  case "$key" in el*) ensure debian12 ;; esac
  hash=$(recipe_hash "$key")
  case "$key" in
    el*) hash="$hash-$(podman image inspect --format '{{ .Id }}' localhost/gpufleet-debian:12 | cut -c1-12)" ;;
  esac
  if image_is_current "$ref" "$hash"; then
    log "$ref is current ($hash)"
    return
  fi
  case "$key" in
    debian12) build_debian bookworm "$ref" "$hash" ;;
    debian13) build_debian trixie "$ref" "$hash" ;;
    el9|el10) build_el "$key" "$ref" "$hash" ;;
  esac
}

targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(debian12 debian13 el9 el10)
# The two debootstraps are mostly network/dpkg bound: run them side by side, then the EL-like images (built on
# Debian 12).
pids=()
for t in "${targets[@]}"; do
  case "$t" in debian12|debian13) ensure "$t" & pids+=($!) ;; esac
done
for p in "${pids[@]}"; do wait "$p"; done
for t in "${targets[@]}"; do
  case "$t" in debian12|debian13) ;; *) ensure "$t" ;; esac
done
