"""Host time per call before and after the runtime library, in one process: the package generated
by the tree before it (its own _runtime/_native/_fastpath, passed as BEFORE=folder holding a copy
named generated_before) against today's `generated` (tilegen.runtime's compiled call path), beside
torch.add / torch.mm, on the bench's small shapes (add 4096 fp16, matmul 64^3 fp16) and every
other op's small shape. 9 interleaved rounds of 1000-call batches, medians (host_timing.py).
Each op's result is checked against the other tree's first.

    git archive 8d8c0d7 generated | tar -x -C /tmp/before && mv /tmp/before/generated /tmp/before/generated_before
    BEFORE=/tmp/before PYTHONPATH=. python3 bench/probes/host_before_after.py
"""
import importlib
import os
import sys
import time

import torch

import generated as after
from host_timing import interleaved_medians
from tilegen.runtime import callpath

sys.path.insert(0, os.environ["BEFORE"])
before = importlib.import_module("generated_before")
before_fast = importlib.import_module("generated_before._fastpath")
before_native = importlib.import_module("generated_before._native")

start = time.perf_counter()
assert callpath.load(wait=True) is not None, callpath.UNAVAILABLE
assert before_fast.load(wait=True) is not None and before_native.load() is not None, before_fast.UNAVAILABLE
print(f"both compiled call paths ready after {time.perf_counter() - start:.1f} s")
print("triton", __import__("triton").__version__, "torch", torch.__version__, torch.cuda.get_device_name())

CASES = [  # op, its bench module (small shape, inputs, PyTorch counterpart)
    (op, importlib.import_module(f"generated.bench.bench_{op}")) for op in after.__all__
]
print(f"{'op':<24} {'before us':>10} {'after us':>10} {'torch us':>10}   after/torch")
for op, bench in CASES:
    inputs = bench.make_inputs(bench.SMALL_SHAPE, bench.DTYPES[0])
    new, old = getattr(after, op), getattr(before, op)
    got, want = bench.run_tilegen(inputs), old(*inputs, **bench.SCALARS)
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, equal_nan=True)
    calls = {
        "before": lambda: old(*inputs, **bench.SCALARS),
        "after": lambda: bench.run_tilegen(inputs),
        "torch": lambda: bench.run_torch(inputs),
    }
    medians = interleaved_medians(calls)
    b, a, t = (medians[name][0] for name in ("before", "after", "torch"))
    print(f"{op:<24} {b:10.2f} {a:10.2f} {t:10.2f}   {a / t:.2f}x")
