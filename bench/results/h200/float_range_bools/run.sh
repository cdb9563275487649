#!/usr/bin/env bash
# (s1/ of README.md: tree 96803df, with .before from c5d8ccc)
# Float scalars checked where the math's dtype is decided, maximum/minimum of bools (test_categories),
# and a traced matmul launch without split-K passing unzeroed placeholders for its workspace: the
# changed ops' tests compiled, then bench/probes/traced_launch.py (the compiled call's kernels and time, beside PyTorch eager and
# torch.compile) on the tree before (.before: `git archive BEFORE tilegen generated | tar -x -C
# .before`) and after, in one call on the H200 from the repository root:
#   OUT=... bash bench/results/h200/float_range_bools/run.sh
set -uo pipefail
export PYTHONPATH="$PWD"
out="${OUT:-bench/out/float_range_bools}"
mkdir -p "$out"
timeout 60 python3 -m tilegen build specs/ --check > "$out/build.log" 2>&1; echo "build: $? $(tail -1 "$out/build.log")"
ops="fma_clamp scaled_silu_mul masked_scale rms_norm layer_norm add_rms_norm rms_scale_exp matmul_residual_scaled clamp_add matmul_relu"
timeout 330 python3 -m pytest -q -n 16 --dist worksteal -p no:cacheprovider tests/test_runtime.py tests/test_callpath.py tests/test_categories.py \
    $(for op in $ops; do echo generated/tests/test_$op.py; done) > "$out/tests.log" 2>&1
echo "tests: $? $(tail -1 "$out/tests.log")"
for shape in 512x384x256 2048x2048x2048; do
    for tree in before after; do
        root=$PWD; [[ $tree == before ]] && root=$PWD/.before
        PYTHONPATH=$root PACKAGE=$root/generated timeout 120 python3 bench/probes/traced_launch.py matmul_relu $shape float16 \
            > "$out/probe_${shape}_$tree.txt" 2>&1
        echo "probe $shape $tree: $? $(grep -c 'a call' "$out/probe_${shape}_$tree.txt") timed"
    done
done
