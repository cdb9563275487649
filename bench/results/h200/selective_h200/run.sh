#!/usr/bin/env bash
# On an H200, compiled: the selective elementwise and reduction backwards (STORES) first measured
# on an H100 (selective_fused/). PART=a: build --check, the whole generated test matrix, then
# bench/probes/frozen_grid.py (a frozen norm weight's backward grid). PART=b: the autograd,
# reduction, call-path and decided-statistics tests; centred_range's generated opcheck built by
# this tree's tilegen and, where OLD names a folder holding an older tilegen, by that one too; then
# bench/probes/frozen_stack_memory.py (what a stack of frozen matmul layers holds for its backward)
# and selective_backward.py's norms and elementwise steps beside eager and torch.compile.
#   OUT=... PART=a|b [OLD=folder] bash bench/results/h200/selective_h200/run.sh
set -uo pipefail
export PYTHONPATH="$PWD"
out="${OUT:-bench/out/selective_h200}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/gpu.txt" 2>&1
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> "$out/gpu.txt" 2>&1
git status --short > "$out/tree.txt" 2>/dev/null
timeout 60 python3 -m tilegen build specs/ --check > "$out/build.log" 2>&1; echo "build: $? $(tail -1 "$out/build.log")"

# centred_range (tests/test_decided_statistics.py's spec) built by the tilegen at $1 into a fresh
# folder; its opcheck with autograd, the whole failure kept.
centred_range() {
    local name="$1" tilegen="$2" root="/tmp/centred_$1"
    rm -rf "$root" && mkdir -p "$root/specs"
    python3 -c "import sys; sys.path.insert(0, 'tests'); import test_decided_statistics as t; print(t.CENTRED_RANGE)" \
        > "$root/specs/centred_range.yaml"
    (cd "$root" && PYTHONPATH="$tilegen" timeout 60 python3 -m tilegen build specs/ > "$out/centred_$name.log" 2>&1 &&
        PYTHONPATH="$tilegen:$root" timeout 200 python3 -m pytest -q -p no:cacheprovider --tb=long \
            generated/tests/test_centred_range.py -k "opcheck or compiles_whole or gradients_match" >> "$out/centred_$name.log" 2>&1)
    echo "centred_range by $name: $? $(tail -1 "$out/centred_$name.log")"
}

case "${PART:-a}" in
a)
    timeout 430 python3 -m pytest -q -n 16 --dist worksteal -p no:cacheprovider -rs generated/tests \
        > "$out/tests_generated.log" 2>&1
    echo "tests: $? $(tail -1 "$out/tests_generated.log")"
    grep -E "^(FAILED|ERROR)" "$out/tests_generated.log" | head -20
    timeout 110 python3 bench/probes/frozen_grid.py > "$out/frozen_grid.txt" 2>&1
    echo "frozen_grid: $?"
    cat "$out/frozen_grid.txt"
    ;;
b)
    timeout 240 python3 -m pytest -q -n 16 --dist worksteal -p no:cacheprovider -rs tests/test_autograd.py \
        tests/test_reductions.py tests/test_callpath.py tests/test_decided_statistics.py > "$out/tests.log" 2>&1
    echo "tests: $? $(tail -1 "$out/tests.log")"
    grep -E "^(FAILED|ERROR)" "$out/tests.log" | head -20
    centred_range main "$PWD"
    if [ -n "${OLD:-}" ]; then centred_range old "$PWD/$OLD"; fi
    timeout 120 python3 bench/probes/frozen_stack_memory.py > "$out/frozen_stack_memory.txt" 2>&1
    echo "memory: $?"
    cat "$out/frozen_stack_memory.txt"
    timeout 200 python3 bench/probes/selective_backward.py norms elementwise > "$out/selective_backward.txt" 2>&1
    echo "probe: $?"
    cat "$out/selective_backward.txt"
    ;;
esac
