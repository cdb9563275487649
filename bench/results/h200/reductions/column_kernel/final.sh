#!/usr/bin/env bash
# The landed tree on the H200: build check, the reduction tests compiled, then the norms' training
# step at rows of 32768 against eager autograd and torch.compile (default and max-autotune).
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
timeout 420 python3 -m tilegen bench layer_norm rms_norm add_rms_norm --backward --compile \
    --shapes 4096x32768,512x32768 --dtype float16 --dtype float32 --out "$out/training" > "$out/bench.log" 2>&1
echo "bench: $?"; tail -30 "$out/bench.log"
