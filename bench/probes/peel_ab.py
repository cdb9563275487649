"""A/B: peeled partial K step (current) vs a mask on K in every step, same configs, interleaved twice."""
import importlib, torch
from triton.testing import do_bench
src = open("generated/matmul.py").read()
masked = src.replace("        k_whole = min(k_stop, K // BK)\n", "        k_whole = k_stop\n")
masked = masked.replace("        a = tl.load(a_ptrs)\n        b = tl.load(b_ptrs)\n",
                        "        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BK, other=0.0)\n"
                        "        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BK, other=0.0)\n")
assert masked != src
mods = {}
for name, text in {"peeled": src, "masked": masked}.items():
    open(f"generated/_v_{name}.py", "w").write(text)
    mods[name] = importlib.import_module(f"generated._v_{name}")
cfgs = [dict(BM=64, BN=64, BK=64, SPLIT_K=1, num_warps=4, num_stages=5),
        dict(BM=128, BN=64, BK=32, SPLIT_K=1, num_warps=8, num_stages=3),
        dict(BM=64, BN=128, BK=128, SPLIT_K=1, num_warps=4, num_stages=4)]
for M, N, K in [(1025, 769, 513), (1000, 1000, 1000)]:
    a = (torch.randn(M, K, device="cuda") * K ** -0.25).half(); b = (torch.randn(K, N, device="cuda") * K ** -0.25).half()
    ref = a.float() @ b.float()
    print(f"{M}x{N}x{K} torch {do_bench(lambda: a @ b, return_mode='median') * 1e3:.1f} us", flush=True)
    for rep in range(2):
        for cfg in cfgs:
            for name, mod in mods.items():
                with mod._CONFIGS.forcing(cfg):
                    err = (mod.matmul(a, b).float() - ref).abs().max().item()
                    t = do_bench(lambda: mod.matmul(a, b), return_mode="median") * 1e3
                print(f"  {name:7} BM{cfg['BM']} BN{cfg['BN']} BK{cfg['BK']} w{cfg['num_warps']} s{cfg['num_stages']}: {t:6.1f} us (err {err:.2g})", flush=True)
