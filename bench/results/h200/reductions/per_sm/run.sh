#!/usr/bin/env bash
# Rows held whole by a few programs a multiprocessor (PER_SM), as run on the H200 (three device
# calls; the second and third on one warm machine). From the checkout, PYTHONPATH at it:
#   OUT=DIR bash bench/results/h200/reductions/per_sm/run.sh
set -uo pipefail
cd "$(dirname "$0")/../../../../.."
export PYTHONPATH="$PWD"
out="${OUT:-bench/out/per_sm}"
mkdir -p "$out"
# 1. (c42fe3d) every op's forced configs: probe_first.txt. Its first op, softmax, was timed while
#    the compiled call path was still building (the probe did not wait for it then): those lines
#    are host-bound and not used.
#    python3 bench/probes/persistent_rows.py softmax,rms_norm,layer_norm \
#        4096x32768,512x32768,4096x4096,131072x1024,1048576x128 float16,float32
# 2. (9fb2b3d) the ops the first run could not time; tuning with PER_SM on offer where the probe
#    found it ahead (layer_norm 4096x4096); the bench of that shape with the new table.
timeout 130 python3 -m tilegen tune layer_norm --scope op --jobs 14 --dtype float16 --dtype float32 \
    --shapes 4096x4096 > "$out/tune_layer_norm.log" 2>&1
python3 -m tilegen build specs/ > "$out/build.log" 2>&1
timeout 70 python3 -m tilegen bench layer_norm --shapes 4096x4096 --dtype float16 --dtype float32 --compile \
    --out "$out/bench_layer_norm" > "$out/bench_layer_norm.log" 2>&1
timeout 60 python3 bench/probes/persistent_rows.py softmax,log_softmax,add_rms_norm \
    4096x32768,512x32768,4096x4096 float16 > "$out/probe.txt" 2>&1
# 3. (9fb2b3d, a fresh copy of the tree: the layer_norm table of 2 not in it) float32 softmax and
#    log_softmax on rows of 128, where tilegen trailed eager, tuned; their bench with the new tables.
for op in softmax log_softmax; do
    timeout 70 python3 -m tilegen tune $op --scope op --jobs 14 --dtype float32 \
        --shapes 1048576x128,131072x128 > "$out/tune_$op.log" 2>&1
done
python3 -m tilegen build specs/ > "$out/build.log" 2>&1
timeout 75 python3 -m tilegen bench softmax log_softmax --shapes 131072x128,1048576x128 --dtype float32 --compile \
    --out "$out/bench_softmax" > "$out/bench_softmax.log" 2>&1
