#!/usr/bin/env bash
# Backward kernels without a table entry of their own where the training step was level with eager
# (retime_961fb20/backward): layer_norm float32 at 4096x32768 (1.01x; no element-size-4 entry at
# N = 32768), log_softmax half precision at 512x32768 (0.79-0.90x; no entry for 512 rows). Tuned,
# then the training step benched there beside eager autograd, every dtype.
# One device call, from the checkout: OUT=DIR bash bench/results/h200/reductions/backward_gaps/run.sh
set -uo pipefail
cd "$(dirname "$0")/../../../../.."
export PYTHONPATH="$PWD"
out="${OUT:-bench/out/backward_gaps}"
mkdir -p "$out"
timeout 150 python3 -m tilegen tune layer_norm --backward --jobs 14 --dtype float32 --shapes 4096x32768 \
    > "$out/tune_layer_norm.log" 2>&1
echo "tune layer_norm: $? ($(tail -1 "$out/tune_layer_norm.log"))"
cp tilegen/tables/ops/layer_norm_backward.json "$out/"
timeout 110 python3 -m tilegen tune log_softmax --backward --jobs 14 --dtype float16 --shapes 512x32768 \
    > "$out/tune_log_softmax.log" 2>&1
echo "tune log_softmax: $? ($(tail -1 "$out/tune_log_softmax.log"))"
cp tilegen/tables/ops/log_softmax_backward.json "$out/"
python3 -m tilegen build specs/ > "$out/build.log" 2>&1
timeout 120 python3 -m tilegen bench layer_norm log_softmax --backward --shapes 4096x32768,512x32768 \
    --out "$out/bench" > "$out/bench.log" 2>&1
echo "bench: $? ($(tail -1 "$out/bench.log"))"
