"""fp8_scaled_mm at 128x4096x4096, per-tensor and row-wise scales: do_bench, host time per call
and GPU time per call (events around 300 back-to-back calls), beside torch._scaled_mm, for the
tree whose generated/ is first on sys.path (its label the first argument). With `--profile`,
also whether the compiled call path serves a repeat call, where 50 calls spend their host
time (cProfile, the 12 costliest functions by own time), and the GPU time of each kernel the
calls launch (torch.profiler): host-bound calls and slow kernels then read apart.

    (cd TREE && PYTHONPATH=TREE python3 bench/probes/fp8_host_diag.py LABEL [--profile]) >> OUT.txt

What it found (fp8_host_diag.txt): the 0.35-1.3 ms calls were calls timed while the compiled
call path was still being built (10-20 s after a fresh machine's first import, in a background
thread): the Python path served them, slowed by the build beside it, while the kernel took 9 us.
Benchmarks and tests wait for the call path; so does this probe now, unless `--cold`.
"""

import cProfile
import pstats
import sys
import time

import torch
import triton

from generated import fp8_scaled_mm
from tilegen.runtime import callpath

CALLS = 300


def per_call_us(fn):
    """(host us, GPU us) per call over CALLS back-to-back calls."""
    start = time.perf_counter()
    for _ in range(CALLS):
        fn()
    host = (time.perf_counter() - start) / CALLS * 1e6
    torch.cuda.synchronize()
    first, last = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    first.record()
    for _ in range(CALLS):
        fn()
    last.record()
    torch.cuda.synchronize()
    return host, first.elapsed_time(last) / CALLS * 1e3


def print_kernel_times(call, calls=20):
    """Each kernel's GPU time over `calls` calls, as torch.profiler records it."""
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="device_time_total", row_limit=8), flush=True)


def main():
    label, profile = sys.argv[1], "--profile" in sys.argv[2:]
    if "--cold" not in sys.argv[2:]:
        callpath.load(wait=True)  # as benchmarks do: time the path repeat calls settle on
    op = sys.modules["generated.fp8_scaled_mm"]._OP  # (`generated.fp8_scaled_mm`, the attribute, is the function)
    m, n, k = 128, 4096, 4096
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = (torch.randn(m, k, device="cuda", generator=gen) * k ** -0.25).to(torch.float8_e4m3fn)
    b = (torch.randn(n, k, device="cuda", generator=gen) * k ** -0.25).to(torch.float8_e4m3fn).t()
    per_tensor = (torch.tensor(0.75, device="cuda"), torch.tensor(1.5, device="cuda"))
    row_wise = (torch.rand(m, device="cuda") + 0.5, torch.rand(n, device="cuda") + 0.5)
    for scaling, (x, y) in (("per-tensor", per_tensor), ("row-wise", row_wise)):
        call = lambda: fp8_scaled_mm(a, b, x, y)  # noqa: E731
        call()
        torch.cuda.synchronize()
        bench = triton.testing.do_bench(call, warmup=25, rep=100) * 1e3
        host, gpu = per_call_us(call)
        scale_a, scale_b = (x, y) if x.dim() == 0 else (x[:, None], y[None, :])
        theirs = triton.testing.do_bench(lambda: torch._scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b,
                                                                  out_dtype=torch.bfloat16, use_fast_accum=True),
                                         warmup=25, rep=100) * 1e3
        served = op.fast(a, b, x, y) is not None
        print(f"{label} {scaling}: do_bench {bench:.1f} us, host {host:.1f} us/call, back-to-back {gpu:.1f} us/call; "
              f"_scaled_mm {theirs:.1f} us; compiled call path serves it: {served}", flush=True)
        if profile:
            profiler = cProfile.Profile()
            profiler.enable()
            for _ in range(50):
                call()
            profiler.disable()
            torch.cuda.synchronize()
            pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(12)
            print_kernel_times(call)


if __name__ == "__main__":
    main()
