#!/usr/bin/env bash
# Long rows' backward row kernel under forced configs (bench/probes/step_kernels.py CONFIG=...):
# blocks, warps, rows a step, blocks a trip, and PROGRAMS (programs a multiprocessor at most, so
# that the rows in flight stay in L2 between the passes: read by ReductionOp._launch at 003ca3a, where
# this ran; removed after, as it gained nothing), each kernel's GPU time a training step.
#   OUT=$OUT/configs bash bench/results/h200/reductions/column_kernel/configs.sh
set -uo pipefail
cd "$(dirname "$0")/../../../../.."
export PYTHONPATH="$PWD"
out="${OUT:?}"
mkdir -p "$out"
configs=(
    ''
    '{"BLOCK_N": 4096, "ROWS": 1, "num_warps": 16, "UNROLL": 0}'
    '{"BLOCK_N": 4096, "ROWS": 1, "num_warps": 16, "UNROLL": 0, "PROGRAMS": 1}'
    '{"BLOCK_N": 4096, "ROWS": 1, "num_warps": 16, "UNROLL": 2, "PROGRAMS": 1}'
    '{"BLOCK_N": 4096, "ROWS": 1, "num_warps": 16, "UNROLL": 0, "PROGRAMS": 2}'
    '{"BLOCK_N": 2048, "ROWS": 1, "num_warps": 8, "UNROLL": 0, "PROGRAMS": 2}'
    '{"BLOCK_N": 2048, "ROWS": 1, "num_warps": 8, "UNROLL": 2, "PROGRAMS": 2}'
    '{"BLOCK_N": 8192, "ROWS": 1, "num_warps": 16, "UNROLL": 0, "PROGRAMS": 1}'
)
for point in "layer_norm 4096x32768 float32" "layer_norm 4096x32768 float16" "rms_norm 4096x32768 float16" \
             "add_rms_norm 4096x32768 float16"; do
    set -- $point
    for index in "${!configs[@]}"; do
        name="$1_$2_$3_c$index"
        CONFIG="${configs[$index]}" timeout 60 python3 bench/probes/step_kernels.py "$@" > "$out/$name.txt" 2>&1
        echo "$name ${configs[$index]:-table}: $(grep -m1 'tilegen: ' "$out/$name.txt" | sed 's/.*tilegen: //') | $(grep -m1 '_backward_kernel' "$out/$name.txt" | awk '{print $1}') row kernel"
    done
done
