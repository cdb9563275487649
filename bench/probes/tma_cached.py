"""Calls through tensor descriptors once plans keep their encodings per address: for TMA configs
and their pointer-load twins (same tile), at shapes where host time decides (1000^3, 1024^3,
128x4096x4096) and one where it does not (4000^3): host time a call (50 calls issued back to
back, the GPU left to catch up), the pace of calls back to back, and do_bench's median (L2
emptied, as `tilegen bench` times), beside torch.mm. Three interleaved rounds; us.
Before (bench/probes/tma_host.txt, 1000^3): 44.2 us a call through descriptors, 13.8 through pointers."""
import sys
import time

import torch
from triton.testing import do_bench

import generated  # noqa: F401

mm = sys.modules["generated.matmul"]
rt = sys.modules["generated._runtime"]


def host_and_pace_us(fn, calls=50):
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    issued = time.perf_counter()
    torch.cuda.synchronize()
    done = time.perf_counter()
    return (issued - start) / calls * 1e6, (done - start) / calls * 1e6


CASES = [
    ((1000, 1000, 1000), dict(BM=64, BN=128, BK=128, SPLIT_K=1, num_warps=4, num_stages=4, PERSISTENT=0)),
    ((1024, 1024, 1024), dict(BM=64, BN=128, BK=64, SPLIT_K=1, num_warps=4, num_stages=4, PERSISTENT=0)),
    ((128, 4096, 4096), dict(BM=64, BN=64, BK=128, SPLIT_K=2, num_warps=4, num_stages=4, PERSISTENT=0)),
    ((4000, 4000, 4000), dict(BM=128, BN=256, BK=64, SPLIT_K=1, num_warps=8, num_stages=3, PERSISTENT=0)),
]
rows = {}
for round_ in range(3):
    for (m, n, k), tile in CASES:
        a = torch.randn(m, k, device="cuda", dtype=torch.float16) * k ** -0.25
        b = torch.randn(k, n, device="cuda", dtype=torch.float16) * k ** -0.25
        want = a.float() @ b.float()
        for tma in (1, 0):
            with mm._CONFIGS.forcing(dict(tile, TMA=tma)):
                mm._CONFIGS.plans.clear()
                torch.testing.assert_close(mm.matmul(a, b).float(), want, atol=3e-2, rtol=3e-2)
                call = lambda: mm.matmul(a, b)  # noqa: E731
                host, pace = host_and_pace_us(call)
                gpu = do_bench(call, warmup=10, rep=40, return_mode="median") * 1e3
            rows.setdefault((m, n, k, "TMA" if tma else "pointers"), []).append((host, pace, gpu))
        host, pace = host_and_pace_us(lambda: torch.mm(a, b))
        gpu = do_bench(lambda: torch.mm(a, b), warmup=10, rep=40, return_mode="median") * 1e3
        rows.setdefault((m, n, k, "torch.mm"), []).append((host, pace, gpu))
print("encoding plans made:", mm._LAUNCH.encoding_plans)
print(f"{'shape':16} {'path':9} {'host us (3 rounds)':24} {'pace us':24} {'do_bench us':24}")
for (m, n, k, path), runs in rows.items():
    cols = [" ".join(f"{r[i]:7.1f}" for r in runs) for i in range(3)]
    print(f"{m}x{n}x{k:<8} {path:9} {cols[0]:24} {cols[1]:24} {cols[2]:24}")
