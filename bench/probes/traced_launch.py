"""A matmul op's launch inside torch.compile beside its eager call, at one shape: the config each
call takes (eager: the table's entry; traced: its pointer-load twin), the kernels each call runs
(torch.profiler GPU time) and its do_bench time, in torch.compile's default mode and in
max-autotune-no-cudagraphs (what `tilegen bench --compile` times as 'in compile'), then PyTorch's
own eager call and its torch.compile, timed the same way.

    PYTHONPATH=. python3 bench/probes/traced_launch.py matmul_residual_scaled 4096x11008x4096 [float16]
    CONFIGS='[{"BLOCK_M": 128, ...}, ...]' ...   (then each config forced: eager, and inside
                                                  max-autotune-no-cudagraphs, kernel time a call)
    PYTHONPATH=OTHER PACKAGE=OTHER/generated ...  (another tree's package and runtime: an A/B)
"""
import importlib
import json
import os
import sys

import torch
import triton
from step_kernels import kernel_times

from tilegen.measure import load_bench_modules


def main(op, shape_text, dtype_name="float16"):
    module = load_bench_modules([op], os.environ.get("PACKAGE", "generated"))[0]
    shape = tuple(int(s) for s in shape_text.split("x"))
    inputs = module.make_inputs(shape, getattr(torch, dtype_name), device="cuda")
    configs = importlib.import_module(f"generated.{op}")._OP.configs
    calls = [("eager", module.run_tilegen)]
    for mode in (None, "max-autotune-no-cudagraphs"):
        torch._dynamo.reset()
        calls.append((f"compiled ({mode or 'default'})",
                      torch.compile(module.run_tilegen, fullgraph=True, dynamic=False, mode=mode)))
        with configs.recording() as chosen:
            calls[-1][1](inputs)  # trace and compile here, recording the traced launch's choice
        print(f"{op} {shape_text} {dtype_name} {calls[-1][0]}: traced launch chose {chosen}")
        calls[-1][1](inputs)
    with configs.recording() as chosen:
        module.run_tilegen(inputs)
    print(f"{op} {shape_text} {dtype_name} eager: chose {chosen}")
    # PyTorch's own: the eager call and its torch.compile (default mode), timed the same way.
    calls += [("torch eager", module.run_torch),
              ("torch compiled (default)", torch.compile(module.run_torch, fullgraph=True, dynamic=False))]
    calls[-1][1](inputs)
    for name, call in calls:
        ms = triton.testing.do_bench(lambda call=call: call(inputs), warmup=25, rep=200)
        times = kernel_times(lambda call=call: call(inputs))
        print(f"{name}: {ms * 1000:.1f} us a call (do_bench), {sum(times.values()):.1f} us of kernels")
        for kernel, us in sorted(times.items(), key=lambda item: -item[1]):
            print(f"  {us:8.1f} us  {kernel}")
    for config in json.loads(os.environ.get("CONFIGS", "[]")):
        with configs.forcing(config):
            torch._dynamo.reset()
            compiled = torch.compile(module.run_tilegen, fullgraph=True, dynamic=False,
                                     mode="max-autotune-no-cudagraphs")
            found = [sum(kernel_times(lambda call=call: call(inputs)).values())
                     for call in (module.run_tilegen, compiled)]
        print(f"forced {config}: eager {found[0]:.1f} us, in compile {found[1]:.1f} us of kernels a call")


if __name__ == "__main__":
    main(*sys.argv[1:])
