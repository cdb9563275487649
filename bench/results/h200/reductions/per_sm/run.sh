#!/usr/bin/env bash
# Rows held whole by a few programs a multiprocessor (PER_SM): the probe's forced configs for the
# ops and shapes the first run (probe_first.txt) could not time, then tuning with PER_SM on offer
# where the probe found it ahead (layer_norm 4096x4096) and where tilegen trails eager (float32
# softmax and log_softmax on rows of 128). On the H200, from the checkout:
#   OUT=DIR bash bench/results/h200/reductions/per_sm/run.sh
set -uo pipefail
cd "$(dirname "$0")/../../../../.."
export PYTHONPATH="$PWD"
out="${OUT:-bench/out/per_sm}"
mkdir -p "$out"
timeout 130 python3 bench/probes/persistent_rows.py softmax,log_softmax,add_rms_norm \
    4096x32768,512x32768,4096x4096,131072x1024,1048576x128 float16,float32 > "$out/probe.txt" 2>&1
echo "probe: exit $?"
timeout 170 python3 -m tilegen tune layer_norm --scope op --jobs 14 --dtype float16 --dtype float32 \
    --shapes 4096x4096 > "$out/tune_layer_norm.log" 2>&1
echo "tune layer_norm: exit $? ($(tail -1 "$out/tune_layer_norm.log"))"
for op in softmax log_softmax; do
    timeout 110 python3 -m tilegen tune $op --scope op --jobs 14 --dtype float32 \
        --shapes 1048576x128,131072x128 > "$out/tune_$op.log" 2>&1
    echo "tune $op: exit $? ($(tail -1 "$out/tune_$op.log"))"
done
mkdir -p "$out/tables" && cp tilegen/tables/ops/*.json "$out/tables/"
