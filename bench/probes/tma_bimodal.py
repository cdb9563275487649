"""Why tensor-descriptor (TMA) loads time bimodally on short kernels (1024^3: 8.7 us in some
rounds, 13-19 in others; 128x4096x4096: 23-68 us against about 20): eight rounds, each timing the
TMA config and its pointer-load twin three ways, so the slow mode can be pinned on one of them:

  flushed   do_bench's median, L2 emptied before each run (as bench and tune time)
  warm      CUDA events around 50 back-to-back calls, no flush (per call)
  fixed     as flushed, but through the plan's inner launch with descriptors made once, so
            no call builds its own (the wrapper builds two per call)

Prints one line per round, config and way; the spread across rounds is the answer."""
import statistics
import sys

import torch
from triton.testing import do_bench

import generated  # noqa: F401  (the package exports the functions; the modules are below)

mm = sys.modules["generated.matmul"]
rt = sys.modules["generated._runtime"]


def cfg(bm, bn, bk, w, s, tma):
    return dict(BM=bm, BN=bn, BK=bk, SPLIT_K=1, num_warps=w, num_stages=s, TMA=tma, PERSISTENT=0)


cases = [((1024, 1024, 1024), [cfg(128, 64, 128, 4, 4, 1), cfg(128, 64, 128, 4, 4, 0)]),
         ((128, 4096, 4096), [cfg(64, 64, 128, 4, 5, 1), cfg(64, 64, 128, 4, 5, 0)])]


def warm_us(fn, calls=50):
    fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / calls * 1e3


def closure(fn):
    return dict(zip(fn.__code__.co_freevars, (cell.cell_contents for cell in fn.__closure__ or ())))


summary = {}
for rnd in range(8):
    for (M, N, K), configs in cases:
        a = torch.randn(M, K, device="cuda", dtype=torch.float16)
        b = torch.randn(K, N, device="cuda", dtype=torch.float16)
        want = a @ b
        for config in configs:
            with mm._CONFIGS.forcing(config):
                c = mm.matmul(a, b)
                torch.testing.assert_close(c, want, atol=5e-2, rtol=5e-2)
                call = lambda: mm.matmul(a, b)  # noqa: E731
                times = {"flushed": do_bench(call, return_mode="median") * 1e3, "warm": warm_us(call)}
                plan = mm._CONFIGS.plans[mm._signature(a, b)]
                inner = closure(plan).get("repeat") if config["TMA"] and hasattr(plan, "__code__") else None
                if inner is not None:
                    operands = rt.with_descriptors((a, b, c), 0, (config["BM"], config["BK"]), 1, (config["BK"], config["BN"]))
                    times["fixed"] = do_bench(lambda: inner(None, None, *operands), return_mode="median") * 1e3
            label = f"{M}x{N}x{K} {'TMA' if config['TMA'] else 'ptr'}"
            for way, us in times.items():
                summary.setdefault((label, way), []).append(us)
            print(f"round {rnd} {label:18} " + "  ".join(f"{way} {us:6.1f}" for way, us in times.items()), flush=True)
for (label, way), values in summary.items():
    print(f"{label:18} {way:8} median {statistics.median(values):6.1f}  min {min(values):6.1f}  max {max(values):6.1f} us")
