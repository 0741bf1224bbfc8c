#!/usr/bin/env bash
# One short script for a lent GPU machine: install, record the NVML health
# check, run the GPU tests (real NVML probe, side-stream copy behind a spinning
# kernel, NCCL runs). Results go to ${OUT:-gpu-results}/.
# Usage (repository root): OUT=/some/dir tests/gpu/device_checks.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-gpu-results}"
mkdir -p "$out"
python -m pip install -q -e '.[test]' > "$out/pip.log" 2>&1 || { echo "pip failed"; tail "$out/pip.log"; exit 1; }
nvidia-smi > "$out/nvidia-smi.txt" 2>&1
python tests/gpu/check_gpu.py "$out/nvml.json" 2 > "$out/check_gpu.txt" 2>&1
echo "check_gpu exit $?"
timeout 480 python -m pytest tests/gpu -v -p no:cacheprovider --junitxml="$out/gpu-tests.xml" \
    > "$out/gpu-tests.txt" 2>&1
rc=$?
tail -n 25 "$out/gpu-tests.txt"
exit $rc
