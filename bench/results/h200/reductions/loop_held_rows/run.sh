#!/bin/bash
# A row its block holds, passed over as a longer one (a reduction config's LOOP), on the H200:
# the changed tests compiled (LOOP on every op, bool steps), then forced configs of every
# reduction op's forward at rows of 32768 beside the config it launches today (and, in float32,
# torch.compile in the same rounds).
#   OUT=... bash bench/results/h200/reductions/loop_held_rows/run.sh   (PYTHONPATH at the checkout)
set -u
export PYTHONPATH=$PWD
out=${OUT:-/tmp/loop_held_rows}; mkdir -p "$out"
if [[ ${STAGE:-1} == 1 ]]; then
timeout 100 python3 -m pytest -q -n 16 -p no:cacheprovider tests/test_reductions.py \
    -k "bool or block_holds or row_length_compiled or tuning_tries" > "$out/tests.log" 2>&1
echo "tests: $? ($(tail -1 "$out/tests.log"))"
COMPILE=1 timeout 330 python3 bench/probes/fixed_row_length.py rms_norm,add_rms_norm,softmax,log_softmax,layer_norm \
    4096x32768,512x32768 float32 3 32768/32/1/1,32768/16/1/1,32768/32/0/1 > "$out/float32.txt" 2>&1
echo "float32: $?"
timeout 140 python3 bench/probes/fixed_row_length.py softmax,log_softmax,rms_norm,layer_norm,add_rms_norm \
    512x32768 float16 3 32768/16/1/1,32768/32/1/1 > "$out/float16.txt" 2>&1
echo "float16: $?"
fi
# Second call, with the tables' float32 rms_norm and add_rms_norm rows of 32768 passed over in one
# 32768-element block (LOOP; and add_rms_norm's half-precision 512x32768): their tests compiled,
# add_rms_norm's half-precision 4096x32768 forced, then both benched beside eager and torch.compile.
#   OUT=... STAGE=2 bash bench/results/h200/reductions/loop_held_rows/run.sh
if [[ ${STAGE:-1} == 2 ]]; then
    timeout 150 python3 -m pytest -q -n 16 -p no:cacheprovider generated/tests/test_rms_norm.py \
        generated/tests/test_add_rms_norm.py tests/test_runtime.py > "$out/tests_tables.log" 2>&1
    echo "tests: $? ($(tail -1 "$out/tests_tables.log"))"
    timeout 60 python3 bench/probes/fixed_row_length.py add_rms_norm 4096x32768 float16 3 \
        32768/32/1/1,32768/16/1/1,32768/32/0/1 > "$out/add_rms_norm_float16.txt" 2>&1
    echo "add_rms_norm float16: $?"
    timeout 300 python3 -m tilegen bench rms_norm add_rms_norm --compile --dtype float32 --dtype float16 \
        --shapes 512x32768,4096x32768 --out "$out/bench" > "$out/bench.log" 2>&1
    echo "bench: $?"
fi
