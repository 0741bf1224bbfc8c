#!/usr/bin/env bash
# One short script for a lent GPU machine: record the machine, the NVML health
# check, run the GPU tests (real NVML probe, side-stream copy behind a spinning
# kernel, NCCL runs), one single-GPU run of the main job and the JIT runtime's
# per-step cost on the training thread with the default GPT on the GPU (issue 16:
# <= 50 us; benchmarks/runtime_step_cost.py; the CUDA RNG capture after CUDA initialises is
# tests/gpu/test_cuda_rng.py). Results go to ${OUT:-gpu-results}/.
# Usage (repository root): OUT=/some/dir tests/gpu/device_checks.sh
# The GPU machine reaches no package registry and has its own torch: jitbench
# is installed without dependencies (the image holds them) and is also put on
# PYTHONPATH, so a failed install does not stop the checks.
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-gpu-results}"
mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
python -m pip install -q --no-deps --no-build-isolation -e . > "$out/pip.log" 2>&1 \
    || echo "pip install failed (PYTHONPATH used instead): $(tail -n 1 "$out/pip.log")"
{ nvidia-smi; python -c "import torch, sys; print('python', sys.version.split()[0]); \
print('torch', torch.__version__, 'cuda', torch.version.cuda, 'devices', torch.cuda.device_count(), \
'nccl', torch.cuda.nccl.version() if torch.cuda.is_available() else None)"; } \
    > "$out/machine.txt" 2>&1
tail -n 1 "$out/machine.txt"
python tests/gpu/check_gpu.py "$out/nvml.json" 2 > "$out/check_gpu.txt" 2>&1
echo "check_gpu exit $?"
timeout "${GPU_TEST_TIMEOUT:-300}" python -m pytest tests/gpu -v -p no:cacheprovider \
    -o addopts="" --junitxml="$out/gpu-tests.xml" > "$out/gpu-tests.txt" 2>&1
rc=$?
tail -n 25 "$out/gpu-tests.txt"
# the main job's workload on one GPU under jit (NCCL, 1 rank), with its summary
timeout "${GPU_RUN_TIMEOUT:-150}" python -m jitbench.cli run --backend nccl --nproc 1 \
    --fault none --steps 30 --strategy periodic:10 --no-reference --overwrite \
    --run-dir "$out/run1" --json > "$out/run1.json" 2> "$out/run1.err"
echo "single-GPU run exit $?"; tail -c 1500 "$out/run1.json"; tail -n 5 "$out/run1.err"
cp "$out/run1/agent.log" "$out/run1-agent.log" 2>/dev/null; rm -rf "$out/run1"
# the runtime's own cost per step on the training thread, default GPT on the GPU
timeout "${GPU_COST_TIMEOUT:-120}" python benchmarks/runtime_step_cost.py --device cuda \
    --steps 300 > "$out/runtime-step-cost.txt" 2>&1
echo "runtime step cost exit $?"; cat "$out/runtime-step-cost.txt"
exit $rc
