"""Where a training step's host time goes, every thread's (the autograd engine's backward thread
included, which cProfile on the main thread misses): one op's forward+backward steps back to back,
wall time a step against the step's kernels' GPU time, then torch.profiler's CPU events by their
own time.

    PYTHONPATH=. python3 bench/probes/step_host.py layer_norm 512x32768 [float16]
"""
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

from tilegen.measure import load_bench_modules
from tilegen.runtime import callpath
from tilegen.training_bench import leaves, output_seeds, step_function

STEPS = 50


def main(op, shape_text, dtype_name="float16"):
    callpath.load(wait=True)
    module = load_bench_modules([op], "generated")[0]
    shape = tuple(int(s) for s in shape_text.split("x"))
    inputs = leaves(module.make_inputs(shape, getattr(torch, dtype_name), device="cuda"))
    seeds = output_seeds(module, inputs)
    for provider, forward in (("tilegen", module.run_tilegen), ("torch", module.run_torch)):
        step = step_function(forward, inputs, seeds)
        for _ in range(5):
            step()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(STEPS):
            step()
        torch.cuda.synchronize()
        wall = (time.perf_counter() - start) / STEPS * 1e6
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                step()
            torch.cuda.synchronize()
        print(f"{op} {shape_text} {dtype_name} {provider}: {wall:.1f} us a step, back to back")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=18, max_name_column_width=70))


if __name__ == "__main__":
    main(*sys.argv[1:])
