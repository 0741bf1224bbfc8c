#!/usr/bin/env bash
# The peers table (benchmarks/peers-cpu.csv): jitbench's jit, jit-inprocess, periodic:5 and
# the in-memory baseline inmem:1 beside
# torchft and NVRx (nvrx = nvrx:5) under a kill and a hang, gpt (default size) on
# 2 CPU ranks, 60 steps, fault at step 14 on rank 1: 12 runs + 2 references (the
# torchft runs have their own), about 8-10 minutes on 2 cores. Needs the extra:
#   pip install -e '.[peers]'
#   benchmarks/peers-sweep.sh OUT_DIR [extra sweep flags]
# 60 steps, not the default 24: torchft's replacement needs 2-5 s to start, and
# with fewer steps left after the fault the survivor finishes first (recovery_s
# is then empty: the world never trains together again). The load before and after
# goes to OUT_DIR/results.csv.meta.json (commit it as peers-cpu.csv.meta.json).
set -euo pipefail
out="$1"; shift
here="$(dirname "$0")"
python "$here/sweep_meta.py" start "${out%/}.meta-start.json"   # load, date (README figures)
jitbench sweep --workloads gpt --strategies jit,jit-inprocess,torchft,nvrx,inmem:1,periodic:5 \
    --faults kill,nccl-hang --steps 60 --fault-step 14 --out "$out" "$@"
python "$here/sweep_meta.py" end "${out%/}.meta-start.json" "$out/results.csv"
