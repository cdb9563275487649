#!/bin/bash
# Warp-specialized persistent matmul kernels against torch.matmul (bench/probes/warp_specialize.py),
# and, in the same call, add_rms_norm's half-precision 4096x32768 LOOP entry benched
# (../reductions/loop_held_rows/).
#   OUT=... bash bench/results/h200/warp_specialize/run.sh   (PYTHONPATH at the checkout)
set -u
export PYTHONPATH=$PWD
out=${OUT:-/tmp/warp_specialize}; mkdir -p "$out"
timeout 90 python3 -m tilegen bench add_rms_norm --compile --dtype float16 --shapes 4096x32768 \
    --out "$out/bench_add_rms_norm" > "$out/bench_add_rms_norm.log" 2>&1
echo "bench add_rms_norm: $?"
timeout 420 python3 bench/probes/warp_specialize.py > "$out/probe.txt" 2>&1
echo "probe: $?"
