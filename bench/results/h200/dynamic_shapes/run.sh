#!/usr/bin/env bash
# Dynamic shapes and `dim=` results, from the checkout on the GPU machine, in one device call:
#   OUT=DIR bash bench/results/h200/dynamic_shapes/run.sh
# tests.log: the docs' snippets (the README's dynamic export), the dim= and dynamic-shape tests,
# compiled; dynamic_shapes.txt: bench/probes/dynamic_shapes.py; plain/: bench/probes/reduced_axis.py
# --plain (dim= results now contiguous, as PyTorch's); then, with the time left, softmax and
# log_softmax tuned at 131072x512 (rows of 512: no table entry) and benched there. TOTAL (seconds,
# default 300) bounds the whole run; each step starts only with time left for it, and writes its
# files as it goes (a call cut short still returns what was done): eight files under $OUT.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
export PYTHONPATH="$PWD"
out="${OUT:-bench/out/dynamic_shapes}"
mkdir -p "$out"
start=$SECONDS
total=${TOTAL:-300}
timeout 150 python3 -m pytest -q -n 16 -p no:cacheprovider --tb=short tests/test_docs.py tests/test_reduced_axis.py \
    generated/tests/test_softmax.py generated/tests/test_log_softmax.py generated/tests/test_rms_norm.py \
    generated/tests/test_layer_norm.py generated/tests/test_add_rms_norm.py generated/tests/test_matmul_relu.py \
    generated/tests/test_add.py -k "docs or reduced or another or dynamic" > "$out/tests.log" 2>&1
echo "tests: $? ($(tail -1 "$out/tests.log"))"
timeout 120 python3 bench/probes/dynamic_shapes.py /tmp/dynamic_shapes > "$out/dynamic_shapes.log" 2>&1
echo "dynamic_shapes: $?"
left=$((total - (SECONDS - start)))
if [ "$left" -gt 40 ]; then
    timeout $((left < 90 ? left - 10 : 90)) python3 bench/probes/reduced_axis.py /tmp/reduced_axis_plain --plain \
        > "$out/reduced_axis_plain.txt" 2>&1
    echo "reduced_axis --plain: $?"
fi
for op in softmax log_softmax; do
    left=$((total - 30 - (SECONDS - start)))
    [ "$left" -gt 60 ] || break
    timeout $((left < 80 ? left - 20 : 60)) python3 -m tilegen tune "$op" --scope op --jobs 14 \
        --shapes 131072x512 > "$out/tune_$op.log" 2>&1
    echo "tune $op: $? ($(tail -1 "$out/tune_$op.log"))"
    cp "tilegen/tables/ops/$op.json" "$out/" 2>/dev/null
done
left=$((total - (SECONDS - start)))
if [ "$left" -gt 30 ]; then
    python3 -m tilegen build specs/ > /dev/null 2>&1
    timeout $((left - 5)) python3 -m tilegen bench softmax log_softmax --shapes 131072x512 --compile \
        --out /tmp/bench > "$out/bench.log" 2>&1
    echo "bench: $? ($(tail -1 "$out/bench.log"))"
fi
