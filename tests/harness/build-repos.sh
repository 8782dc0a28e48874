#!/usr/bin/env bash
# Build local package repositories for packages that cannot be downloaded on the CI machine
# (NVIDIA Container Toolkit, CUDA-repo driver packages), signed with a throwaway test GPG key, so that
# roles run the same signed-repo code path as in production (signed-by= / gpgcheck=1 + repo_gpgcheck=1).
#
# Output ($GPUFLEET_CACHE/repos, mounted read-only into test hosts at /srv/gpufleet-repo):
#   gpufleet-test.gpg          binary public key (apt signed-by)
#   RPM-GPG-KEY-gpufleet-test  armored public key (dnf gpgkey=)
#   fingerprint                its fingerprint: the test inventories pin it as the roles pin NVIDIA's keys
#   deb/                       flat apt repository (InRelease, Release.gpg), like NVIDIA's toolkit repo
#   rpm/                       dnf repository with signed packages and signed repomd.xml
# The stand-in packages ship small scripts, not NVIDIA software; they exist to test the install paths.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${GPUFLEET_CACHE:-/var/cache/gpufleet}
out="$cache/repos"
stamp="$out/.recipe"
want=$(cat "$here/build-repos.sh" "$here"/repo-packages/* 2>/dev/null | sha256sum | cut -c1-16)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ "${1:-}" != "--force" ]; then
  echo "[repos] $out is current ($want)" >&2
  exit 0
fi
t0=$SECONDS
if [ -d "$out/gnupg" ]; then GNUPGHOME="$out/gnupg" gpgconf --kill all 2>/dev/null || true; fi
rm -rf "$out"
mkdir -p "$out/deb" "$out/rpm" "$out/gnupg" "$out/build"
chmod 700 "$out/gnupg"
export GNUPGHOME="$out/gnupg"

gpg --batch --quiet --passphrase '' --quick-generate-key \
  'gpufleet test repository (throwaway, tests only) <test-repo@gpufleet.invalid>' rsa3072 sign never
keyid=$(gpg --batch --quiet --list-keys --with-colons | awk -F: '$1=="fpr"{print $10; exit}')
gpg --batch --export "$keyid" >"$out/gpufleet-test.gpg"
gpg --batch --armor --export "$keyid" >"$out/RPM-GPG-KEY-gpufleet-test"
printf '%s\n' "$keyid" >"$out/fingerprint"

# name|version|depends (deb syntax)|files: "path=script-name" pairs from repo-packages/
packages=(
  "libnvidia-container1|1.17.8||"
  "libnvidia-container-tools|1.17.8|libnvidia-container1 (>= 1.17.8)|/usr/bin/nvidia-container-cli=nvidia-container-cli"
  "nvidia-container-toolkit-base|1.17.8||/usr/bin/nvidia-ctk=nvidia-ctk /usr/bin/nvidia-container-runtime=nvidia-container-runtime"
  "nvidia-container-toolkit|1.17.8|nvidia-container-toolkit-base (= 1.17.8-1), libnvidia-container-tools (>= 1.17.8)|/usr/bin/nvidia-container-runtime-hook=nvidia-container-runtime-hook"
  "libnvidia-container1|1.17.5||"
  "libnvidia-container-tools|1.17.5|libnvidia-container1 (>= 1.17.5)|/usr/bin/nvidia-container-cli=nvidia-container-cli"
  "nvidia-container-toolkit-base|1.17.5||/usr/bin/nvidia-ctk=nvidia-ctk /usr/bin/nvidia-container-runtime=nvidia-container-runtime"
  "nvidia-container-toolkit|1.17.5|nvidia-container-toolkit-base (= 1.17.5-1), libnvidia-container-tools (>= 1.17.5)|/usr/bin/nvidia-container-runtime-hook=nvidia-container-runtime-hook"
)

build_deb() {  # name version depends files
  local name=$1 version=$2 depends=$3 files=$4 root="$out/build/deb-$1-$2"
  mkdir -p "$root/DEBIAN"
  {
    echo "Package: $name"
    echo "Version: $version-1"
    echo "Architecture: amd64"
    echo "Maintainer: gpufleet tests <test-repo@gpufleet.invalid>"
    [ -n "$depends" ] && echo "Depends: $depends"
    echo "Description: gpufleet test stand-in for $name"
  } >"$root/DEBIAN/control"
  install_files "$root" "$files"
  dpkg-deb --root-owner-group -Zgzip --build "$root" "$out/deb/${name}_${version}-1_amd64.deb" >/dev/null
}

rpm_requires() {  # deb depends -> rpm Requires lines
  local IFS=','; for d in $1; do
    d=$(echo "$d" | sed -e 's/^ *//' -e 's/ *$//' -e 's/[()]//g' -e 's/ = / = /')
    [ -n "$d" ] && echo "Requires: $d"
  done
}

build_rpm() {  # name version depends files [repo dir] [release] [extra spec lines]
  local name=$1 version=$2 depends=$3 files=$4 dest=${5:-rpm} release=${6:-1} extra=${7:-}
  local top="$out/build/rpm-$1-$2-$release-$dest" f
  mkdir -p "$top/SPECS" "$top/root" "$out/$dest"
  install_files "$top/root" "$files"
  {
    echo "Name: $name"; echo "Version: $version"; echo "Release: $release"
    echo "Summary: gpufleet test stand-in for $name"; echo "License: Apache-2.0"; echo "BuildArch: x86_64"
    echo "AutoReqProv: no"
    [ -n "$extra" ] && printf '%b\n' "$extra"
    rpm_requires "$depends"
    echo "%description"; echo "Test stand-in, installs small scripts only."
    echo "%install"; echo "cp -a $top/root/. %{buildroot}/"
    echo "%files"
    for f in $files; do echo "${f%%=*}"; done
  } >"$top/SPECS/$name.spec"
  rpmbuild --quiet --define "_topdir $top" --define '_build_id_links none' -bb "$top/SPECS/$name.spec" >/dev/null 2>&1 \
    || rpmbuild --define "_topdir $top" -bb "$top/SPECS/$name.spec"
  cp "$top"/RPMS/*/*.rpm "$out/$dest/"
}

install_files() {  # root "path=script ..."  (a path under /usr/lib/systemd or /etc is installed 0644)
  local root=$1 pair mode
  for pair in $2; do
    case "${pair%%=*}" in /usr/lib/systemd/*|/etc/*) mode=0644 ;; *) mode=0755 ;; esac
    install -D -m "$mode" "$here/repo-packages/${pair#*=}" "$root${pair%%=*}"
  done
}

for p in "${packages[@]}"; do
  IFS='|' read -r name version depends files <<<"$p"
  build_deb "$name" "$version" "$depends" "$files"
  build_rpm "$name" "$version" "$depends" "$files"
done

# EL9 driver path. rpm-el9: base-OS stand-ins (EPEL release, kernel-devel/headers of an EL9 kernel, dracut);
# rpm-epel: dkms; rpm-cuda: NVIDIA's CUDA repo with module streams (modules.yaml). Test hosts run this machine's
# kernel, which no EL repository has, so the EL scenario targets this EL kernel explicitly.
el_kernel_version=5.14.0 el_kernel_release=503.40.1.el9_5
build_rpm epel-release 9 "" "/etc/yum.repos.d/epel.repo=epel.repo" rpm-el9 8.el9
build_rpm kernel-devel "$el_kernel_version" "" "" rpm-el9 "$el_kernel_release" \
  "Provides: kernel-devel-uname-r = $el_kernel_version-$el_kernel_release.x86_64"
build_rpm kernel-headers "$el_kernel_version" "" "" rpm-el9 "$el_kernel_release"
build_rpm dracut 057 "" "/usr/bin/dracut=dracut" rpm-el9 53.git20240104.el9
build_rpm dkms 3.1.5 "" "/usr/sbin/dkms=dkms" rpm-epel 1.el9
for stream in 570.133.20 565.57.01; do
  for kmod in kmod-nvidia-open-dkms kmod-nvidia-latest-dkms; do
    build_rpm "$kmod" "$stream" "dkms" "/usr/src/nvidia-$stream/dkms.conf=dkms.conf" rpm-cuda 1.el9 \
      "Provides: kmod-nvidia = $stream"
  done
  build_rpm nvidia-driver "$stream" "kmod-nvidia = $stream" "" rpm-cuda 1.el9
  build_rpm nvidia-driver-cuda "$stream" "nvidia-driver = $stream" "" rpm-cuda 1.el9
  build_rpm nvidia-persistenced "$stream" "" \
    "/usr/lib/systemd/system/nvidia-persistenced.service=nvidia-persistenced.service" rpm-cuda 1.el9
done
python3 "$here/modules_yaml.py" "$out/rpm-cuda" >"$out/build/modules.yaml"

# EL10 driver path. rpm-el10: base-OS stand-ins of an EL10 kernel; rpm-cuda-el10: NVIDIA's EL10 CUDA repository,
# which has no module streams (a branch is chosen by version and held with dnf versionlock). EPEL's dkms is shared.
el10_kernel_version=6.12.0 el10_kernel_release=55.9.1.el10_0
build_rpm epel-release 10 "" "/etc/yum.repos.d/epel.repo=epel.repo" rpm-el10 2.el10_0
build_rpm kernel-devel "$el10_kernel_version" "" "" rpm-el10 "$el10_kernel_release" \
  "Provides: kernel-devel-uname-r = $el10_kernel_version-$el10_kernel_release.x86_64"
build_rpm kernel-headers "$el10_kernel_version" "" "" rpm-el10 "$el10_kernel_release"
build_rpm dracut 105 "" "/usr/bin/dracut=dracut" rpm-el10 4.el10
for stream in 570.133.20 565.57.01; do
  build_rpm kmod-nvidia-open-dkms "$stream" "dkms" "/usr/src/nvidia-$stream/dkms.conf=dkms.conf" rpm-cuda-el10 1.el10 \
    "Provides: kmod-nvidia = $stream"
  build_rpm nvidia-driver "$stream" "kmod-nvidia = $stream" "" rpm-cuda-el10 1.el10
  build_rpm nvidia-driver-cuda "$stream" "nvidia-driver = $stream" "" rpm-cuda-el10 1.el10
  build_rpm nvidia-persistenced "$stream" "" \
    "/usr/lib/systemd/system/nvidia-persistenced.service=nvidia-persistenced.service" rpm-cuda-el10 1.el10
done

# AlmaLinux's kmod path. rpm-el9-kernels: two EL9 kernels (kernel-core stand-ins providing kernel-uname-r);
# rpm-alma-nvidia-1: AlmaLinux's NVIDIA repository with a precompiled nvidia-open-kmod for the older kernel only;
# rpm-alma-nvidia-2: the same after AlmaLinux published the build for the newer one. The release package that points
# a node at the first lives in rpm-el9 (AlmaLinux's Extras on a real node).
kmod_old=503.40.1.el9_5 kmod_new=570.12.1.el9_6 kmod_driver=580.105.08
for release in "$kmod_old" "$kmod_new"; do
  build_rpm kernel-core 5.14.0 "" "" rpm-el9-kernels "$release" "Provides: kernel-uname-r = 5.14.0-$release.x86_64"
done
build_rpm almalinux-release-nvidia-driver 9 "" "/etc/yum.repos.d/almalinux-nvidia.repo=almalinux-nvidia.repo" \
  rpm-el9 1.el9
for repo in rpm-alma-nvidia-1 rpm-alma-nvidia-2; do
  build_rpm nvidia-open-kmod "$kmod_driver" "kernel-uname-r = 5.14.0-$kmod_old.x86_64" \
    "/lib/modules/5.14.0-$kmod_old.x86_64/extra/nvidia.ko.xz=nvidia.ko.xz" "$repo" "1.el9_5"
  build_rpm nvidia-driver "$kmod_driver" "" "" "$repo" 1.el9
  build_rpm nvidia-driver-cuda "$kmod_driver" "nvidia-driver = $kmod_driver" "" "$repo" 1.el9
  build_rpm nvidia-persistenced "$kmod_driver" "" \
    "/usr/lib/systemd/system/nvidia-persistenced.service=nvidia-persistenced.service" "$repo" 1.el9
done
build_rpm nvidia-open-kmod "$kmod_driver" "kernel-uname-r = 5.14.0-$kmod_new.x86_64" \
  "/lib/modules/5.14.0-$kmod_new.x86_64/extra/nvidia.ko.xz=nvidia.ko.xz" rpm-alma-nvidia-2 "2.el9_6"

# apt: flat repository, signed Release (InRelease + detached Release.gpg).
(
  cd "$out/deb"
  apt-ftparchive packages . >Packages
  gzip -9nk Packages
  apt-ftparchive -o APT::FTPArchive::Release::Origin=gpufleet-test release . >Release
  gpg --batch --yes --local-user "$keyid" --clearsign -o InRelease Release
  gpg --batch --yes --local-user "$keyid" -abs -o Release.gpg Release
)

# dnf: signed packages and signed metadata. rpmsign warns "Could not set GPG_TTY" once per package when stdin is no
# terminal (CI, make site); the key has no passphrase, so no pinentry ever needs one.
for repo in rpm rpm-el9 rpm-epel rpm-cuda rpm-el10 rpm-cuda-el10 rpm-el9-kernels rpm-alma-nvidia-1 \
    rpm-alma-nvidia-2; do
  GPG_TTY=/dev/null rpmsign --define "_gpg_name $keyid" --define "_gpg_path $GNUPGHOME" --define "__gpg $(command -v gpg)" \
    --addsign "$out/$repo"/*.rpm >/dev/null
  createrepo_c --quiet "$out/$repo"
  if [ "$repo" = rpm-cuda ]; then
    modifyrepo_c --mdtype=modules "$out/build/modules.yaml" "$out/$repo/repodata" >/dev/null
  fi
  gpg --batch --yes --local-user "$keyid" --detach-sign --armor "$out/$repo/repodata/repomd.xml"
done

rm -rf "$out/build"
gpgconf --kill all  # leave no gpg-agent running
# Test hosts read the repo as another user through a volume: make it world-readable.
chmod -R a+rX "$out"; chmod 700 "$out/gnupg"
echo "$want" >"$stamp"
echo "[repos] built $out in $((SECONDS - t0)) s (key $keyid)" >&2
