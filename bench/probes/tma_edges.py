"""Would tensor descriptors (TMA) serve shapes no tile divides? Their loads read zeros past every
edge, so no mask, wrap or partial K step is needed, and rows of 1000 halves (16-byte but not
128-byte aligned) are the copy engine's problem. Their host cost (about 28 us a call, most of it
in Triton's launcher encoding two descriptors) hides the GPU time of short kernels, so the TMA
side here launches with descriptors made once ("fixed", as in tma_bimodal.py): GPU time only.
Three interleaved rounds, timed as bench times; torch.mm alongside. The kernel before sizes had
factors (base) runs the table's config too, to check 4000^3, which timed 214 against 229 us in
edge_ab.txt.

    git show 2879c8b:generated/matmul.py > bench/probes/_v_base_matmul.py
"""
import importlib.util
import statistics
import sys

import torch
from triton.testing import do_bench

import generated  # noqa: F401

mm = sys.modules["generated.matmul"]
rt = sys.modules["generated._runtime"]
spec = importlib.util.spec_from_file_location("generated._v_base", "bench/probes/_v_base_matmul.py")
base = importlib.util.module_from_spec(spec)
spec.loader.exec_module(base)


def cfg(bm, bn, bk, w, s, tma):
    return dict(BM=bm, BN=bn, BK=bk, SPLIT_K=1, num_warps=w, num_stages=s, TMA=tma, PERSISTENT=0)


def closure(fn):
    return dict(zip(fn.__code__.co_freevars, (cell.cell_contents for cell in fn.__closure__ or ())))


tiles = [(64, 128, 128, 4, 4), (128, 128, 64, 8, 3), (128, 256, 64, 8, 3), (128, 128, 64, 4, 4)]
shapes = [(1000, 1000, 1000), (3000, 1000, 2000), (4000, 4000, 4000)]
samples = {}
for rnd in range(3):
    for M, N, K in shapes:
        a = torch.randn(M, K, device="cuda", dtype=torch.float16) * K ** -0.25
        b = torch.randn(K, N, device="cuda", dtype=torch.float16) * K ** -0.25
        want = a.float() @ b.float()
        times = {"torch.mm": do_bench(lambda: a @ b, return_mode="median") * 1e3}
        for name, mod in (("table", mm), ("base table", base)):
            mod._CONFIGS.reset()
            torch.testing.assert_close(mod.matmul(a, b).float(), want, atol=2e-2, rtol=2e-2)
            times[name] = do_bench(lambda: mod.matmul(a, b), return_mode="median") * 1e3
        for tile in tiles:
            for tma in (0, 1):
                config = cfg(*tile, tma)
                with mm._CONFIGS.forcing(config):
                    c = mm.matmul(a, b)
                    torch.testing.assert_close(c.float(), want, atol=2e-2, rtol=2e-2)
                    plan = mm._CONFIGS.plans[mm._signature(a, b)]
                    if tma:
                        inner = closure(plan)["repeat"]
                        operands = rt.with_descriptors((a, b, c), 0, (tile[0], tile[2]), 1, (tile[2], tile[1]))
                        fn = lambda: inner(None, None, *operands)  # noqa: E731
                    else:
                        fn = lambda: mm.matmul(a, b)  # noqa: E731
                    times[f"{'TMA fixed' if tma else 'pointers'} {tile}"] = do_bench(fn, return_mode="median") * 1e3
        for name, t in times.items():
            samples.setdefault((M, N, K, name), []).append(t)
    print(f"round {rnd} done", flush=True)
for (M, N, K, name), values in samples.items():
    print(f"{M}x{N}x{K:<5} {name:38} median {statistics.median(values):7.1f} us  "
          f"(rounds: {', '.join(f'{v:.1f}' for v in values)})")
