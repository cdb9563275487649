"""fp8_scaled_mm at 128x4096x4096, per-tensor and row-wise scales: do_bench, host time per call
and GPU time per call (events around 300 back-to-back calls), beside torch._scaled_mm, for the
tree whose generated/ is first on sys.path (its label the first argument).

    (cd TREE && PYTHONPATH=TREE python3 bench/probes/fp8_host_diag.py LABEL) >> OUT.txt
"""
import sys, time, torch, triton
from generated import fp8_scaled_mm
import generated.fp8_scaled_mm as mod
m, n, k = 128, 4096, 4096
g = torch.Generator(device="cuda").manual_seed(0)
a = (torch.randn(m, k, device="cuda", generator=g) * k ** -0.25).to(torch.float8_e4m3fn)
b = (torch.randn(n, k, device="cuda", generator=g) * k ** -0.25).to(torch.float8_e4m3fn).t()
sa, sb = torch.tensor(0.75, device="cuda"), torch.tensor(1.5, device="cuda")
ra, rb = torch.rand(m, device="cuda") + 0.5, torch.rand(n, device="cuda") + 0.5
for label, x, y in (("per-tensor", sa, sb), ("row-wise", ra, rb)):
    fn = lambda: fp8_scaled_mm(a, b, x, y)
    fn(); torch.cuda.synchronize()
    bench = triton.testing.do_bench(fn, warmup=25, rep=100) * 1e3
    t0 = time.perf_counter()
    for _ in range(300): fn()
    t1 = time.perf_counter(); torch.cuda.synchronize(); t2 = time.perf_counter()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(300): fn()
    e1.record(); torch.cuda.synchronize()
    theirs = triton.testing.do_bench(lambda: torch._scaled_mm(a, b, scale_a=sa if x.dim() == 0 else x[:, None], scale_b=sb if y.dim() == 0 else y[None, :], out_dtype=torch.bfloat16, use_fast_accum=True), warmup=25, rep=100) * 1e3
    print(f"{sys.argv[1]} {label}: do_bench {bench:.1f} us, host {(t1 - t0) / 300 * 1e6:.1f} us/call, back-to-back {e0.elapsed_time(e1) / 300 * 1e3:.1f} us/call; _scaled_mm {theirs:.1f} us; callpath {getattr(mod, '_OP', None) and type(mod._OP).__name__}", flush=True)
