#!/usr/bin/env bash
# After the column rule (tree of this commit) on the H200, one call: the tests the compiled matrix
# failed and the column rule's, each kernel's GPU time a training step at rows of 32768 on the rule,
# the norms' training step beside eager and torch.compile, and the forward of every reduction op
# from 2^24 elements against eager and a copy of the same bytes (`tilegen bench`'s 'of copy').
#   OUT=$OUT/f bash bench/results/h200/reductions/column_prefetch/final.sh   (packs $OUT/f.tgz)
set -uo pipefail
cd "$(dirname "$0")/../../../../.."
export PYTHONPATH="$PWD"
out="${OUT:?}"
mkdir -p "$out"
timeout 120 python3 -m pytest -q -n 8 -p no:cacheprovider tests/test_autograd.py tests/test_bench.py \
    -k "own_dtypes or repeat_backward_call_keys or copy" > "$out/tests.log" 2>&1; echo "tests: $? ($(tail -1 "$out/tests.log"))"
timeout 120 python3 -m pytest -q -n 8 -p no:cacheprovider tests/test_reductions.py -k "column or weights_gradient" \
    > "$out/tests_columns.log" 2>&1; echo "column tests: $? ($(tail -1 "$out/tests_columns.log"))"
IFS=';' read -ra points <<< "${POINTS:-layer_norm 4096x32768 float16;layer_norm 4096x32768 float32;rms_norm 4096x32768 float16;add_rms_norm 4096x32768 float16}"
for point in "${points[@]}"; do
    set -- $point
    timeout 60 python3 bench/probes/step_kernels.py "$@" > "$out/kernels_$1_$2_$3.txt" 2>&1
    echo "kernels $*: $(grep 'us of kernels' "$out/kernels_$1_$2_$3.txt" | sed 's/.*: //' | tr '\n' ' ') $(grep -m1 '_backward_kernel' "$out/kernels_$1_$2_$3.txt" | awk '{print $1}')"
done
timeout 150 python3 -m tilegen bench layer_norm rms_norm add_rms_norm --backward --compile \
    --shapes 4096x32768,512x32768 --dtype float16 --out "$out/training" > "$out/training.log" 2>&1
echo "training: $?"; grep "^\[" "$out/training.log"
timeout 260 python3 -m tilegen bench softmax log_softmax rms_norm layer_norm add_rms_norm \
    --shapes 131072x128,16384x1024,4096x4096,512x32768,1048576x128,131072x1024,32768x4096,4096x32768 \
    --out "$out/forward" > "$out/forward.log" 2>&1
echo "forward: $?"; sed -n '/## Summary/,/^## Host/p' "$out/forward/README.md" 2>/dev/null | grep -v "^#"
tar -czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")" && echo "packed $out.tgz"
