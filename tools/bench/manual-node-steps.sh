#!/bin/sh
# The article's manual node preparation (shared/reference/article-summary.md, "Node preparation"), replayed as a
# plain script on an EL9-like test host: the same commands, with the signed local stand-in repositories in place of
# NVIDIA's (unreachable here) and without the reboot. Benchmark B1 runs it on hosts gpufleet has configured and
# counts what a rerun restarts and rewrites.
set -eu
REPO=${GPUFLEET_REPO:-file:///srv/gpufleet-repo}

# Driver
dnf install -y epel-release
dnf install -y "kernel-devel-${KERNEL_RELEASE:-$(uname -r)}" kernel-headers dkms
cat > /etc/yum.repos.d/cuda-rhel9.repo <<REPO
[cuda-rhel9-x86_64]
name=cuda-rhel9-x86_64
baseurl=$REPO/rpm-cuda
gpgcheck=1
gpgkey=$REPO/RPM-GPG-KEY-gpufleet-test
REPO
# The stand-in repository names no default profile (NVIDIA's does: "default"), so it is named here.
dnf module install -y nvidia-driver:latest-dkms/default

# NVIDIA Container Toolkit
cat > /etc/yum.repos.d/nvidia-container-toolkit.repo <<REPO
[nvidia-container-toolkit]
name=nvidia-container-toolkit
baseurl=$REPO/rpm
gpgcheck=1
gpgkey=$REPO/RPM-GPG-KEY-gpufleet-test
REPO
dnf install -y nvidia-container-toolkit

# containerd
${NVIDIA_CTK:-nvidia-ctk} runtime configure --runtime=containerd
systemctl restart containerd
