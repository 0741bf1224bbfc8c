#!/usr/bin/env bash
# The model validation campaign (issue 6): seeded Poisson faults (mean 8 steps
# between failures, random ranks) against jit and periodic:4 on both reference
# workloads, two seeds; then model vs measured wasted GPU time per group.
#   benchmarks/validation-sweep.sh OUT_DIR [extra sweep flags]
# 16 runs + 4 references; writes OUT_DIR/validation.csv and its load/date/machine in
# OUT_DIR/validation.csv.meta.json (see benchmarks/README.md).
set -euo pipefail
out="$1"; shift
here="$(dirname "$0")"
python "$here/sweep_meta.py" start "${out%/}.meta-start.json"   # load, date (README figures)
jitbench sweep --workloads gpt,resnet --strategies jit,periodic:4 --faults kill,nccl-hang \
    --seeds 0,1 --steps 32 --fault-mtbf-steps 8 --out "$out" "$@"
jitbench validate --csv "$out/validation.csv" "$out"
python "$here/sweep_meta.py" end "${out%/}.meta-start.json" "$out/validation.csv"
