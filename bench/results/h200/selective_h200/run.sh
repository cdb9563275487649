#!/usr/bin/env bash
# Compiled on the GPU: the selective backwards (STORES: only the gradients asked for; read_by: a
# matmul keeps an operand only where the other needs its gradient).
# PART=a (the default): the generated tests of every op's gradients, backward, opcheck and
# requires_grad; the autograd tests of what is computed and kept; bench/probes/
# frozen_stack_memory.py (what a stack of frozen matmul layers holds for its backward) and
# frozen_grid.py (a frozen norm weight's backward grid), beside eager and torch.compile; then
# centred_range's generated opcheck (tests/test_decided_statistics.py's spec) built by this tree's
# tilegen, and by OLD's where OLD names a folder holding an older one.
# PART=b: every op's generated opcheck tests and centred_range's (opcheck held to the dtype's
# tolerance relative to what it compares), then frozen_stack_memory.py on this tree and, where
# BEFORE names a folder holding an older tilegen and generated package, on that one.
#   OUT=... [PART=a|b] [OLD=folder] [BEFORE=folder] bash bench/results/h200/selective_h200/run.sh
set -uo pipefail
export PYTHONPATH="$PWD"
out="${OUT:-bench/out/selective_h200}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/gpu.txt" 2>&1
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> "$out/gpu.txt" 2>&1
git status --short > "$out/tree.txt" 2>/dev/null
timeout 40 python3 -m tilegen build specs/ --check > "$out/build.log" 2>&1; echo "build: $? $(tail -1 "$out/build.log")"

# centred_range built by the tilegen at $2 into a fresh folder; its opcheck and compiled backward
# tests (within $3 seconds), each failure kept whole.
centred_range() {
    local name="$1" tilegen="$2" root="/tmp/centred_$1"
    rm -rf "$root" && mkdir -p "$root/specs"
    python3 -c "import sys; sys.path.insert(0, 'tests'); import test_decided_statistics as t; print(t.CENTRED_RANGE)" \
        > "$root/specs/centred_range.yaml"
    (cd "$root" && PYTHONPATH="$tilegen" timeout 30 python3 -m tilegen build specs/ > "$out/centred_$name.log" 2>&1 &&
        PYTHONPATH="$tilegen:$root" timeout "$3" python3 -m pytest -q -n 8 -p no:cacheprovider --tb=long \
            generated/tests/test_centred_range.py -k "opcheck or compiles_whole" >> "$out/centred_$name.log" 2>&1)
    echo "centred_range by $name: $? $(tail -1 "$out/centred_$name.log")"
    grep -E "Mismatch|Greatest|FAILED|dtype=" "$out/centred_$name.log" | head -12
}

case "${PART:-a}" in
a)
    timeout 270 python3 -m pytest -q -n 16 --dist worksteal -p no:cacheprovider -rs generated/tests \
        -k "gradient or backward or opcheck or require" > "$out/tests_generated.log" 2>&1
    echo "generated tests: $? $(tail -1 "$out/tests_generated.log")"
    grep -E "^(FAILED|ERROR)" "$out/tests_generated.log" | head -20
    timeout 50 python3 -m pytest -q -n 8 -p no:cacheprovider -rs tests/test_autograd.py \
        -k "keeps_an_operand or computes_only_the_gradients or only_the_products" > "$out/tests_autograd.log" 2>&1
    echo "autograd tests: $? $(tail -1 "$out/tests_autograd.log")"
    grep -E "^(FAILED|ERROR)" "$out/tests_autograd.log" | head -20
    for probe in frozen_stack_memory frozen_grid; do
        timeout 70 python3 bench/probes/$probe.py > "$out/$probe.txt" 2>&1
        echo "$probe: $?"; cat "$out/$probe.txt"
    done
    centred_range main "$PWD" 60
    if [ -n "${OLD:-}" ]; then centred_range old "$PWD/$OLD" 50; fi
    ;;
b)
    timeout 60 python3 -m pytest -q -n 16 --dist worksteal -p no:cacheprovider -rs generated/tests -k opcheck \
        > "$out/tests_opcheck.log" 2>&1
    echo "opcheck tests: $? $(tail -1 "$out/tests_opcheck.log")"
    grep -E "^(FAILED|ERROR)" "$out/tests_opcheck.log" | head -20
    centred_range main "$PWD" 45
    timeout 50 python3 bench/probes/frozen_stack_memory.py > "$out/frozen_stack_memory.txt" 2>&1
    echo "frozen_stack_memory: $?"; cat "$out/frozen_stack_memory.txt"
    if [ -n "${BEFORE:-}" ]; then
        PYTHONPATH="$PWD/$BEFORE" timeout 50 python3 bench/probes/frozen_stack_memory.py \
            > "$out/frozen_stack_memory_before.txt" 2>&1
        echo "frozen_stack_memory before: $?"; cat "$out/frozen_stack_memory_before.txt"
    fi
    ;;
esac
