#!/usr/bin/env bash
# Compiled on the GPU: a matmul backward that runs only the products of the gradients asked for
# (rt.Gradients' `selective`, the backward ops' `needed`): tests/test_autograd.py's matmul
# backward tests, the matmul ops' generated gradient, compile and export tests, and
# bench/probes/selective_backward.py (training steps with an input or a weight frozen, beside
# eager autograd and torch.compile).
#   OUT=... bash bench/results/h200/selective_backward/run.sh
set -uo pipefail
export PYTHONPATH="$PWD"
out="${OUT:-bench/out/selective_backward}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/gpu.txt" 2>&1
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> "$out/gpu.txt" 2>&1
timeout 60 python3 -m tilegen build specs/ --check > "$out/build.log" 2>&1; echo "build: $? $(tail -1 "$out/build.log")"
timeout 200 python3 bench/probes/selective_backward.py > "$out/selective_backward.txt" 2>&1; echo "probe: $?"
tail -12 "$out/selective_backward.txt"
timeout 280 python3 -m pytest -q -n 16 --dist worksteal -p no:cacheprovider -rs tests/test_autograd.py tests/test_autocast.py \
    tests/test_batched_matmul.py generated/tests/test_matmul.py generated/tests/test_matmul_bias_gelu.py \
    generated/tests/test_matmul_relu.py generated/tests/test_matmul_residual_scaled.py generated/tests/test_bmm.py \
    generated/tests/test_bmm_bias_silu.py -k "grad or backward or compile or export or product or autocast or training" \
    > "$out/tests.log" 2>&1
echo "tests: $? $(tail -1 "$out/tests.log")"
