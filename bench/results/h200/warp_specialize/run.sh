#!/bin/bash
# Warp-specialized persistent matmul kernels against torch.matmul (bench/probes/warp_specialize.py).
#   call 1 (first/, probe_first.txt): add_rms_norm's half-precision 4096x32768 LOOP entry benched
#     (../reductions/loop_held_rows/), then the probe's first form (3-D descriptors, as
#     bmm_flatten.py), which Triton's warp specialization aborted;
#   call 2 (probe.txt): OUT=... STAGE=2 bash bench/results/h200/warp_specialize/run.sh
set -u
export PYTHONPATH=$PWD
out=${OUT:-/tmp/warp_specialize}; mkdir -p "$out"
if [[ ${STAGE:-2} == 1 ]]; then
    timeout 90 python3 -m tilegen bench add_rms_norm --compile --dtype float16 --shapes 4096x32768 \
        --out "$out/bench_add_rms_norm" > "$out/bench_add_rms_norm.log" 2>&1
    echo "bench add_rms_norm: $?"
fi
timeout 480 python3 bench/probes/warp_specialize.py > "$out/probe.txt" 2>&1
echo "probe: $?"
