#!/bin/bash
# Inductor's kernels and cuBLAS's where tilegen is behind: bench/probes/compiled_kernels.py on the
# H200 (max-autotune for the reductions, the default mode for the batched products, whose
# cuBLAS kernel names carry their tiles). Run from the checkout: OUT=... bash THIS
set -u
export PYTHONPATH=$PWD
out=${OUT:-/tmp/anchors}; mkdir -p "$out"
probe() {  # NAME, then the probe's arguments
    local name=$1; shift
    timeout 150 python3 bench/probes/compiled_kernels.py "$@" > "$out/$name.log" 2>&1
    echo "$name: $?"
}
MODE=max-autotune-no-cudagraphs KERNELS=$out/inductor probe rms_norm_f32 rms_norm 4096x32768 float32
MODE=max-autotune-no-cudagraphs KERNELS=$out/inductor probe add_rms_norm_f32 add_rms_norm 4096x32768 float32
MODE=max-autotune-no-cudagraphs KERNELS=$out/inductor probe softmax_512 softmax 512x32768 float16
for shape in 32x2048x2048x128 8x1024x1024x1024 4x4096x4096x4096; do
    probe "bmm_$shape" bmm $shape float16
done
