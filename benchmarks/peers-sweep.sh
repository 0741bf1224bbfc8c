#!/usr/bin/env bash
# The peers table (benchmarks/peers-cpu.csv): jitbench's jit and periodic:5 beside
# torchft and NVRx (nvrx = nvrx:5) under a kill and a hang, gpt (default size) on
# 2 CPU ranks, 60 steps, fault at step 14 on rank 1: 8 runs + 2 references (the
# torchft runs have their own), about 4-5 minutes on 2 cores. Needs the extra:
#   pip install -e '.[peers]'
#   benchmarks/peers-sweep.sh OUT_DIR [extra sweep flags]
# 60 steps, not the default 24: torchft's replacement needs 2-5 s to start, and
# with fewer steps left after the fault the survivor finishes first (recovery_s
# is then empty: the world never trains together again).
set -euo pipefail
out="$1"; shift
exec jitbench sweep --workloads gpt --strategies jit,torchft,nvrx,periodic:5 \
    --faults kill,nccl-hang --steps 60 --fault-step 14 --out "$out" "$@"
