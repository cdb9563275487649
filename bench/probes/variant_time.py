"""Time edge-handling variants and old/new table configs, as bench does (do_bench median, L2 flushed)."""
import importlib, torch
from triton.testing import do_bench
src = open("generated/matmul.py").read()
hint_m = "tl.max_contiguous(tl.multiple_of(tl.where(offs_m < M, offs_m, 0), BM), BM)"
hint_n = "tl.max_contiguous(tl.multiple_of(tl.where(offs_n < N, offs_n, 0), BN), BN)"
variants = {"hints": src, "mod": src.replace(hint_m, "offs_m % M").replace(hint_n, "offs_n % N")}
mods = {}
for name, text in variants.items():
    open(f"generated/_v_{name}.py", "w").write(text)
    mods[name] = importlib.import_module(f"generated._v_{name}")
old16 = dict(BM=64, BN=64, BK=128, SPLIT_K=2, num_warps=4, num_stages=4)
new16 = dict(BM=64, BN=128, BK=128, SPLIT_K=4, num_warps=4, num_stages=4)
old128 = dict(BM=64, BN=128, BK=128, SPLIT_K=2, num_warps=4, num_stages=4)
new128 = dict(BM=64, BN=64, BK=128, SPLIT_K=1, num_warps=4, num_stages=5)
cases = [((16, 4096, 4096), [old16, new16, dict(old16, SPLIT_K=4), dict(old16, num_stages=5)]),
         ((128, 4096, 4096), [old128, new128, dict(new128, SPLIT_K=2)]),
         ((1000, 1000, 1000), [None]), ((1025, 769, 513), [None]), ((1024, 1024, 1024), [None])]
for dt in (torch.float16, torch.bfloat16):
    for (M, N, K), configs in cases:
        a = torch.randn(M, K, device="cuda", dtype=dt); b = torch.randn(K, N, device="cuda", dtype=dt)
        t_torch = do_bench(lambda: a @ b, return_mode="median") * 1e3
        for name, mod in mods.items():
            for cfg in configs:
                if cfg is None:
                    fn = lambda: mod.matmul(a, b)
                    fn(); t = do_bench(fn, return_mode="median") * 1e3
                else:
                    with mod._CONFIGS.forcing(cfg):
                        fn = lambda: mod.matmul(a, b)
                        fn(); t = do_bench(fn, return_mode="median") * 1e3
                print(f"{str(dt)[6:]:9} {M}x{N}x{K:<5} {name:6} {str(cfg):80} {t:7.1f} us  torch {t_torch:6.1f}  ratio {t_torch / t:.2f}", flush=True)
