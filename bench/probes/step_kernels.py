"""Which kernels a training step runs and how long each takes on the GPU: one op's forward+backward
step, tilegen beside its eager PyTorch form, traced by torch.profiler over a few steps (each
kernel's mean GPU time a step, and the step's summed kernel time).

    PYTHONPATH=. python3 bench/probes/step_kernels.py layer_norm 4096x4096 [float16]
    PACKAGE=.ab/A/generated ...   (another build of the package: an A/B of two trees' kernels)
    COLUMN_TILE=64,64 ...         (the column phase's columns a strip and rows a step, for long
                                   rows' backward, in place of configs.column_sums_tile's)
    CONFIG='{"BLOCK_N": 4096, "ROWS": 1, "num_warps": 16, "UNROLL": 0}' ...
                                  (the backward kernel's config, forced)
"""
import contextlib
import json
import os
import sys
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

from tilegen.measure import load_bench_modules
from tilegen.runtime import callpath
from tilegen.training_bench import leaves, output_seeds, step_function

STEPS = 20


def kernel_times(step):
    """{kernel name: GPU microseconds a step} over STEPS steps."""
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(STEPS):
            step()
        torch.cuda.synchronize()
    times = defaultdict(float)
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            times[event.name[:90]] += event.device_time / STEPS
    return times


def main(op, shape_text, dtype_name="float16"):
    callpath.load(wait=True)
    if os.environ.get("COLUMN_TILE"):
        import tilegen.runtime.ops as ops
        tile = tuple(int(v) for v in os.environ["COLUMN_TILE"].split(","))
        ops.column_sums_tile = lambda *args: tile
    module = load_bench_modules([op], os.environ.get("PACKAGE", "generated"))[0]
    print(f"{module.__name__}: {module.__file__}")
    shape = tuple(int(s) for s in shape_text.split("x"))
    inputs = leaves(module.make_inputs(shape, getattr(torch, dtype_name), device="cuda"))
    seeds = output_seeds(module, inputs)
    forced = contextlib.nullcontext()
    if os.environ.get("CONFIG"):
        from tilegen.runtime import backward_op_of
        forced = backward_op_of(module.run_tilegen.__module__.replace("bench.bench_", "")).configs.forcing(
            json.loads(os.environ["CONFIG"]))
    for provider, forward in (("tilegen", module.run_tilegen), ("torch", module.run_torch)):
        with forced if provider == "tilegen" else contextlib.nullcontext():
            times = kernel_times(step_function(forward, inputs, seeds))
        print(f"{op} {shape_text} {dtype_name} {provider}: {sum(times.values()):.1f} us of kernels a step")
        for name, us in sorted(times.items(), key=lambda item: -item[1]):
            print(f"  {us:8.1f} us  {name}")


if __name__ == "__main__":
    main(*sys.argv[1:])
