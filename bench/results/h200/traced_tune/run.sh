#!/bin/bash
# Traced twins for the matmul kind's descriptor entries (4096^3 and 8192^3, element size 2), tuned
# through pointers only (`tilegen tune --traced`), then matmul_relu benched beside eager and
# torch.compile there (its 'in compile' column: the op inside torch.compile, launching the twin).
#   OUT=... bash bench/results/h200/traced_tune/run.sh   (PYTHONPATH at the checkout)
set -u
export PYTHONPATH=$PWD
out=${OUT:-/tmp/traced_tune}; mkdir -p "$out"
if [[ ${STAGE:-1} == 1 ]]; then
timeout 330 python3 -m tilegen tune matmul --traced --dtype float16 --jobs 14 \
    --shapes 4096x4096x4096,8192x8192x8192 > "$out/tune_matmul.log" 2>&1
echo "tune: $?"
cp tilegen/tables/matmul.json "$out/matmul.json"
python3 -m tilegen build specs/ > "$out/build.log" 2>&1
echo "build: $?"
timeout 200 python3 -m tilegen bench matmul_relu matmul --compile --dtype float16 --shapes 4096x4096x4096,8192x8192x8192 \
    --out "$out/bench" > "$out/bench.log" 2>&1
echo "bench: $?"
fi
# Second call: matmul_bias_gelu's own descriptor entries (tables/ops/matmul_bias_gelu.json).
#   OUT=... STAGE=2 bash bench/results/h200/traced_tune/run.sh
if [[ ${STAGE:-1} == 2 ]]; then
    timeout 300 python3 -m tilegen tune matmul_bias_gelu --scope op --traced --dtype float16 --jobs 14 \
        --shapes 4096x4096x4096,8192x8192x8192 > "$out/tune_matmul_bias_gelu.log" 2>&1
    echo "tune: $?"
    cp tilegen/tables/ops/matmul_bias_gelu.json "$out/matmul_bias_gelu.json"
    python3 -m tilegen build specs/ > "$out/build_2.log" 2>&1
    timeout 120 python3 -m tilegen bench matmul_bias_gelu --compile --dtype float16 --shapes 4096x4096x4096 \
        --out "$out/bench_gelu" > "$out/bench_gelu.log" 2>&1
    echo "bench: $?"
fi
