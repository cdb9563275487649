#!/bin/bash
# A looped row's outputs stored by its first pass and loaded back (READ_BACK), on the H200: the
# reduction tests compiled, then add_rms_norm's and rms_norm's float32 rows of 32768 with looped
# configs beside the whole row and torch.compile, and Inductor's rms_norm config there.
#   OUT=... bash bench/results/h200/reductions/read_back/run.sh   (PYTHONPATH at the checkout)
set -u
export PYTHONPATH=$PWD
out=${OUT:-/tmp/read_back}; mkdir -p "$out"
if [[ ${STAGE:-1} == 1 ]]; then
timeout 200 python3 -m pytest -q -n 16 -p no:cacheprovider tests/test_reductions.py generated/tests/test_add_rms_norm.py \
    > "$out/tests.log" 2>&1
echo "tests: $? ($(tail -1 "$out/tests.log"))"
COMPILE=1 timeout 150 python3 bench/probes/fixed_row_length.py add_rms_norm 4096x32768,512x32768 float32 3 \
    2048/8/1,4096/8/1,4096/16/1,8192/16/1,8192/32/1 > "$out/add_rms_norm_loops.txt" 2>&1
echo "add_rms_norm loops: $?"
COMPILE=1 timeout 100 python3 bench/probes/fixed_row_length.py rms_norm 4096x32768 float32 3 \
    1024/16/1,2048/16/1,2048/32/1,4096/32/1 > "$out/rms_norm_loops.txt" 2>&1
echo "rms_norm loops: $?"
MODE=max-autotune-no-cudagraphs timeout 60 python3 bench/probes/compiled_kernels.py rms_norm 4096x32768 float32 \
    > "$out/rms_norm_inductor.log" 2>&1
echo "inductor: $?"
fi
# Second call, after add_rms_norm's float32 rows of 32768 took 8192-element blocks, 32 warps, FIXED_N, EVICT:
#   OUT=... STAGE=2 bash bench/results/h200/reductions/read_back/run.sh
if [[ ${STAGE:-1} == 2 ]]; then
    COMPILE=1 timeout 120 python3 bench/probes/fixed_row_length.py rms_norm 4096x32768,512x32768 float32 3 \
        32768/32/0,16384/32/1,8192/32/1 > "$out/rms_norm_whole_32.txt" 2>&1
    echo "rms_norm whole row, 32 warps: $?"
    timeout 200 python3 -m tilegen bench add_rms_norm --compile --dtype float32 --shapes 512x32768,4096x32768 \
        --out "$out/bench_add_rms_norm" > "$out/bench_add_rms_norm.log" 2>&1
    echo "bench add_rms_norm: $?"
fi
# Third call: whole rows with 32 warps (Inductor's rms_norm config at 4096x32768 float32), beside
# 16384-element loops, for the float32 rows of 32768 of rms_norm, softmax, log_softmax, layer_norm.
#   OUT=... STAGE=3 bash bench/results/h200/reductions/read_back/run.sh
if [[ ${STAGE:-1} == 3 ]]; then
    COMPILE=1 timeout 300 python3 bench/probes/fixed_row_length.py rms_norm,softmax,log_softmax,layer_norm \
        4096x32768,512x32768 float32 3 32768/32,16384/32/1,16384/16/1 > "$out/float32_rows_32768.txt" 2>&1
    echo "float32 rows of 32768: $?"
fi
# Fourth call, with the float32 tables at rows of 32768 changed (16384 blocks, 32 warps, FIXED_N,
# EVICT; the specs offering 16384): the changed ops' generated tests and the runtime tests,
# compiled, then the bench of every reduction op there beside eager and torch.compile.
#   OUT=... STAGE=4 bash bench/results/h200/reductions/read_back/run.sh
if [[ ${STAGE:-1} == 4 ]]; then
    timeout 230 python3 -m pytest -q -n 16 -p no:cacheprovider tests/test_runtime.py generated/tests/test_rms_norm.py \
        generated/tests/test_softmax.py generated/tests/test_log_softmax.py generated/tests/test_layer_norm.py \
        > "$out/tests_tables.log" 2>&1
    echo "tests: $? ($(tail -1 "$out/tests_tables.log"))"
    timeout 220 python3 -m tilegen bench softmax log_softmax rms_norm layer_norm add_rms_norm --compile --dtype float32 \
        --shapes 512x32768,4096x32768 --out "$out/bench_float32" > "$out/bench_float32.log" 2>&1
    echo "bench: $?"
fi
