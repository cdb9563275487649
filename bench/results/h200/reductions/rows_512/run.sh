#!/usr/bin/env bash
# Rows of 512 (one device call; from the checkout: OUT=DIR bash bench/results/h200/reductions/rows_512/run.sh):
# softmax and log_softmax tuned at 131072x512, which had no table entry (84% of a copy in half
# precision, 0.86x torch.compile: dynamic_shapes/README.md), then benched there beside eager and
# torch.compile, every dtype. The same as
#   OUT=DIR STEPS="reductions:tune build reductions:forward_compile" REDUCTIONS="softmax log_softmax" \
#       REDUCE_SHAPES=131072x512 REDUCE_TUNE_S=180 bash bench/h200_check.sh
set -uo pipefail
cd "$(dirname "$0")/../../../../.."
export PYTHONPATH="$PWD"
out="${OUT:-bench/out/rows_512}"
mkdir -p "$out"
for op in softmax log_softmax; do
    timeout 180 python3 -m tilegen tune $op --scope op --jobs 14 --shapes 131072x512 > "$out/tune_$op.log" 2>&1
    echo "tune $op: $? ($(tail -1 "$out/tune_$op.log"))"
done
cp tilegen/tables/ops/softmax.json tilegen/tables/ops/log_softmax.json "$out/"
python3 -m tilegen build specs/ > "$out/build.log" 2>&1
timeout 200 python3 -m tilegen bench softmax log_softmax --shapes 131072x512 --compile --out "$out/bench" > "$out/bench.log" 2>&1
echo "bench: $? ($(tail -1 "$out/bench.log"))"
