"""Generated ops in graphs traced with dynamic shapes, beside the same graphs with static ones.

For each case: the tilegen op eager, torch.compile of a call to it with static shapes, with its
leading axis dynamic (`torch._dynamo.mark_dynamic(x, 0)`: what a recompile after a batch size
changed makes), with every axis dynamic (`dynamic=True`), and PyTorch's own op eager and compiled
with `dynamic=True`. Each compiled graph is checked against the eager op first. A traced launch
keeps dynamic sizes symbolic (tilegen/runtime/sizes.py): where the reduced axis is dynamic a
reduction's rows loop (a tile cannot be known to hold them), and offsets go to 64 bits unless
the sizes' bounds keep them within 32. Medians of three interleaved do_bench rounds, ms.

    PYTHONPATH=. python3 bench/probes/dynamic_shapes.py [OUT_DIR]
"""

from __future__ import annotations

import functools
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import triton

from generated import add, layer_norm, matmul_relu, softmax

ROUNDS = 3


def cases():
    half = {"device": "cuda", "dtype": torch.float16}
    a, b = torch.randn(8192, 4096, **half), torch.randn(8192, 4096, **half)
    yield "add", (a, b), add, torch.add
    x, w = torch.randn(4000, 4096, **half), torch.randn(4096, 4096, **half)
    yield "matmul_relu", (x, w), matmul_relu, lambda p, q: torch.relu(p @ q)
    rows = torch.randn(16384, 1024, **half)
    yield "softmax", (rows,), softmax, lambda t: torch.softmax(t, -1)
    weight, bias = torch.randn(1024, **half), torch.randn(1024, **half)
    yield "layer_norm", (rows, weight, bias), lambda t, g, c: layer_norm(t, g, c)[0], \
        lambda t, g, c: F.layer_norm(t, (1024,), g, c)


def first(result):
    return result[0] if isinstance(result, tuple) else result


def time_case(name, args, op, pytorch):
    """Lines of text: each variant's median time, after checking its result against the op's."""
    torch._dynamo.reset()
    leading = [a.clone() for a in args]
    for tensor in leading:  # (the inputs that share the first one's leading axis: add's both)
        if tensor.dim() == args[0].dim() and tensor.shape[0] == args[0].shape[0]:
            torch._dynamo.mark_dynamic(tensor, 0)
    variants = {
        "tilegen eager": (lambda: op(*args), None),
        "tilegen compiled, static": (torch.compile(op, fullgraph=True, dynamic=False), args),
        "tilegen compiled, leading axis dynamic": (torch.compile(op, fullgraph=True), leading),
        "tilegen compiled, dynamic=True": (torch.compile(op, fullgraph=True, dynamic=True), args),
        "pytorch eager": (lambda: pytorch(*args), None),
        "pytorch compiled, dynamic=True": (torch.compile(pytorch, dynamic=True), args),
    }
    want = first(op(*args)).float()
    calls = {}
    for label, (fn, inputs) in variants.items():
        call = fn if inputs is None else functools.partial(fn, *inputs)
        got = first(call()).float()
        torch.testing.assert_close(got, want, atol=5e-2, rtol=5e-2, msg=f"{name} {label}")
        calls[label] = call
    times = {label: [] for label in calls}
    for _ in range(ROUNDS):
        for label, call in calls.items():
            times[label].append(triton.testing.do_bench(call, warmup=25, rep=100))
    shape = "x".join(map(str, args[0].shape))
    return [f"{name:12s} {shape:>10s} {label:42s} {statistics.median(samples):8.4f} ms"
            for label, samples in times.items()]


def main(out_dir: str) -> None:
    lines = []
    for case in cases():
        for line in time_case(*case):
            print(line, flush=True)
            lines.append(line)
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    (Path(out_dir) / "dynamic_shapes.txt").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bench/out/dynamic_shapes")
