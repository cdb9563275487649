#!/usr/bin/env bash
# Compiled on the GPU: matmul ops' FLOP counts under torch.utils.flop_counter (runtime/flops.py,
# the registered ops' formulas): tests/test_flops.py and the matmul ops' generated library,
# compile and export tests (every matmul registration changed).
#   OUT=... bash bench/results/h200/flops/run.sh
set -uo pipefail
export PYTHONPATH="$PWD"
out="${OUT:-bench/out/flops}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/gpu.txt" 2>&1
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> "$out/gpu.txt" 2>&1
timeout 60 python3 -m tilegen build specs/ --check > "$out/build.log" 2>&1; echo "build: $? $(tail -1 "$out/build.log")"
timeout 170 python3 -m pytest -q -n 16 --dist worksteal -p no:cacheprovider -rs tests/test_flops.py \
    generated/tests/test_matmul_bias_gelu.py generated/tests/test_bmm_bias_silu.py generated/tests/test_matmul_relu.py \
    -k "flops or pytorch or pointwise or recomputed or library or opcheck or compile or export" > "$out/tests.log" 2>&1
echo "tests: $? $(tail -1 "$out/tests.log")"
