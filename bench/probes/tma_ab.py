"""A/B of tensor-descriptor (TMA) loads against pointer loads for table entries, timed as bench
times (do_bench median, L2 emptied), three interleaved rounds, torch.mm in the same rounds."""
import sys
import torch
from triton.testing import do_bench
from generated import matmul, matmul_relu
mm_mod, relu_mod = sys.modules["generated.matmul"], sys.modules["generated.matmul_relu"]  # the package exports the functions

def cfg(bm, bn, bk, w, s, tma=0, split=1):
    return dict(BM=bm, BN=bn, BK=bk, SPLIT_K=split, num_warps=w, num_stages=s, TMA=tma)

cases = [
    ((1024, 1024, 1024), [cfg(128, 64, 128, 4, 4, 1), cfg(128, 64, 128, 4, 4, 0), cfg(64, 128, 128, 4, 4, 0), cfg(64, 128, 128, 4, 4, 1)]),
    ((128, 4096, 4096), [cfg(64, 64, 128, 4, 5, 0), cfg(64, 64, 128, 4, 5, 1)]),
]
for rnd in range(3):
    for dt in (torch.float16, torch.bfloat16):
        for (M, N, K), configs in cases:
            a = torch.randn(M, K, device="cuda", dtype=dt); b = torch.randn(K, N, device="cuda", dtype=dt)
            t_torch = do_bench(lambda: a @ b, return_mode="median") * 1e3
            for op, mod in (("matmul", mm_mod), ("matmul_relu", relu_mod)):
                if op == "matmul_relu" and (M, N, K) != (1024, 1024, 1024):
                    continue
                fn_op = matmul if op == "matmul" else matmul_relu
                for c in configs:
                    with mod._CONFIGS.forcing(c):
                        fn = lambda: fn_op(a, b)
                        fn(); t = do_bench(fn, return_mode="median") * 1e3
                    print(f"round {rnd} {str(dt)[6:]:9} {M}x{N}x{K:<6} {op:12} {str(c):90} {t:7.1f} us  torch.mm {t_torch:6.1f}  ratio {t_torch / t:.2f}", flush=True)
