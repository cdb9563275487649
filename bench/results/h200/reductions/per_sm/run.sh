#!/usr/bin/env bash
# Rows held whole by a few programs a multiprocessor (PER_SM): the probe's forced configs for the
# ops the first run (probe_first.txt) timed while the compiled call path was still building, then
# tuning with PER_SM on offer where the probe found it ahead (layer_norm 4096x4096) and where
# tilegen trails eager (float32 softmax and log_softmax on rows of 128), and the bench of those
# shapes with the new tables. On the H200, from the checkout:
#   OUT=DIR bash bench/results/h200/reductions/per_sm/run.sh
set -uo pipefail
cd "$(dirname "$0")/../../../../.."
export PYTHONPATH="$PWD"
out="${OUT:-bench/out/per_sm}"
mkdir -p "$out"
timeout 60 python3 bench/probes/persistent_rows.py softmax,log_softmax,add_rms_norm \
    4096x32768,512x32768,4096x4096 float16 > "$out/probe.txt" 2>&1
echo "probe: exit $?"
timeout 140 python3 -m tilegen tune layer_norm --scope op --jobs 14 --dtype float16 --dtype float32 \
    --shapes 4096x4096 > "$out/tune_layer_norm.log" 2>&1
echo "tune layer_norm: exit $? ($(tail -1 "$out/tune_layer_norm.log"))"
for op in softmax log_softmax; do
    timeout 85 python3 -m tilegen tune $op --scope op --jobs 14 --dtype float32 \
        --shapes 1048576x128,131072x128 > "$out/tune_$op.log" 2>&1
    echo "tune $op: exit $? ($(tail -1 "$out/tune_$op.log"))"
done
mkdir -p "$out/tables" && cp tilegen/tables/ops/*.json "$out/tables/"
python3 -m tilegen build specs/ > "$out/build.log" 2>&1
timeout 60 python3 -m tilegen bench layer_norm --shapes 4096x4096 --dtype float16 --dtype float32 --compile \
    --out "$out/bench_layer_norm" > "$out/bench_layer_norm.log" 2>&1
echo "bench layer_norm: exit $? ($(tail -1 "$out/bench_layer_norm.log"))"
timeout 85 python3 -m tilegen bench softmax log_softmax --shapes 131072x128,1048576x128 --dtype float32 --compile \
    --out "$out/bench_softmax" > "$out/bench_softmax.log" 2>&1
echo "bench softmax: exit $? ($(tail -1 "$out/bench_softmax.log"))"
