#!/usr/bin/env bash
# Compiled on the GPU: an elementwise backward kernel loads an input only where a gradient asked
# for reads it (ElementwiseOp reads=, the kernels' gated loads), and autograd keeps such an input
# as its shape alone (Gradients read_by). The generated tests of the two ops whose kernels gate a
# load (scaled_silu_mul, rms_scale_exp), every op's backward compiled with each input alone
# requiring grad (what a traced formula keeps, stand-ins included), the autograd tests of what is
# kept and computed, and
# bench/probes/frozen_gate_memory.py on this tree and, where BEFORE names a folder holding an older
# tilegen and generated package, on that one.
#   OUT=... [BEFORE=folder] bash bench/results/h200/gated_loads/run.sh
set -uo pipefail
export PYTHONPATH="$PWD"
out="${OUT:-bench/out/gated_loads}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/gpu.txt" 2>&1
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> "$out/gpu.txt" 2>&1
git status --short > "$out/tree.txt" 2>/dev/null
timeout 40 python3 -m tilegen build specs/ --check > "$out/build.log" 2>&1; echo "build: $? $(tail -1 "$out/build.log")"
timeout 150 python3 -m pytest -q -n 16 --dist worksteal -p no:cacheprovider -rs \
    generated/tests/test_scaled_silu_mul.py generated/tests/test_rms_scale_exp.py > "$out/tests_generated.log" 2>&1
echo "generated tests: $? $(tail -1 "$out/tests_generated.log")"
grep -E "^(FAILED|ERROR)" "$out/tests_generated.log" | head -20
timeout 120 python3 -m pytest -q -n 16 -p no:cacheprovider -rs generated/tests -k "each_input_alone_compiles" \
    > "$out/tests_alone_compiled.log" 2>&1
echo "each input alone, compiled: $? $(tail -1 "$out/tests_alone_compiled.log")"
grep -E "^(FAILED|ERROR)" "$out/tests_alone_compiled.log" | head -20
timeout 60 python3 -m pytest -q -n 8 -p no:cacheprovider -rs tests/test_autograd.py \
    -k "keeps_an or computes_only_the_gradients or only_the_products" > "$out/tests_autograd.log" 2>&1
echo "autograd tests: $? $(tail -1 "$out/tests_autograd.log")"
grep -E "^(FAILED|ERROR)" "$out/tests_autograd.log" | head -20
timeout 60 python3 bench/probes/frozen_gate_memory.py > "$out/frozen_gate_memory.txt" 2>&1
echo "frozen_gate_memory: $?"; cat "$out/frozen_gate_memory.txt"
if [ -n "${BEFORE:-}" ]; then
    PYTHONPATH="$PWD/$BEFORE" timeout 60 python3 bench/probes/frozen_gate_memory.py \
        > "$out/frozen_gate_memory_before.txt" 2>&1
    echo "frozen_gate_memory before: $?"; cat "$out/frozen_gate_memory_before.txt"
fi
