#!/bin/bash
# Traced launches and their pointer twins, on the H200 (PYTHONPATH at the checkout):
#   call 1: OUT=$OUT/t STEPS="tune build tests" TUNE="bmm --dtype float16 --jobs 14 --shapes \
#           32x2048x2048x128,8x1024x1024x1024" TESTS="tests/test_runtime.py generated/tests/test_bmm.py" \
#           bash bench/h200_check.sh          (tune_bmm.log, tests_first.log)
#   call 2: this script (tests.log, bench_bmm/, bench_matmul_relu/)
set -u
export PYTHONPATH=$PWD
out=${OUT:-/tmp/traced_twins}; mkdir -p "$out"
if [[ ${STAGE:-2} == 2 ]]; then
timeout 120 python3 -m pytest -v -n 8 -p no:cacheprovider tests/test_runtime.py \
    -k "training_step_where or pointer_twin or every_entry" > "$out/tests.log" 2>&1
echo "tests: $? ($(tail -1 "$out/tests.log"))"
timeout 240 python3 -m tilegen bench bmm --compile --shapes 32x2048x2048x128,8x1024x1024x1024 \
    --out "$out/bench_bmm" > "$out/bench_bmm.log" 2>&1
echo "bench bmm: $?"
timeout 200 python3 -m tilegen bench matmul_relu --compile --dtype float16 --shapes 4096x4096x4096,8192x8192x8192 \
    --out "$out/bench_matmul_relu" > "$out/bench_matmul_relu.log" 2>&1
echo "bench matmul_relu: $?"
fi
# Call 3 (tests_matmul_ops.log): the matmul-kind ops' generated tests (each compiles fullgraph,
# exports, replays CUDA graphs: traced launches reading the twins) and the batched-matmul and
# call-path tests, compiled: OUT=... STAGE=3 bash bench/results/h200/traced_twins/run.sh
if [[ ${STAGE:-2} == 3 ]]; then
    timeout 290 python3 -m pytest -v -n 16 --dist worksteal -p no:cacheprovider generated/tests/test_matmul.py \
        generated/tests/test_matmul_relu.py generated/tests/test_matmul_bias_gelu.py \
        generated/tests/test_matmul_residual_scaled.py generated/tests/test_bmm.py generated/tests/test_bmm_bias_silu.py \
        generated/tests/test_fp8_scaled_mm.py generated/tests/test_fp8_linear_gelu.py tests/test_batched_matmul.py \
        tests/test_callpath.py > "$out/tests_matmul_ops.log" 2>&1
    echo "tests: $? ($(tail -1 "$out/tests_matmul_ops.log"))"
fi
