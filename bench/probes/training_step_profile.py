"""Where a training step's host time goes: cProfile of eager forward+backward steps of one
matmul op and one elementwise op on small inputs (GPU). Run: PYTHONPATH=. python3 bench/probes/training_step_profile.py"""

import cProfile
import pstats
import time

import torch

import generated
from tilegen.runtime import callpath

callpath.load(wait=True)


def steps(fn, inputs, seeds, count):
    for _ in range(count):
        torch.autograd.grad(fn(*inputs), inputs, seeds)
    torch.cuda.synchronize()


cases = {
    "matmul_bias_gelu 1024^3": (generated.matmul_bias_gelu, [torch.randn(1024, 1024), torch.randn(1024, 1024),
                                                              torch.randn(1024)]),
    "scaled_silu_mul 2^16": (generated.scaled_silu_mul, [torch.randn(1 << 16), torch.randn(1 << 16)]),
}
for label, (fn, inputs) in cases.items():
    inputs = [t.to("cuda", torch.float16).requires_grad_() for t in inputs]
    seeds = torch.randn_like(fn(*inputs))
    steps(fn, inputs, seeds, 20)
    start = time.perf_counter()
    steps(fn, inputs, seeds, 200)
    print(f"{label}: {(time.perf_counter() - start) / 200 * 1e6:.1f} us per step (wall, synchronized at the end)")
    profile = cProfile.Profile()
    profile.enable()
    steps(fn, inputs, seeds, 200)
    profile.disable()
    pstats.Stats(profile).sort_stats("tottime").print_stats(18)
