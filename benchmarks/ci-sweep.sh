#!/usr/bin/env bash
# The small sweep that CI gates against benchmarks/baseline-cpu.csv (one source
# of truth for both: the gate refuses results whose run specs differ).
#   benchmarks/ci-sweep.sh OUT_DIR [extra sweep flags, e.g. --repeats 3]
# gpt tiny on 2 CPU ranks, {jit, periodic-async:3} x {kill, nccl-hang}, 12 steps,
# fault at step 8: 4 runs + 1 shared reference, about 2 minutes on 2 cores.
set -euo pipefail
out="$1"; shift
exec jitbench sweep --workloads gpt --sizes gpt=tiny --strategies jit,periodic-async:3 \
    --faults kill,nccl-hang --steps 12 --fault-step 8 --batch-size 4 --out "$out" "$@"
