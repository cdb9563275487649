"""Which variant/config gets padded-aligned non-divisible shapes wrong?"""
import importlib, re, sys, torch
src = open("generated/matmul.py").read()
hint_m = "tl.max_contiguous(tl.multiple_of(tl.where(offs_m < M, offs_m, 0), BM), BM)"
hint_n = "tl.max_contiguous(tl.multiple_of(tl.where(offs_n < N, offs_n, 0), BN), BN)"
assert hint_m in src and hint_n in src
variants = {
    "hints": src,
    "where_no_hints": src.replace(hint_m, "tl.where(offs_m < M, offs_m, 0)").replace(hint_n, "tl.where(offs_n < N, offs_n, 0)"),
    "mod": src.replace(hint_m, "offs_m % M").replace(hint_n, "offs_n % N"),
    "hint_n_only": src.replace(hint_m, "tl.where(offs_m < M, offs_m, 0)"),
    "hint_m_only": src.replace(hint_n, "tl.where(offs_n < N, offs_n, 0)"),
}
mods = {}
for name, text in variants.items():
    open(f"generated/_v_{name}.py", "w").write(text)
    mods[name] = importlib.import_module(f"generated._v_{name}")
configs = [dict(BM=64, BN=64, BK=64, SPLIT_K=1, num_warps=4, num_stages=5),
           dict(BM=64, BN=64, BK=64, SPLIT_K=1, num_warps=4, num_stages=3),
           dict(BM=128, BN=64, BK=32, SPLIT_K=1, num_warps=4, num_stages=4),
           dict(BM=64, BN=128, BK=64, SPLIT_K=1, num_warps=4, num_stages=4)]
torch.manual_seed(0)
for (M, N, K, kp, np_) in [(1025, 769, 513, 520, 776), (1000, 1000, 1000, 1000, 1000)]:
    dt = torch.float16
    a0 = torch.randn(M, K, device="cuda", dtype=dt); b0 = torch.randn(K, N, device="cuda", dtype=dt)
    a = torch.full((M, kp), float("nan"), device="cuda", dtype=dt)[:, :K]; a.copy_(a0)
    b = torch.full((K, np_), float("nan"), device="cuda", dtype=dt)[:, :N]; b.copy_(b0)
    ref = a0.float() @ b0.float()
    for name, mod in mods.items():
        for cfg in configs:
            for label, (x, y) in (("aligned", (a, b)), ("contig", (a0, b0))):
                with mod._CONFIGS.forcing(cfg):
                    got = mod.matmul(x, y).float()
                err = (got - ref).abs()
                bad = (err > 0.05 + 0.01 * ref.abs()) | err.isnan()
                idx = bad.nonzero()[:3].tolist()
                print(f"{M}x{N}x{K} {label:7} {name:15} BM{cfg['BM']} BN{cfg['BN']} BK{cfg['BK']} s{cfg['num_stages']}: "
                      f"max err {err.nan_to_num(1e9).max().item():.3g}, bad {int(bad.sum())} {idx}", flush=True)
