#!/usr/bin/env bash
# On a GPU with no tuned table of its own (an H100): the same ops benched twice, with the
# heuristic's configs and with the H200's table borrowed (TILEGEN_TABLE_GPU), back to back, then
# side by side (bench/compare_runs.py: tilegen's time borrowed over heuristic, PyTorch's as the
# control for the machine's drift between the runs). Results under $OUT (default bench/out/borrowed).
#   OPS="matmul bmm softmax" DTYPE=float16 LIMIT=150 bash bench/probes/borrowed_table.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
out="${OUT:-bench/out/borrowed}"
ops="${OPS:-matmul bmm softmax rms_norm layer_norm}"
mkdir -p "$out"
nvidia-smi --query-gpu=name --format=csv,noheader > "$out/gpu.txt"
timeout "${LIMIT:-150}" python3 -m tilegen bench $ops --dtype "${DTYPE:-float16}" --out "$out/heuristic" \
    > "$out/heuristic.log" 2>&1
TILEGEN_TABLE_GPU="NVIDIA H200" timeout "${LIMIT:-150}" python3 -m tilegen bench $ops --dtype "${DTYPE:-float16}" \
    --out "$out/borrowed" > "$out/borrowed.log" 2>&1
python3 bench/compare_runs.py "$out/heuristic/results.json" "$out/borrowed/results.json" --over 1.03 \
    > "$out/compare.txt" 2>&1
tail -20 "$out/compare.txt"
