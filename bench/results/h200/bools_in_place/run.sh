#!/usr/bin/env bash
# (s1/ of README.md) + and * of two bools as or/and, an elementwise out= that is an input itself:
# the changed tests compiled; then where a matmul_residual_scaled training step's peak goes at
# 1088x832x544 (bench/probes/step_allocations.py on the GPU: the caching allocator's blocks) and
# the step benched beside eager autograd. In one call on the H200, from the repository root:
#   OUT=... bash bench/results/h200/bools_in_place/run.sh
set -uo pipefail
export PYTHONPATH="$PWD"
out="${OUT:-bench/out/bools_in_place}"
mkdir -p "$out"
timeout 60 python3 -m tilegen build specs/ --check > "$out/build.log" 2>&1; echo "build: $? $(tail -1 "$out/build.log")"
ops="add bias_gelu clamp_add fma_clamp masked_scale rms_scale_exp scaled_silu_mul"
timeout 300 python3 -m pytest -q -n 16 --dist worksteal -p no:cacheprovider tests/test_runtime.py tests/test_categories.py \
    $(for op in $ops; do echo generated/tests/test_$op.py; done) > "$out/tests.log" 2>&1
echo "tests: $? $(tail -1 "$out/tests.log")"
timeout 120 python3 bench/probes/step_allocations.py matmul_residual_scaled 1088x832x544 float16 cuda \
    > "$out/allocations_residual.txt" 2>&1; echo "allocations: $? $(grep -c KiB "$out/allocations_residual.txt")"
timeout 150 python3 -m tilegen bench matmul_residual_scaled --backward --dtype float16 \
    --shapes 1088x832x544,1024x1024x1024,4096x4096x4096 --out "$out/backward" > "$out/backward.log" 2>&1
echo "backward: $? $(grep -c us "$out/backward.log")"
# fp8_scaled_mm at 128x4096x4096 per-tensor: narrow N tiles, no split or a split of 2, BK 256 (the
# probe's `narrow` space, beside _scaled_mm with fast accumulation).
timeout 150 python3 bench/probes/fp8_skinny_configs.py narrow > "$out/fp8_skinny_narrow.txt" 2>&1
echo "fp8 narrow: $? $(grep -c ' us' "$out/fp8_skinny_narrow.txt")"
