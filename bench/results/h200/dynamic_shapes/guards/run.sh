#!/usr/bin/env bash
# The guard rule under torch.compile (runtime.sizes.known) compiled and timed, in one device call:
#   OUT=DIR bash bench/results/h200/dynamic_shapes/guards/run.sh
# tests.log: the docs' snippets, the dim= and dynamic-shape tests and the runtime's size tests,
# compiled; dynamic_shapes.log: bench/probes/dynamic_shapes.py; compiled_kernels.log:
# bench/probes/compiled_kernels.py for layer_norm at 16384x1024 half, with Inductor's output code;
# then, with the time left, softmax and log_softmax tuned at 131072x512 (their tables land in
# $OUT) and benched there. TOTAL (seconds, default 330) bounds the whole run; each step starts
# only with time left for it: at most six files under $OUT.
set -uo pipefail
cd "$(dirname "$0")/../../../../.."
export PYTHONPATH="$PWD"
out="${OUT:-bench/out/guards}"
mkdir -p "$out"
start=$SECONDS
total=${TOTAL:-330}
timeout 150 python3 -m pytest -q -n 16 -p no:cacheprovider --tb=short tests/test_docs.py tests/test_reduced_axis.py \
    tests/test_runtime.py generated/tests/test_softmax.py generated/tests/test_log_softmax.py \
    generated/tests/test_rms_norm.py generated/tests/test_layer_norm.py generated/tests/test_add_rms_norm.py \
    generated/tests/test_matmul_relu.py generated/tests/test_add.py generated/tests/test_bmm.py \
    -k "docs or reduced or another or dynamic or traced or guard" > "$out/tests.log" 2>&1
echo "tests: $? ($(tail -1 "$out/tests.log"))"
timeout 100 python3 bench/probes/dynamic_shapes.py /tmp/dynamic_shapes > "$out/dynamic_shapes.log" 2>&1
echo "dynamic_shapes: $?"
TORCH_LOGS=output_code timeout 60 python3 bench/probes/compiled_kernels.py layer_norm 16384x1024 float16 \
    > "$out/compiled_kernels.log" 2>&1
echo "compiled_kernels: $?"
for op in softmax log_softmax; do
    left=$((total - 40 - (SECONDS - start)))
    [ "$left" -gt 45 ] || break
    timeout $((left < 70 ? left - 15 : 55)) python3 -m tilegen tune "$op" --scope op --jobs 14 \
        --shapes 131072x512 > /tmp/tune_$op.log 2>&1
    echo "tune $op: $? ($(tail -1 /tmp/tune_$op.log))"
    cp "tilegen/tables/ops/$op.json" "$out/" 2>/dev/null
done
left=$((total - (SECONDS - start)))
if [ "$left" -gt 30 ]; then
    python3 -m tilegen build specs/ > /dev/null 2>&1
    timeout $((left - 5)) python3 -m tilegen bench softmax log_softmax --shapes 131072x512 --compile \
        --out /tmp/bench > "$out/bench.log" 2>&1
    echo "bench: $? ($(tail -1 "$out/bench.log"))"
fi
