#!/usr/bin/env bash
# The column-sum kernel for long rows' backward against the tree before it (a folder BEFORE with
# that tree's tilegen/, generated/ and bench/: `git archive 5830601 tilegen generated bench | tar -x -C .ab/base`),
# in one call on the H200: the reduction tests compiled, then each kernel's GPU time a training step
# (bench/probes/step_kernels.py), before and after, eager beside, and the column kernel's tiles.
#   OUT=$OUT/ab BEFORE=.ab/base bash bench/results/h200/reductions/column_kernel/run.sh
set -uo pipefail
cd "$(dirname "$0")/../../../../.."
export PYTHONPATH="$PWD"
out="${OUT:?}"; before="$(cd "${BEFORE:?}" && pwd)"
mkdir -p "$out"
python3 -m tilegen build specs/ --check > "$out/build.log" 2>&1; echo "build: $?"
timeout 200 python3 -m pytest -q -n 16 -p no:cacheprovider tests/test_reductions.py \
    generated/tests/test_rms_norm.py generated/tests/test_layer_norm.py generated/tests/test_add_rms_norm.py \
    > "$out/tests.log" 2>&1; echo "tests: $? ($(tail -1 "$out/tests.log"))"
probe() {  # probe NAME ENV... -- ARGS: one step_kernels run, to NAME.txt
    local name=$1; shift
    timeout 60 env "$@" > "$out/$name.txt" 2>&1; echo "$name: $? ($(grep 'us of kernels' "$out/$name.txt" | tr '\n' ' '))"
}
for point in "layer_norm 4096x32768 float16" "layer_norm 4096x32768 float32" "layer_norm 512x32768 float16" \
             "rms_norm 4096x32768 float16" "add_rms_norm 4096x32768 float16"; do
    set -- $point
    probe "before_$1_$2_$3" PYTHONPATH="$before" bash -c "cd $before && python3 bench/probes/step_kernels.py $*"
    probe "after_$1_$2_$3" python3 bench/probes/step_kernels.py "$@"
done
for tile in 32,128,4 128,32,4 64,64,8; do  # (a column kernel of its own then, with its warps: at cdcb47f)
    probe "tile_${tile//,/_}" COLUMN_TILE=$tile python3 bench/probes/step_kernels.py layer_norm 4096x32768 float16
done
