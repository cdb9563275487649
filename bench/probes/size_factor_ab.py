"""Sizes as quotient and factor: the kernel before (base), with every size's factor up to 16
(f16: 4000^3 ran 7% slower in tma_edges.txt), and with only sizes Triton would not mark split
(now: multiples of 16 come whole, so aligned shapes compile as in base). The table's config,
three interleaved rounds, timed as bench times; torch.mm alongside.

    git show 2879c8b:generated/matmul.py > bench/probes/_v_base_matmul.py   # before sizes
    git show 1e5a298:generated/matmul.py > bench/probes/_v_f16_matmul.py    # factors up to 16
"""
import importlib.util
import statistics
import sys

import torch
from triton.testing import do_bench

import generated  # noqa: F401


def load(name, path):
    spec = importlib.util.spec_from_file_location(f"generated.{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


variants = {"base": load("_v_base", "bench/probes/_v_base_matmul.py"),
            "f16": load("_v_f16", "bench/probes/_v_f16_matmul.py"), "now": sys.modules["generated.matmul"]}
shapes = [(1000, 1000, 1000), (3000, 1000, 2000), (4000, 4000, 4000), (4096, 4096, 4096), (1024, 1024, 1024),
          (4096, 11008, 4096)]
samples = {}
for rnd in range(3):
    for M, N, K in shapes:
        a = torch.randn(M, K, device="cuda", dtype=torch.float16) * K ** -0.25
        b = torch.randn(K, N, device="cuda", dtype=torch.float16) * K ** -0.25
        want = a.float() @ b.float()
        samples.setdefault((M, N, K, "torch.mm"), []).append(do_bench(lambda: a @ b, return_mode="median") * 1e3)
        for name, mod in variants.items():
            torch.testing.assert_close(mod.matmul(a, b).float(), want, atol=2e-2, rtol=2e-2)
            samples.setdefault((M, N, K, name), []).append(do_bench(lambda: mod.matmul(a, b), return_mode="median") * 1e3)
    print(f"round {rnd} done", flush=True)
for (M, N, K, name), values in samples.items():
    print(f"{M}x{N}x{K:<5} {name:9} median {statistics.median(values):7.1f} us  "
          f"(rounds: {', '.join(f'{v:.1f}' for v in values)})")
