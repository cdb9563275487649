#!/bin/bash
# Float scalars as float64 kernel parameters, taken in the math's dtype once, compiled on the H200:
# the generated tests of every op with a float scalar (float64 ones at test values no float32
# holds), the compiled call path's, the unit test building an op of each kind with float scalars;
# then matmul_residual_scaled (alpha, beta) inside torch.compile against its eager call
# (bench/probes/traced_launch.py: configs and kernel times) and benched beside torch.compile.
#   OUT=... bash bench/results/h200/float_scalars/run.sh   (PYTHONPATH at the checkout)
set -u
export PYTHONPATH=$PWD
out=${OUT:-/tmp/float_scalars}; mkdir -p "$out"
if [[ ${STAGE:-1} == 1 ]]; then
timeout 300 python3 -m pytest -q -n 16 -p no:cacheprovider \
    generated/tests/test_{fma_clamp,matmul_residual_scaled,rms_norm,layer_norm,add_rms_norm,masked_scale,scaled_silu_mul,rms_scale_exp,clamp_add}.py \
    tests/test_callpath.py tests/test_unusual_specs.py > "$out/tests.log" 2>&1
echo "tests: $? ($(tail -1 "$out/tests.log"))"
for shape in 4096x11008x4096 4096x4096x4096; do
    timeout 120 python3 bench/probes/traced_launch.py matmul_residual_scaled $shape float16 > "$out/traced_launch_$shape.txt" 2>&1
    echo "probe $shape: $?"
done
timeout 150 python3 -m tilegen bench matmul_residual_scaled --compile --dtype float16 \
    --shapes 4096x4096x4096,4096x11008x4096,8192x8192x8192 --out "$out/bench_residual" > "$out/bench_residual.log" 2>&1
echo "bench: $?"
fi
# Second call: elementwise ops with float scalars inside torch.compile beside their eager calls.
#   OUT=... STAGE=2 bash bench/results/h200/float_scalars/run.sh
if [[ ${STAGE:-1} == 2 ]]; then
    timeout 200 python3 -m tilegen bench rms_scale_exp fma_clamp --compile --dtype float32 --shapes 2^24 \
        --out "$out/bench_elementwise" > "$out/bench_elementwise.log" 2>&1
    echo "bench elementwise: $?"
fi
