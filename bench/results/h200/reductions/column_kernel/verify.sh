#!/usr/bin/env bash
# A tree's reductions on the H200 in one short call: build check, the reduction tests compiled (and
# any more test files named in MORE), each kernel's GPU time a training step at long rows
# (bench/probes/step_kernels.py).
#   OUT=$OUT/v MORE="generated/tests/test_bmm_bias_silu.py" bash bench/results/h200/reductions/column_kernel/verify.sh
set -uo pipefail
cd "$(dirname "$0")/../../../../.."
export PYTHONPATH="$PWD"
out="${OUT:?}"
mkdir -p "$out"
python3 -m pip show pytest-xdist 2>/dev/null | grep Version
python3 -m tilegen build specs/ --check > "$out/build.log" 2>&1; echo "build: $? ($(tail -1 "$out/build.log"))"
timeout "${TESTS_S:-150}" python3 -m pytest -q -n 16 --dist worksteal -p no:cacheprovider tests/test_reductions.py \
    generated/tests/test_softmax.py generated/tests/test_log_softmax.py generated/tests/test_rms_norm.py \
    generated/tests/test_layer_norm.py generated/tests/test_add_rms_norm.py ${MORE:-} > "$out/tests.log" 2>&1
echo "tests: $? ($(tail -1 "$out/tests.log"))"
grep -E "^(FAILED|ERROR)" "$out/tests.log" | head -20
POINTS="${POINTS:-layer_norm 4096x32768 float16;rms_norm 4096x32768 float16;add_rms_norm 4096x32768 float16;layer_norm 512x32768 float16}" \
    TILES=rule OUT="$out/kernels" bash bench/results/h200/reductions/column_kernel/tiles.sh
