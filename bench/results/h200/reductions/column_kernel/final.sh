#!/usr/bin/env bash
# The column phase's tree (branch long-rows) on the H200: build check, the reduction tests compiled, each kernel's GPU time a
# training step at rows of 32768 (bench/probes/step_kernels.py), a step's wall time back to back
# (bench/probes/step_host.py), then the norms' training step against eager autograd and
# torch.compile (default and max-autotune).
#   OUT=$OUT/final bash bench/results/h200/reductions/column_kernel/final.sh
set -uo pipefail
cd "$(dirname "$0")/../../../../.."
export PYTHONPATH="$PWD"
out="${OUT:?}"
mkdir -p "$out"
python3 -m tilegen build specs/ --check > "$out/build.log" 2>&1; echo "build: $? ($(tail -1 "$out/build.log"))"
timeout 200 python3 -m pytest -q -n 16 -p no:cacheprovider tests/test_reductions.py \
    generated/tests/test_rms_norm.py generated/tests/test_layer_norm.py generated/tests/test_add_rms_norm.py \
    > "$out/tests.log" 2>&1; echo "tests: $? ($(tail -1 "$out/tests.log"))"
# KERNELS, HOST: the points of each probe ("op shape dtype", separated by ";"); NO_BENCH=1: no bench.
IFS=';' read -ra kernels <<< "${KERNELS:-layer_norm 4096x32768 float16;layer_norm 4096x32768 float32;rms_norm 4096x32768 float16;add_rms_norm 4096x32768 float16}"
IFS=';' read -ra host <<< "${HOST:-layer_norm 512x32768 float16;layer_norm 4096x32768 float16}"
for point in "${kernels[@]}"; do
    set -- $point
    timeout 60 python3 bench/probes/step_kernels.py "$@" > "$out/kernels_$1_$2_$3.txt" 2>&1
    echo "kernels $*: $(grep 'us of kernels' "$out/kernels_$1_$2_$3.txt" | sed 's/.*: //' | tr '\n' ' ')"
done
for point in "${host[@]}"; do
    set -- $point
    timeout 60 python3 bench/probes/step_host.py "$@" > "$out/host_$1_$2_$3.txt" 2>&1
    echo "host $*: $(grep 'a step, back to back' "$out/host_$1_$2_$3.txt" | sed 's/.*: //' | tr '\n' ' ')"
done
[[ -n ${NO_BENCH:-} ]] && exit 0
timeout 200 python3 -m tilegen bench layer_norm rms_norm add_rms_norm --backward --compile \
    --shapes 4096x32768,512x32768 --dtype float16 --out "$out/training" > "$out/bench.log" 2>&1
echo "bench: $?"; grep "^\[" "$out/bench.log"
