"""A backward's products on column-major operands (dA = dZ @ B^T: B^T a transposed view; dB =
A^T @ dZ): matmul's product kernel with operands row-major, x column-major, y column-major,
on forced configs (the table's 4096^3 and 8192^3 entries, through descriptors and through
pointers), beside torch.mm on the same views; do_bench medians, float16.

    PYTHONPATH=. python3 bench/probes/transposed_products.py
"""
import importlib

import torch
import triton

from tilegen.runtime import callpath

callpath.load(wait=True)
module = importlib.import_module("generated.matmul")
CONFIGS = {
    "BM128 BN256 BK64 w8 s3 TMA": dict(BM=128, BN=256, BK=64, SPLIT_K=1, num_warps=8, num_stages=3, TMA=1, PERSISTENT=0),
    "BM128 BN256 BK64 w8 s4 TMA persistent": dict(BM=128, BN=256, BK=64, SPLIT_K=1, num_warps=8, num_stages=4, TMA=1,
                                                  PERSISTENT=1),
    "BM128 BN256 BK64 w8 s3": dict(BM=128, BN=256, BK=64, SPLIT_K=1, num_warps=8, num_stages=3, TMA=0, PERSISTENT=0),
    "BM128 BN256 BK64 w8 s4 persistent": dict(BM=128, BN=256, BK=64, SPLIT_K=1, num_warps=8, num_stages=4, TMA=0,
                                              PERSISTENT=1),
    "BM128 BN128 BK64 w8 s4 TMA": dict(BM=128, BN=128, BK=64, SPLIT_K=1, num_warps=8, num_stages=4, TMA=1, PERSISTENT=0),
}


def column_major(t):
    return t.t().contiguous().t()


for size in (4096, 8192):
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(size, size, device="cuda", generator=g).half()
    y = torch.randn(size, size, device="cuda", generator=g).half()
    want = torch.mm(x.float(), y.float())
    for layout, (xv, yv) in {"rows rows": (x, y), "x columns": (column_major(x), y),
                             "y columns": (x, column_major(y))}.items():
        torch_ms = triton.testing.do_bench(lambda: torch.mm(xv, yv))
        print(f"{size}^3 {layout:10s} torch.mm {torch_ms * 1e3:8.1f} us")
        for label, config in CONFIGS.items():
            with module._OP.products.forcing(config):
                got = module._OP.product(xv, yv)
                error = ((got.float() - want).abs().max() / want.abs().max()).item()
                ms = triton.testing.do_bench(lambda: module._OP.product(xv, yv))
            print(f"{size}^3 {layout:10s} {label:40s} {ms * 1e3:8.1f} us  (max error {error:.1e} of max |c|)")
