#!/usr/bin/env bash
# The second call (the 131072x1024 entries of rows_1024/ in the tables): softmax, log_softmax and
# layer_norm tuned at 16384x1024 (log_softmax and layer_norm 0.87-0.91x torch.compile there in
# rows_1024/bench), benched there beside eager and torch.compile, and the training step of both
# shapes beside eager autograd. From the checkout: OUT=DIR bash bench/results/h200/reductions/rows_1024/r2/run.sh
set -uo pipefail
cd "$(dirname "$0")/../../../../../.."
export PYTHONPATH="$PWD"
out="${OUT:-bench/out/rows_1024_r2}"
mkdir -p "$out"
python3 -c "from tilegen.runtime import callpath; callpath.load(wait=True)" > "$out/callpath.log" 2>&1
for op in log_softmax layer_norm softmax; do
    timeout 80 python3 -m tilegen tune $op --scope op --jobs 14 --dtype float16 --dtype float32 \
        --shapes 16384x1024 > "$out/tune_$op.log" 2>&1
    echo "tune $op: $? ($(tail -1 "$out/tune_$op.log"))"
done
python3 -m tilegen build specs/ > "$out/build.log" 2>&1
timeout 120 python3 -m tilegen bench softmax log_softmax layer_norm --shapes 16384x1024 --compile \
    --out "$out/bench" > "$out/bench.log" 2>&1
echo "bench: $? ($(tail -1 "$out/bench.log"))"
timeout 120 python3 -m tilegen bench softmax log_softmax layer_norm --shapes 131072x1024,16384x1024 --backward \
    --out "$out/training" > "$out/training.log" 2>&1
echo "training: $? ($(tail -1 "$out/training.log"))"
# Elementwise shapes with an axis of size 1 ([M, 1] beside [..., M, N]), compiled (the strided kernel).
timeout 100 python3 -m pytest -q -n 8 -p no:cacheprovider tests/test_declared_shapes.py > "$out/declared_shapes_tests.log" 2>&1
echo "declared shapes tests: $? ($(tail -1 "$out/declared_shapes_tests.log"))"
