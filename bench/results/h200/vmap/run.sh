#!/usr/bin/env bash
# Compiled on the GPU: torch.vmap of generated ops (runtime/batching.py, the wrappers' vmapped
# route): tests/test_vmap.py, every op's generated tests (the route every call takes changed), the
# runtime tests, and whether torch.compile traces a vmapped call (bench/probes/vmap_compile.py).
#   OUT=... bash bench/results/h200/vmap/run.sh
set -uo pipefail
export PYTHONPATH="$PWD"
out="${OUT:-bench/out/vmap}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/gpu.txt" 2>&1
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> "$out/gpu.txt" 2>&1
timeout 60 python3 -m tilegen build specs/ --check > "$out/build.log" 2>&1; echo "build: $? $(tail -1 "$out/build.log")"
timeout 120 python3 -m pytest -q -p no:cacheprovider -rs tests/test_vmap.py > "$out/vmap.log" 2>&1
echo "vmap: $? $(tail -1 "$out/vmap.log")"
timeout 120 python3 bench/probes/vmap_compile.py > "$out/vmap_compile.txt" 2>&1; echo "probe: $?"; cat "$out/vmap_compile.txt" | tail -5
timeout 330 python3 -m pytest -q -n 16 --dist worksteal -p no:cacheprovider -rs generated/tests tests/test_runtime.py \
    > "$out/tests.log" 2>&1
echo "tests: $? $(tail -1 "$out/tests.log")"
