#!/usr/bin/env bash
# Compiled on the GPU, after the per-row fix (own_axes): tests/test_vmap.py, every op's generated
# vmap test, and the torch.compile probe.
#   OUT=... bash bench/results/h200/vmap/rows.sh
set -uo pipefail
export PYTHONPATH="$PWD"
out="${OUT:-bench/out/vmap_rows}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/gpu.txt" 2>&1
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> "$out/gpu.txt" 2>&1
timeout 60 python3 -m tilegen build specs/ --check > "$out/build.log" 2>&1; echo "build: $? $(tail -1 "$out/build.log")"
timeout 200 python3 -m pytest -q -n 16 -p no:cacheprovider -rs tests/test_vmap.py generated/tests -k vmap > "$out/vmap.log" 2>&1
echo "vmap: $? $(tail -1 "$out/vmap.log")"
timeout 120 python3 bench/probes/vmap_compile.py > "$out/vmap_compile.txt" 2>&1; echo "probe: $?"; tail -5 "$out/vmap_compile.txt"
