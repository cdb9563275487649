#!/usr/bin/env bash
# layer_norm's forward at 2^24 elements in half precision ran at 69% (4096x4096) and 83-85%
# (131072x1024) of a copy of its bytes on its heuristic's configs (../column_prefetch/forward):
# tune those two keys for its own table, build, and time them beside eager and a copy. First, each
# kernel's GPU time a training step at 512x32768 (the column rule's check at few rows).
#   OUT=$OUT/t bash bench/results/h200/reductions/layer_norm_tune/run.sh   (packs $OUT/t.tgz)
set -uo pipefail
cd "$(dirname "$0")/../../../../.."
export PYTHONPATH="$PWD"
out="${OUT:?}"
mkdir -p "$out"
for op in layer_norm rms_norm add_rms_norm; do
    timeout 40 python3 bench/probes/step_kernels.py $op 512x32768 float16 > "$out/kernels_${op}_512x32768.txt" 2>&1
    echo "kernels $op 512x32768: $(grep 'us of kernels' "$out/kernels_${op}_512x32768.txt" | sed 's/.*: //' | tr '\n' ' ') $(grep -m1 '_backward_kernel' "$out/kernels_${op}_512x32768.txt" | awk '{print $1}')"
done
timeout ${TUNE_S:-130} python3 -m tilegen tune layer_norm --scope op --dtype float16 --jobs 14 \
    --shapes 4096x4096,131072x1024 > "$out/tune.log" 2>&1; echo "tune: $? ($(tail -1 "$out/tune.log"))"
cp tilegen/tables/ops/layer_norm.json "$out/"
python3 -m tilegen build specs/ > "$out/build.log" 2>&1; echo "build: $? ($(tail -1 "$out/build.log"))"
timeout 60 python3 -m tilegen bench layer_norm --shapes 4096x4096,131072x1024 --dtype float16 --dtype bfloat16 \
    --out "$out/forward" > "$out/forward.log" 2>&1; echo "forward: $?"; grep "^\[" "$out/forward.log"
tar -czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")" && echo "packed $out.tgz"
