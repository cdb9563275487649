#!/usr/bin/env bash
# One device call (from the checkout: OUT=DIR bash bench/results/h200/reductions/layer_norm_rows/run.sh):
# 1. layer_norm's long rows, stand-alone variants (bench/probes/layer_norm_rows.py): the whole row's
#    weight and bias held in float32 / in their own dtype / loaded at use; the looped row in three
#    passes / two (each lane's Welford sums).
# 2. the half-precision softmax and log_softmax entries of rows of 32768 (PER_SM 1, from
#    per_sm/probe.txt) timed by `tilegen bench` in both half dtypes, beside eager and torch.compile.
# 3. the tests of PER_SM's forward and of a per-row input under it, compiled.
set -uo pipefail
cd "$(dirname "$0")/../../../../.."
export PYTHONPATH="$PWD"
out="${OUT:-bench/out/layer_norm_rows}"
mkdir -p "$out"
python3 -c "from tilegen.runtime import callpath; callpath.load(wait=True)" > "$out/callpath.log" 2>&1
timeout 200 python3 bench/probes/layer_norm_rows.py 4096x32768,512x32768,4096x16384,131072x1024 \
    float16,bfloat16,float32 > "$out/probe.txt" 2>&1
echo "probe: $?"
timeout 170 python3 -m tilegen bench softmax log_softmax --shapes 4096x32768,512x32768 --dtype float16 \
    --dtype bfloat16 --compile --out "$out/bench_softmax" > "$out/bench_softmax.log" 2>&1
echo "bench: $?"
timeout 150 python3 -m pytest -q -n 16 -p no:cacheprovider tests/test_reductions.py \
    -k "own_row_blocks_step or trip_ahead" > "$out/tests.log" 2>&1
echo "tests: $? ($(tail -1 "$out/tests.log"))"
