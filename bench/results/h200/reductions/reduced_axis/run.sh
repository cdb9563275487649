#!/usr/bin/env bash
# Reductions over another axis (`dim=`), from the checkout on the GPU machine:
#   OUT=DIR bash bench/results/h200/reductions/reduced_axis/run.sh
# tiles/: every case, the across-rows tiles ROW_TILES forced; across/: the first-axis cases only,
# the tiles ACROSS_TILES forced (`--across`); then the reduction ops' compile, export and dim= tests.
set -uo pipefail
cd "$(dirname "$0")/../../../../.."
export PYTHONPATH="$PWD"
out="${OUT:-bench/out/reduced_axis}"
mkdir -p "$out/tiles" "$out/across"
timeout 560 python3 bench/probes/reduced_axis.py "$out/tiles" > "$out/tiles/reduced_axis.txt" 2>&1
timeout 120 python3 bench/probes/reduced_axis.py "$out/across" --across > "$out/across/reduced_axis.txt" 2>&1
timeout 230 python3 -m pytest -q -n 16 -p no:cacheprovider --tb=short tests/test_reduced_axis.py \
    generated/tests/test_softmax.py generated/tests/test_log_softmax.py generated/tests/test_rms_norm.py \
    generated/tests/test_layer_norm.py generated/tests/test_add_rms_norm.py \
    -k "compile or reduced or another or one_element" > "$out/tests.log" 2>&1
echo "tests: $? ($(tail -1 "$out/tests.log"))"
