"""Where does a batched matmul with a short K (attention's scores, 32 x 2048x2048x128) lose to
cuBLAS? The kernel mostly stores its output (268 MB in half precision). Stand-alone kernels, the
same math as a tilegen batched launch, timed beside torch.matmul:

- pointers: loads and stores through pointers, one program per tile (tilegen's batched launch);
- descriptors: loads and the store through 2-D tensor descriptors over the flattened batch
  ([B*M, K], [B*K, N], [B*M, N]: valid when BM divides M and BK divides K);
- persistent variants of both: one program per multiprocessor looping over the tiles, so that one
  tile's store overlaps the next tile's loads.

    PYTHONPATH=. python3 bench/probes/bmm_store.py > bench/probes/bmm_store.txt
"""

from __future__ import annotations

import itertools

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor


@triton.jit
def _tile(pid, a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
          DESC: tl.constexpr):
    tiles_m = M // BM
    tiles_n = N // BN
    per_matrix = tiles_m * tiles_n
    batch = pid // per_matrix
    t = pid % per_matrix
    # Grouped order: 8 tile rows share B's columns.
    group = 8 * tiles_n
    first_m = (t // group) * 8
    size_m = min(tiles_m - first_m, 8)
    pid_m = first_m + (t % group) % size_m
    pid_n = (t % group) // size_m
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    if DESC:
        for k in range(0, K // BK):
            a = a_ptr.load([batch * M + pid_m * BM, k * BK])
            b = b_ptr.load([batch * K + k * BK, pid_n * BN])
            acc = tl.dot(a, b, acc)
        c_ptr.store([batch * M + pid_m * BM, pid_n * BN], acc.to(c_ptr.dtype))
    else:
        offs_m = pid_m * BM + tl.arange(0, BM)
        offs_n = pid_n * BN + tl.arange(0, BN)
        offs_k = tl.arange(0, BK)
        a_ptrs = a_ptr + batch.to(tl.int64) * M * K + offs_m[:, None] * K + offs_k[None, :]
        b_ptrs = b_ptr + batch.to(tl.int64) * K * N + offs_k[:, None] * N + offs_n[None, :]
        for k in range(0, K // BK):
            acc = tl.dot(tl.load(a_ptrs), tl.load(b_ptrs), acc)
            a_ptrs += BK
            b_ptrs += BK * N
        c_ptrs = c_ptr + batch.to(tl.int64) * M * N + offs_m[:, None] * N + offs_n[None, :]
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty))


@triton.jit
def _kernel(a_ptr, b_ptr, c_ptr, B, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
            DESC: tl.constexpr, PERSISTENT: tl.constexpr):
    if PERSISTENT:
        for pid in range(tl.program_id(0), B * (M // BM) * (N // BN), tl.num_programs(0)):
            _tile(pid, a_ptr, b_ptr, c_ptr, M, N, K, BM, BN, BK, DESC)
    else:
        _tile(tl.program_id(0), a_ptr, b_ptr, c_ptr, M, N, K, BM, BN, BK, DESC)


def launch(a, b, c, bm, bn, bk, warps, stages, desc, persistent):
    bsz, m, k = a.shape
    n = b.shape[2]
    if desc:
        args = (TensorDescriptor.from_tensor(a.view(bsz * m, k), [bm, bk]),
                TensorDescriptor.from_tensor(b.view(bsz * k, n), [bk, bn]),
                TensorDescriptor.from_tensor(c.view(bsz * m, n), [bm, bn]))
    else:
        args = (a, b, c)
    tiles = bsz * (m // bm) * (n // bn)
    sms = torch.cuda.get_device_properties(a.device).multi_processor_count
    grid = (min(tiles, sms),) if persistent else (tiles,)
    _kernel[grid](*args, bsz, m, n, k, bm, bn, bk, desc, persistent, num_warps=warps, num_stages=stages)


def main():
    torch.manual_seed(0)
    for bsz, m, n, k in [(32, 2048, 2048, 128), (8, 1024, 1024, 1024)]:
        a = torch.randn(bsz, m, k, device="cuda", dtype=torch.float16)
        b = torch.randn(bsz, k, n, device="cuda", dtype=torch.float16)
        want = torch.matmul(a, b)
        base = triton.testing.do_bench(lambda: torch.matmul(a, b), warmup=25, rep=200)
        print(f"{bsz}x{m}x{n}x{k} float16: torch.matmul {base * 1e3:.1f} us "
              f"({bsz * m * n * 2 / base / 1e9:.2f} TB/s of output)")
        rows = []
        for bm, bn, bk, warps, stages, desc, persistent in itertools.product(
                [128], [128, 256], [64, 128], [4, 8], [3], [False, True], [False, True]):
            if bm * bn > 128 * 128 and warps == 4:
                continue
            c = torch.empty_like(want)
            try:
                launch(a, b, c, bm, bn, bk, warps, stages, desc, persistent)
            except Exception as error:  # out of shared memory, and the like: not a candidate
                rows.append((float("inf"), f"BM{bm} BN{bn} BK{bk} w{warps} s{stages} desc={desc} "
                             f"persistent={persistent}: {type(error).__name__}"))
                continue
            torch.testing.assert_close(c, want, atol=2e-2, rtol=2e-2)
            ms = triton.testing.do_bench(lambda: launch(a, b, c, bm, bn, bk, warps, stages, desc, persistent),
                                         warmup=25, rep=200)
            rows.append((ms, f"BM{bm} BN{bn} BK{bk} w{warps} s{stages} desc={int(desc)} persistent={int(persistent)}"))
        for ms, label in sorted(rows)[:12]:
            print(f"  {ms * 1e3:8.1f} us  {base / ms:5.2f}x  {label}")
        for want_desc in (0, 1):
            best = min((r for r in rows if f"desc={want_desc}" in r[1]), default=None)
            if best:
                print(f"  best with desc={want_desc}: {best[0] * 1e3:.1f} us ({base / best[0]:.2f}x) {best[1]}")


if __name__ == "__main__":
    main()
