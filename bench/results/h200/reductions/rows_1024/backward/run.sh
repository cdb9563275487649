#!/usr/bin/env bash
# The norms' backward at rows of 1024, tuned: two commands run on the machine r2/ had just used
# (warm; the tree of r2/ with its forward entries), each as one device call. From the checkout:
#   OUT=DIR bash bench/results/h200/reductions/rows_1024/backward/run.sh
set -uo pipefail
cd "$(dirname "$0")/../../../../../.."
export PYTHONPATH="$PWD"
out="${OUT:-bench/out/rows_1024_backward}"
mkdir -p "$out/norms"
python3 -c "from tilegen.runtime import callpath; callpath.load(wait=True)"
# 1. layer_norm (its half-precision step 0.67-0.75x eager in r2/training: no backward entry for rows of 1024)
timeout 150 python3 -m tilegen tune layer_norm --backward --jobs 14 --dtype float16 --shapes 131072x1024,16384x1024 \
    > "$out/tune_backward_layer_norm.log" 2>&1
python3 -m tilegen build specs/ > "$out/build.log" 2>&1
timeout 100 python3 -m tilegen bench layer_norm --backward --shapes 131072x1024,16384x1024 \
    --out "$out/training_layer_norm" > "$out/training_layer_norm.log" 2>&1
# 2. rms_norm and add_rms_norm likewise at 131072x1024 (a fresh copy of the tree: step 1's entry not in it)
for op in rms_norm add_rms_norm; do
    timeout 70 python3 -m tilegen tune $op --backward --jobs 14 --dtype float16 --shapes 131072x1024 \
        > "$out/norms/tune_backward_$op.log" 2>&1
done
python3 -m tilegen build specs/ > "$out/norms/build.log" 2>&1
timeout 90 python3 -m tilegen bench rms_norm add_rms_norm --backward --shapes 131072x1024 \
    --out "$out/norms/training" > "$out/norms/training.log" 2>&1
