#!/usr/bin/env bash
# Rows of 1024 with PER_SM on offer (one device call; from the checkout: OUT=DIR bash bench/results/h200/reductions/rows_1024/run.sh):
# softmax, log_softmax and layer_norm tuned at 131072x1024 (82-85% of a copy in half precision,
# forward_copy/), then benched at 131072x1024 and 16384x1024 beside eager and torch.compile, every dtype.
set -uo pipefail
cd "$(dirname "$0")/../../../../.."
export PYTHONPATH="$PWD"
out="${OUT:-bench/out/rows_1024}"
mkdir -p "$out"
python3 -c "from tilegen.runtime import callpath; callpath.load(wait=True)" > "$out/callpath.log" 2>&1
for op in softmax log_softmax layer_norm; do
    timeout 90 python3 -m tilegen tune $op --scope op --jobs 14 --dtype float16 --dtype float32 \
        --shapes 131072x1024 > "$out/tune_$op.log" 2>&1
    echo "tune $op: $? ($(tail -1 "$out/tune_$op.log"))"
done
cp -r tilegen/tables/ops "$out/"
python3 -m tilegen build specs/ > "$out/build.log" 2>&1
timeout 200 python3 -m tilegen bench softmax log_softmax layer_norm --shapes 131072x1024,16384x1024 --compile \
    --out "$out/bench" > "$out/bench.log" 2>&1
echo "bench: $? ($(tail -1 "$out/bench.log"))"
