"""Shapes no tile divides (1000^3 ran 0.54x of cuBLAS, 3000x1000x2000 0.32x): the kernel before
sizes arrived with power-of-two factors (base, taken from git before the run) against the one
after (sizes), and against the one after with the partial K step kept in the loop (sizes, no
peel: with K known to be a multiple of 8 its masked loads can stay wide). Each variant runs the
table's config and a few forced ones, three interleaved rounds, timed as bench times (do_bench
median, L2 emptied), torch.mm alongside. Then host time per call through descriptors.

    git show HEAD~N:generated/matmul.py > generated/_v_base.py   # the commit before sizes
"""
import os
import importlib
import statistics
import sys

# The times here are of launch plans: the compiled call path (_fastpath.py) stays off.
os.environ.setdefault("TILEGEN_FAST_PATH", "0")

import torch
from triton.testing import do_bench

import generated  # noqa: F401

source = open("generated/matmul.py").read()
nopeel = source.replace("PEEL_K=K % bk != 0 and rt.k_rows_load_wide(tensors[0], tensors[1])", "PEEL_K=False")
assert nopeel != source
open("generated/_v_nopeel.py", "w").write(nopeel)
variants = {"base": importlib.import_module("generated._v_base"), "sizes": sys.modules["generated.matmul"],
            "sizes, no peel": importlib.import_module("generated._v_nopeel")}


def cfg(bm, bn, bk, w, s, tma=0):
    return dict(BM=bm, BN=bn, BK=bk, SPLIT_K=1, num_warps=w, num_stages=s, TMA=tma, PERSISTENT=0)


forced = [None, cfg(64, 128, 128, 4, 4), cfg(128, 128, 64, 8, 3), cfg(128, 256, 64, 8, 3), cfg(64, 64, 64, 4, 3)]
shapes = [(1000, 1000, 1000), (3000, 1000, 2000), (4000, 4000, 4000), (100, 4000, 4000), (1024, 1024, 1024)]
samples = {}
for rnd in range(3):
    for M, N, K in shapes:
        a = torch.randn(M, K, device="cuda", dtype=torch.float16) * K ** -0.25
        b = torch.randn(K, N, device="cuda", dtype=torch.float16) * K ** -0.25
        want = a.float() @ b.float()
        samples.setdefault((M, N, K, "torch.mm", None), []).append(do_bench(lambda: a @ b, return_mode="median") * 1e3)
        for config in forced:
            for name, mod in variants.items():
                mod._CONFIGS.reset()
                if config is None:
                    call = lambda: mod.matmul(a, b)  # noqa: E731
                    torch.testing.assert_close(call().float(), want, atol=2e-2, rtol=2e-2)
                    t = do_bench(call, return_mode="median") * 1e3
                else:
                    with mod._CONFIGS.forcing(config):
                        call = lambda: mod.matmul(a, b)  # noqa: E731
                        torch.testing.assert_close(call().float(), want, atol=2e-2, rtol=2e-2)
                        t = do_bench(call, return_mode="median") * 1e3
                samples.setdefault((M, N, K, name, str(config)), []).append(t)
    print(f"round {rnd} done", flush=True)
for (M, N, K, name, config), values in samples.items():
    print(f"{M}x{N}x{K:<5} {name:15} {config or '':100} median {statistics.median(values):7.1f} us  "
          f"(rounds: {', '.join(f'{v:.1f}' for v in values)})")


def per_call_us(fn, calls=2000):
    return host_timing.per_call_us(fn, calls, warmup=100)


# Host time per call (small launches queue faster than they run, so this is the CPU's time).
rt = sys.modules["generated._runtime"]
mm = sys.modules["generated.matmul"]
a = torch.randn(128, 256, device="cuda", dtype=torch.float16)
b = torch.randn(256, 128, device="cuda", dtype=torch.float16)
for tma in (0, 1):
    with mm._CONFIGS.forcing(cfg(64, 64, 64, 4, 3, tma)):
        print(f"host: matmul 128x128x256 TMA={tma}: {per_call_us(lambda: mm.matmul(a, b)):6.2f} us per call")
from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: E402
import host_timing
print(f"host: TensorDescriptor.from_tensor: {per_call_us(lambda: TensorDescriptor.from_tensor(a, [64, 64])):6.2f} us")
print(f"host: rt.with_descriptors (two): {per_call_us(lambda: rt.with_descriptors((a, b), 0, (64, 64), 1, (64, 64))):6.2f} us")
