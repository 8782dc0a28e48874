#!/usr/bin/env bash
# Run nvml_info, gpu_verify and its health timer's check against the REAL NVIDIA GPU(s) of this machine and write the result to a file.
# Needs only this repository, python3 with venv, and pip access (or a pip mirror). No GPU is simulated here.
#
# usage: tests/gpu/run-real-gpu.sh [OUTPUT.json]          (default: ./gpu-result.json)
# env:   GPU_VERIFY_VARS   extra -e JSON for gpu_verify, e.g. '{"gpu_verify_expected_count": 1}'
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$(realpath -m "${1:-gpu-result.json}")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

python3 -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet ansible-core==2.19.14 nvidia-ml-py==13.615.71 prometheus-client==0.26.0
mkdir -p "$work/collections/ansible_collections/gpufleet"
ln -s "$root" "$work/collections/ansible_collections/gpufleet/vgpu"

export ANSIBLE_COLLECTIONS_PATH="$work/collections" ANSIBLE_STDOUT_CALLBACK=ansible.builtin.default
"$work/venv/bin/ansible-playbook" -i localhost, -c local \
  -e "ansible_python_interpreter=$work/venv/bin/python" -e "gpu_verify_fail_nodes=false" \
  -e "${GPU_VERIFY_VARS:-{\}}" \
  -e "gpu_result_file=$out" -e "gpu_scratch=$work/scratch" \
  "$root/tests/gpu/real-gpu.yml"
echo "result written to $out"
