#!/usr/bin/env bash
# The column phase with each step's loads issued the step before, against the tree before it
# (BEFORE: a folder holding that tree's generated/, e.g. `git archive d2d4682 generated | tar -x -C
# bench/out/before`, carried to the GPU machine), on the H200: the reduction tests compiled, each
# kernel's GPU time a training step at rows of 32768 (bench/probes/step_kernels.py) on both trees
# and, for this one, two more column tiles; then the training step beside eager and torch.compile.
#   OUT=$OUT/p BEFORE=bench/out/before bash bench/results/h200/reductions/column_prefetch/run.sh
set -uo pipefail
cd "$(dirname "$0")/../../../../.."
export PYTHONPATH="$PWD"
out="${OUT:?}"
before="${BEFORE:?}/generated"
mkdir -p "$out"
python3 -m tilegen build specs/ --check > "$out/build.log" 2>&1; echo "build: $? ($(tail -1 "$out/build.log"))"
timeout 200 python3 -m pytest -q -n 16 -p no:cacheprovider tests/test_reductions.py \
    generated/tests/test_rms_norm.py generated/tests/test_layer_norm.py generated/tests/test_add_rms_norm.py \
    > "$out/tests.log" 2>&1; echo "tests: $? ($(tail -1 "$out/tests.log"))"
IFS=';' read -ra points <<< "${POINTS:-layer_norm 4096x32768 float16;layer_norm 4096x32768 float32;rms_norm 4096x32768 float16;add_rms_norm 4096x32768 float16}"
for point in "${points[@]}"; do
    set -- $point
    for run in before rule ${TILES:-64,128 128,64}; do
        name="$out/${run/,/x}_$1_$2_$3.txt"
        case $run in
            before) PACKAGE=$before timeout 60 python3 bench/probes/step_kernels.py "$@" > "$name" 2>&1 ;;
            rule) timeout 60 python3 bench/probes/step_kernels.py "$@" > "$name" 2>&1 ;;
            *) COLUMN_TILE=$run timeout 60 python3 bench/probes/step_kernels.py "$@" > "$name" 2>&1 ;;
        esac
        echo "$run $*: $(grep -m1 'us of kernels' "$name" | sed 's/.*: //') $(grep -m1 '_backward_kernel' "$name" | awk '{print $1}')"
    done
done
[[ -n ${NO_BENCH:-} ]] && exit 0
timeout 150 python3 -m tilegen bench layer_norm rms_norm add_rms_norm --backward --compile \
    --shapes 4096x32768 --dtype float16 --out "$out/training" > "$out/bench.log" 2>&1
echo "bench: $?"; grep "^\[" "$out/bench.log"
