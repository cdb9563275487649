#!/usr/bin/env bash
# Compiled on the GPU: matmul ops inside torch.autocast (runtime/amp.py, the matmul wrappers' cast)
# and a vmapped call's scalars checked (library.vmapped): tests/test_autocast.py and
# tests/test_vmap.py, bench/probes/autocast_step.py (host time in a region, a training step beside
# eager and torch.compile), then every op's generated tests (every wrapper changed; TESTS= others).
#   OUT=... bash bench/results/h200/autocast/run.sh
set -uo pipefail
export PYTHONPATH="$PWD"
out="${OUT:-bench/out/autocast}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/gpu.txt" 2>&1
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> "$out/gpu.txt" 2>&1
timeout 60 python3 -m tilegen build specs/ --check > "$out/build.log" 2>&1; echo "build: $? $(tail -1 "$out/build.log")"
timeout 150 python3 -m pytest -q -p no:cacheprovider -rs tests/test_autocast.py tests/test_vmap.py > "$out/unit.log" 2>&1
echo "unit: $? $(tail -1 "$out/unit.log")"
timeout 150 python3 bench/probes/autocast_step.py > "$out/autocast_step.txt" 2>&1; echo "probe: $?"; tail -12 "$out/autocast_step.txt"
tests="${TESTS:-generated/tests tests/test_runtime.py}"
timeout 300 python3 -m pytest -q -n 16 --dist worksteal -p no:cacheprovider -rs $tests > "$out/tests.log" 2>&1
echo "tests: $? $(tail -1 "$out/tests.log")"
