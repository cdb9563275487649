"""Which kernels a forward call runs eager and under torch.compile: one op at one shape, tilegen's
call and PyTorch's form, each eager and compiled with static shapes, traced by torch.profiler
(each kernel's mean GPU time a call, and the call's summed kernel time). With
TORCH_LOGS=output_code the compiled graphs' code goes to stderr.

    PYTHONPATH=. python3 bench/probes/compiled_kernels.py layer_norm 16384x1024 [float16]
"""
import sys

import torch

from step_kernels import kernel_times
from tilegen.measure import load_bench_modules


def main(op, shape_text, dtype_name="float16"):
    module = load_bench_modules([op], "generated")[0]
    shape = tuple(int(s) for s in shape_text.split("x"))
    inputs = module.make_inputs(shape, getattr(torch, dtype_name), device="cuda")
    for provider, forward in (("tilegen", module.run_tilegen), ("torch", module.run_torch)):
        compiled = torch.compile(forward, fullgraph=True, dynamic=False)
        for mode, call in (("eager", forward), ("compiled", compiled)):
            times = kernel_times(lambda: call(inputs))
            print(f"{op} {shape_text} {dtype_name} {provider} {mode}: {sum(times.values()):.1f} us of kernels a call")
            for name, us in sorted(times.items(), key=lambda item: -item[1]):
                print(f"  {us:8.1f} us  {name}")


if __name__ == "__main__":
    main(*sys.argv[1:])
