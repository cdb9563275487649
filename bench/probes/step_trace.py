"""Why a 4096^3 training step slows when its products load column-major operands through
descriptors (bench/results/h200/transposed_products): one op's step with those descriptors allowed
and refused (tma_orientation patched to refuse column-major operands: main's behaviour), each
timed by do_bench, by wall time over back-to-back steps, and traced (torch.profiler: each kernel's
GPU time in the step); then the step's own products timed alone on the main thread.

    PYTHONPATH=. python3 bench/probes/step_trace.py [OP] [SHAPE]   (default matmul 4096x4096x4096)
"""
import importlib
import sys
import time

import torch
import triton
from torch.profiler import ProfilerActivity, profile

from tilegen.measure import load_bench_modules
from tilegen.runtime import callpath, layout, ops
from tilegen.training_bench import leaves, output_seeds, step_function

callpath.load(wait=True)
op = sys.argv[1] if len(sys.argv) > 1 else "matmul"
shape = tuple(int(s) for s in (sys.argv[2] if len(sys.argv) > 2 else "4096x4096x4096").split("x"))
module = load_bench_modules([op], "generated")[0]
inputs = leaves(module.make_inputs(shape, torch.float16))
seeds = output_seeds(module, inputs)
step = step_function(module.run_tilegen, inputs, seeds)
allowed = layout.tma_orientation


def refused(t):
    found = allowed(t)
    return None if found == "columns" else found


private = importlib.import_module(f"generated.{op}")
# (Descriptor launches are never learned by the compiled call path; pointer launches are, so they
# are forgotten before descriptors are allowed again.)
for mode, orientation in (("descriptors for column-major operands", allowed), ("pointers for them (main)", refused),
                          ("descriptors again", allowed)):
    ops.tma_orientation = layout.tma_orientation = orientation
    private._OP.product_path.forget()
    for _ in range(5):
        step()
    torch.cuda.synchronize()
    bench = triton.testing.do_bench(step) * 1e3
    start = time.perf_counter()
    for _ in range(100):
        step()
    host = (time.perf_counter() - start) / 100 * 1e6
    torch.cuda.synchronize()
    wall = (time.perf_counter() - start) / 100 * 1e6
    print(f"== {op} {shape} float16, {mode}: do_bench {bench:.1f} us; 100 steps back to back: "
          f"host {host:.1f} us a step, wall {wall:.1f} us a step")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            step()
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12, max_name_column_width=60))

# The step's products alone, on the main thread, the table's config (not forced).
a, b = (t.detach() for t in inputs[:2])
g = seeds[0]
for label, (x, y) in {"dZ @ B^T": (g, b.t()), "A^T @ dZ": (a.t(), g)}.items():
    for mode, orientation in (("descriptors", allowed), ("pointers", refused)):
        ops.tma_orientation = layout.tma_orientation = orientation
        private._OP.product_path.forget()
        private._OP.product(x, y)
        us = triton.testing.do_bench(lambda: private._OP.product(x, y)) * 1e3
        print(f"{label} alone, {mode}: {us:.1f} us")
