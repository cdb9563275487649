#!/usr/bin/env bash
# The column phase's tile (columns a strip, rows a step) at long rows on the H200: each kernel's
# GPU time a training step (bench/probes/step_kernels.py) with COLUMN_TILE forced, against the
# rule's (configs.column_sums_tile).
#   OUT=$OUT/tiles bash bench/results/h200/reductions/column_kernel/tiles.sh
set -uo pipefail
cd "$(dirname "$0")/../../../../.."
export PYTHONPATH="$PWD"
out="${OUT:?}"
mkdir -p "$out"
IFS=';' read -ra points <<< "${POINTS:-layer_norm 4096x32768 float16;layer_norm 4096x32768 float32;rms_norm 4096x32768 float16;add_rms_norm 4096x32768 float16;layer_norm 512x32768 float16}"
for tile in ${TILES:-rule 64,128 64,256 128,64 128,128 32,256 32,512}; do
    for point in "${points[@]}"; do
        set -- $point
        name="$out/${tile/,/x}_$1_$2_$3.txt"
        if [[ $tile == rule ]]; then
            timeout 60 python3 bench/probes/step_kernels.py "$@" > "$name" 2>&1
        else
            COLUMN_TILE=$tile timeout 60 python3 bench/probes/step_kernels.py "$@" > "$name" 2>&1
        fi
        echo "$tile $*: $(grep -m1 'us of kernels' "$name" | sed 's/.*: //') $(grep -m1 '_backward_kernel' "$name" | awk '{print $1}')"
    done
done
