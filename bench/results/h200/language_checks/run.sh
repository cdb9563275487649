#!/bin/bash
# This session's language and rendering fixes, their tests compiled on the H200: a reduction's
# comparison steps (bool) and bool mask inputs with -inf (a masked softmax), a reduction op whose
# outputs give no input a gradient, a matmul whose epilogue gives none through a backward op, and
# the LOOP config on every reduction op. Each test builds its specs' package and runs its
# generated tests (compiled kernels, torch.compile, export, CUDA graphs).
#   OUT=... bash bench/results/h200/language_checks/run.sh   (PYTHONPATH at the checkout)
set -u
export PYTHONPATH=$PWD
out=${OUT:-/tmp/language_checks}; mkdir -p "$out"
timeout 420 python3 -m pytest -v -n 16 -p no:cacheprovider tests/test_reductions.py tests/test_unusual_specs.py \
    tests/test_expressions.py -k "mask or bool or no_input_a_gradient or no_backward_op or block_holds or inf_is" \
    > "$out/tests.log" 2>&1
echo "tests: $? ($(tail -1 "$out/tests.log"))"
