#!/usr/bin/env bash
# Compiled on the GPU: functions of numbers alone folded at the build (an elementwise op, a matmul
# epilogue and a reduction through their generated tests), and the expression tests.
#   OUT=... bash bench/results/h200/folded_constants/run.sh
set -uo pipefail
export PYTHONPATH="$PWD"
out="${OUT:-bench/out/folded_constants}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/gpu.txt" 2>&1
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> "$out/gpu.txt" 2>&1
timeout 60 python3 -m tilegen build specs/ --check > "$out/build.log" 2>&1; echo "build: $? $(tail -1 "$out/build.log")"
timeout 240 python3 -m pytest -q -n 8 -p no:cacheprovider -rs tests/test_unusual_specs.py tests/test_expressions.py \
    -k "folded or expression or numbers_alone" > "$out/tests.log" 2>&1
echo "tests: $? $(tail -1 "$out/tests.log")"
