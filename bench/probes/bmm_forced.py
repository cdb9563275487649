"""tilegen's bmm at attention's scores shape (32 x 2048x2048x128, float16) under forced configs,
beside the stand-alone kernels of bmm_flatten.py with the same tiles and torch.matmul, in one run:
where tilegen's flattened persistent kernel stands against the tutorial-style kernel whose 101 us
(bench/probes/bmm_flatten.txt) tuning did not reach (tilegen's tuned entry measured 123 us).

    PYTHONPATH=. python3 bench/probes/bmm_forced.py [--profile] > OUT.txt

With --profile, each tilegen config also gets its kernel's own GPU time (torch.profiler, 20
calls), the host time of a call (100 calls back to back) and whether the compiled call path
serves its repeat calls: a config whose do_bench time is far above its kernel's is held back
by the host, not the GPU.
"""

import sys
import time
from pathlib import Path

import torch
import triton

from generated import bmm

sys.path.insert(0, str(Path(__file__).parent))
import bmm_flatten  # noqa: E402  (the stand-alone kernels)

OP = sys.modules["generated.bmm"]._OP
TILES = [(128, 128, 128, 4, 3), (128, 256, 64, 8, 3), (128, 256, 32, 8, 5), (128, 128, 64, 4, 4)]
FORMS = {  # tilegen's config fields beyond the tile
    "persistent flatten tma tma_store": dict(PERSISTENT=1, FLATTEN=1, TMA=1, TMA_STORE=1),
    "persistent flatten tma": dict(PERSISTENT=1, FLATTEN=1, TMA=1),
    "persistent flatten": dict(PERSISTENT=1, FLATTEN=1),
    "tma tma_store": dict(TMA=1, TMA_STORE=1),
}


def kernel_and_host_us(call, calls=20):
    """(the kernels' GPU time, host time) per call: torch.profiler's device time over `calls`
    calls, and perf_counter over 100 calls back to back."""
    call()
    torch.cuda.synchronize()
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
    kernels = sum(e.self_device_time_total for e in prof.key_averages() if e.self_device_time_total > 0)
    start = time.perf_counter()
    for _ in range(100):
        call()
    host = (time.perf_counter() - start) / 100 * 1e6
    torch.cuda.synchronize()
    return kernels / calls, host


def main():
    profile = "--profile" in sys.argv[1:]
    torch.manual_seed(0)
    bsz, m, n, k = 32, 2048, 2048, 128
    a = torch.randn(bsz, m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(bsz, k, n, device="cuda", dtype=torch.float16)
    want = torch.matmul(a, b)
    bench = lambda fn: triton.testing.do_bench(fn, warmup=25, rep=200) * 1e3  # noqa: E731
    base = bench(lambda: torch.matmul(a, b))
    print(f"{bsz}x{m}x{n}x{k} float16: torch.matmul {base:.1f} us; tilegen's table: {bench(lambda: bmm(a, b)):.1f} us")
    for bm, bn, bk, warps, stages in TILES:
        label = f"BM{bm} BN{bn} BK{bk} w{warps} s{stages}"
        c = torch.empty_like(want)
        try:
            config = (bm, bn, bk, warps, stages, "flatten", False)
            bmm_flatten.launch(a, b, c, config)
            torch.testing.assert_close(c, want, atol=2e-2, rtol=2e-2)
            print(f"  {bench(lambda: bmm_flatten.launch(a, b, c, config)):7.1f} us  {label} stand-alone flatten", flush=True)
        except Exception as error:  # out of shared memory, and the like
            print(f"  {label} stand-alone flatten: {type(error).__name__}")
        for form, fields in FORMS.items():
            config = dict(BM=bm, BN=bn, BK=bk, SPLIT_K=1, num_warps=warps, num_stages=stages, **fields)
            with OP.configs.forcing(config):
                try:
                    torch.testing.assert_close(bmm(a, b), want, atol=2e-2, rtol=2e-2)
                    us = bench(lambda: bmm(a, b))
                except Exception as error:
                    print(f"  {label} tilegen {form}: {type(error).__name__}")
                    continue
                detail = ""
                if profile:
                    kernel, host = kernel_and_host_us(lambda: bmm(a, b))
                    served = OP.fast(a, b) is not None
                    torch.testing.assert_close(bmm(a, b), want, atol=2e-2, rtol=2e-2)  # a repeat call's result too
                    detail = f" (kernel {kernel:.1f} us, host {host:.1f} us/call, call path serves it: {served})"
            print(f"  {us:7.1f} us  {label} tilegen {form}{detail}", flush=True)


if __name__ == "__main__":
    main()
