#!/usr/bin/env bash
# Compiled on the GPU: elementwise and reduction backward kernels that store only the gradients
# asked for (STORES; a frozen weight's or bias's columns not summed): the whole generated test
# matrix (every op's backward kernel changed: PART=generated), then the autograd, reduction and
# call-path tests and bench/probes/selective_backward.py's norms and elementwise steps with an
# input, a weight or a bias frozen, beside eager autograd and torch.compile (PART=rest).
#   OUT=... PART=generated|rest bash bench/results/h200/selective_fused/run.sh
set -uo pipefail
export PYTHONPATH="$PWD"
out="${OUT:-bench/out/selective_fused}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/gpu.txt" 2>&1
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> "$out/gpu.txt" 2>&1
git rev-parse HEAD > "$out/tree.txt" 2>/dev/null; git status --short >> "$out/tree.txt" 2>/dev/null
timeout 60 python3 -m tilegen build specs/ --check > "$out/build.log" 2>&1; echo "build: $? $(tail -1 "$out/build.log")"
case "${PART:-generated}" in
generated)
    timeout 570 python3 -m pytest -q -n 16 --dist worksteal -p no:cacheprovider -rs generated/tests \
        > "$out/tests_generated.log" 2>&1
    echo "tests: $? $(tail -1 "$out/tests_generated.log")"
    grep -E "^(FAILED|ERROR)" "$out/tests_generated.log" | head -20
    ;;
rest)
    timeout 300 python3 -m pytest -q -n 16 --dist worksteal -p no:cacheprovider -rs tests/test_autograd.py \
        tests/test_reductions.py tests/test_callpath.py tests/test_decided_statistics.py > "$out/tests.log" 2>&1
    echo "tests: $? $(tail -1 "$out/tests.log")"
    grep -E "^(FAILED|ERROR)" "$out/tests.log" | head -20
    timeout 270 python3 bench/probes/selective_backward.py norms elementwise > "$out/selective_backward.txt" 2>&1
    echo "probe: $?"
    cat "$out/selective_backward.txt"
    ;;
esac
