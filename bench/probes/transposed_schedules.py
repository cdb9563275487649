"""Which schedule a backward's product wants when an operand is column-major and loads through
tensor descriptors (bench/results/h200/transposed_products): matmul's product kernel on the
products of a training step at the matmul ops' large default shapes, with the config the products'
table picks and with that tile forced tiled and persistent, 3 and 4 stages; do_bench medians of the
compiled call path's launches (descriptors encoded in C++, so host time stays out), float16.

    PYTHONPATH=. python3 bench/probes/transposed_schedules.py
"""
import importlib

import torch
import triton

from tilegen.runtime import callpath

callpath.load(wait=True)
module = importlib.import_module("generated.matmul")
op = module._OP


def column_major(t):
    return t.t().contiguous().t()


def products(m, n, k):
    """A step of [m, k] @ [k, n]: dA = dZ @ B^T (y column-major), dB = A^T @ dZ (x column-major)."""
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(m, k, device="cuda", generator=g).half()
    b = torch.randn(k, n, device="cuda", generator=g).half()
    dz = torch.randn(m, n, device="cuda", generator=g).half()
    return {"dA = dZ @ B^T": (dz, b.t()), "dB = A^T @ dZ": (a.t(), dz)}


for shape in ((4096, 4096, 4096), (8192, 8192, 8192), (4096, 11008, 4096)):
    for label, (x, y) in products(*shape).items():
        want = torch.mm(x.float(), y.float())
        with op.products.recording() as chosen:
            op.product(x, y)
        picked = dict(chosen[-1][1])
        name = "x".join(map(str, shape))
        torch_ms = triton.testing.do_bench(lambda: torch.mm(x, y))
        print(f"{name} {label}: torch.mm {torch_ms * 1e3:.1f} us; table's {picked}")
        variants = {"table's": picked}
        for stages in (3, 4):
            for persistent in (0, 1):
                variants[f"s{stages} {'persistent' if persistent else 'tiled'}"] = dict(
                    picked, num_stages=stages, PERSISTENT=persistent)
        for vlabel, config in variants.items():
            with op.products.forcing(config):
                got = op.product(x, y)
                error = ((got.float() - want).abs().max() / want.abs().max()).item()
                ms = triton.testing.do_bench(lambda: op.product(x, y))
            print(f"    {vlabel:16s} {ms * 1e3:8.1f} us  {ms / torch_ms:5.2f}x torch.mm's time  (error {error:.1e})")
