#!/usr/bin/env bash
# Small float32 rows (one device call; from the checkout: OUT=DIR bash bench/results/h200/reductions/small_rows/run.sh):
# log_softmax in float32 ran behind eager at 8192x128, 1024x1024 and 256x4096 (0.86-0.94x,
# retime_961fb20/forward: no table entry for those keys, the nearest one's config). Tuned there
# (float32: one dtype an element size), then benched at those shapes beside eager and
# torch.compile, every dtype.
set -uo pipefail
cd "$(dirname "$0")/../../../../.."
export PYTHONPATH="$PWD"
out="${OUT:-bench/out/small_rows}"
mkdir -p "$out"
timeout 300 python3 -m tilegen tune log_softmax --scope op --jobs 14 --dtype float32 \
    --shapes 8192x128,1024x1024,256x4096 > "$out/tune_log_softmax.log" 2>&1
echo "tune log_softmax: $? ($(tail -1 "$out/tune_log_softmax.log"))"
cp tilegen/tables/ops/log_softmax.json "$out/"
python3 -m tilegen build specs/ > "$out/build.log" 2>&1
timeout 200 python3 -m tilegen bench log_softmax --shapes 8192x128,1024x1024,256x4096 --compile \
    --out "$out/bench" > "$out/bench.log" 2>&1
echo "bench: $? ($(tail -1 "$out/bench.log"))"
