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
# Third call: matmul_residual_scaled's own descriptor entries (tables/ops/matmul_residual_scaled.json).
#   OUT=... STAGE=3 bash bench/results/h200/traced_tune/run.sh
if [[ ${STAGE:-1} == 3 ]]; then
    timeout 420 python3 -m tilegen tune matmul_residual_scaled --scope op --traced --dtype float16 --jobs 14 \
        --shapes 4096x4096x4096,4096x11008x4096,8192x8192x8192 > "$out/tune_matmul_residual_scaled.log" 2>&1
    echo "tune: $?"
    cp tilegen/tables/ops/matmul_residual_scaled.json "$out/matmul_residual_scaled.json"
    python3 -m tilegen build specs/ > "$out/build_3.log" 2>&1
    timeout 130 python3 -m tilegen bench matmul_residual_scaled --compile --dtype float16 \
        --shapes 4096x4096x4096,4096x11008x4096,8192x8192x8192 --out "$out/bench_residual" > "$out/bench_residual.log" 2>&1
    echo "bench: $?"
fi
# Fourth call: the fp8 descriptor entries of the matmul kind's table (element size 1).
#   OUT=... STAGE=4 bash bench/results/h200/traced_tune/run.sh
if [[ ${STAGE:-1} == 4 ]]; then
    timeout 300 python3 -m tilegen tune fp8_scaled_mm --traced --dtype float8_e4m3fn --jobs 14 \
        --shapes 2048x2048x2048,4096x11008x4096 > "$out/tune_fp8.log" 2>&1
    echo "tune: $?"
    cp tilegen/tables/matmul.json "$out/matmul_fp8.json"
    python3 -m tilegen build specs/ > "$out/build_4.log" 2>&1
    timeout 150 python3 -m tilegen bench fp8_scaled_mm fp8_linear_gelu --compile \
        --shapes 2048x2048x2048,4096x11008x4096 --out "$out/bench_fp8" > "$out/bench_fp8.log" 2>&1
    echo "bench: $?"
fi
