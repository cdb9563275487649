"""Where a training step's host time goes: eager forward+backward steps of ops on small inputs
(GPU), tilegen beside eager PyTorch, each issued back to back and synchronized at the end (on
inputs this small the host bounds the step), then cProfile of tilegen's steps.

    PYTHONPATH=. [DTYPE=float32] python3 bench/probes/training_step_profile.py [OP SHAPE]...
    (default: add 4096, matmul 1024x1024x1024, matmul_bias_gelu 1024x1024x1024, scaled_silu_mul 65536;
    DTYPE float16)
"""
import cProfile
import os
import pstats
import sys
import time

import torch

from tilegen.measure import load_bench_modules
from tilegen.runtime import callpath
from tilegen.training_bench import leaves, output_seeds, step_function

callpath.load(wait=True)
DEFAULT = [("add", "4096"), ("matmul", "1024x1024x1024"), ("matmul_bias_gelu", "1024x1024x1024"),
           ("scaled_silu_mul", "65536")]


def per_step_us(step, count):
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(count):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / count * 1e6


def main(cases):
    dtype = getattr(torch, os.environ.get("DTYPE", "float16"))
    for op, shape_text in cases:
        module = load_bench_modules([op], "generated")[0]
        shape = tuple(int(s) for s in shape_text.split("x"))
        inputs = leaves(module.make_inputs(shape, dtype))
        seeds = output_seeds(module, inputs)
        steps = {provider: step_function(getattr(module, f"run_{provider}"), inputs, seeds)
                 for provider in ("tilegen", "torch")}
        for step in steps.values():
            per_step_us(step, 20)  # compiles, chooses configs, learns the call path's signatures
        # Interleaved rounds: the host's speed drifts.
        rounds = {provider: [] for provider in steps}
        for _ in range(5):
            for provider, step in steps.items():
                rounds[provider].append(per_step_us(step, 200))
        line = ", ".join(f"{p} {min(r):.1f}-{max(r):.1f} us" for p, r in rounds.items())
        print(f"{op} {shape_text}: per step (wall, 5 rounds of 200) {line}")
        profile = cProfile.Profile()
        profile.enable()
        per_step_us(steps["tilegen"], 200)
        profile.disable()
        pstats.Stats(profile).sort_stats("tottime").print_stats(14)


if __name__ == "__main__":
    args = sys.argv[1:]
    main([args[i:i + 2] for i in range(0, len(args), 2)] if args else DEFAULT)
