"""matmul vs torch.mm at shapes outside the bench set that no tile divides (do_bench median, L2 flushed)."""
import torch
from triton.testing import do_bench
from generated import matmul
for dt in (torch.float16, torch.bfloat16):
    for M, N, K in [(1000, 1000, 1000), (4000, 4000, 4000), (1025, 769, 513), (16, 4096, 4096), (100, 4000, 4000), (3000, 1000, 2000)]:
        a = torch.randn(M, K, device="cuda", dtype=dt); b = torch.randn(K, N, device="cuda", dtype=dt)
        ref = a.float() @ b.float()
        err = (matmul(a, b).float() - ref).abs().max().item()
        t = do_bench(lambda: matmul(a, b), return_mode="median") * 1e3
        tt = do_bench(lambda: a @ b, return_mode="median") * 1e3
        print(f"{str(dt)[6:]:9} {M}x{N}x{K:<6} tilegen {t:8.1f} us  torch {tt:8.1f} us  ratio {tt / t:.2f}  max err {err:.3g}", flush=True)
