#!/usr/bin/env bash
# Compiled on the GPU: bool scalars (Triton's u1, Inductor's launch of a bool argument, the call
# path's byte code), int scalars widened under `if MATH_64:` in float64 math, required scalars in
# the generated tests, / of two bools, shapes of two ranks compared without a guard (every op's
# export and dynamic-shape compile tests, whose second sample now has coinciding sizes), and the
# traced matmul launch's empty split-K placeholders (the compile test alone first, then in the
# matrix beside the matmul ops' generated tests).
#   OUT=... bash bench/results/h200/bool_scalars/run.sh
set -uo pipefail
export PYTHONPATH="$PWD"
out="${OUT:-bench/out/bool_scalars}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/gpu.txt" 2>&1
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> "$out/gpu.txt" 2>&1
git log --oneline -1 >> "$out/gpu.txt" 2>&1
timeout 60 python3 -m tilegen build specs/ --check > "$out/build.log" 2>&1; echo "build: $? $(tail -1 "$out/build.log")"
timeout 90 python3 -m pytest -q -p no:cacheprovider tests/test_runtime.py -k "kernel_alone" > "$out/alone.log" 2>&1
echo "alone: $? $(tail -1 "$out/alone.log")"
timeout 240 python3 -m pytest -q -n 16 --dist worksteal -p no:cacheprovider -rs tests/test_runtime.py \
    tests/test_callpath.py tests/test_categories.py tests/test_unusual_specs.py tests/test_expressions.py \
    > "$out/tests.log" 2>&1
echo "tests: $? $(tail -1 "$out/tests.log")"
timeout 220 python3 -m pytest -q -n 16 --dist worksteal -p no:cacheprovider -rs generated/tests \
    -k "dynamic or export or (matmul and compile)" > "$out/generated.log" 2>&1
echo "generated: $? $(tail -1 "$out/generated.log")"
