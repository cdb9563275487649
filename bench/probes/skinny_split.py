"""Where skinny matmuls (M = 16, 64, 128; N = K = 4096) spend their time, and whether split-K
pays once its reduction is spread over the programs of a tile.

A standalone kernel with the generated matmul's main loop (pointer loads, grouped order, rows
wrapped past M) under three ways to finish a split-K tile:

- none: each split stores its own sum (wrong whenever SPLIT_K > 1): the main loop alone, a
  lower bound for any reduction;
- last: the generated kernel's scheme: every split stores a float32 partial sum, and the last
  to arrive adds all of them and stores the tile;
- spread: every split stores its partial sum, waits until all splits of its tile have, then
  adds up its own 1/SPLIT_K of the tile's rows. Only where every program is resident at once
  (tiles * SPLIT_K <= multiprocessors), or waiting could starve the programs waited for.

Beside them: the generated matmul on its table config and torch.mm (cuBLAS), the same inputs.
Each variant is checked against torch.mm first, in a process of its own. Three interleaved
rounds of do_bench medians.
"""
import os
import statistics
import subprocess
import sys

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

sys.path.insert(0, os.getcwd())
import generated  # noqa: E402


@triton.jit
def _mm(a_ptr, b_ptr, c_ptr, partial_ptr, count_ptr, M, N, K,
        stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
        BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, SPLIT_K: tl.constexpr,
        REDUCE: tl.constexpr, GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BM)
    num_pid_n = tl.cdiv(N, BN)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_n = pid_n * BN + tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    k_steps = tl.cdiv(K, BK)
    per_split = tl.cdiv(k_steps, SPLIT_K)
    split = tl.program_id(1)
    k_first = split * per_split
    k_stop = min(k_first + per_split, k_steps)
    a_ptrs = a_ptr + (offs_m % M)[:, None] * stride_am + offs_k[None, :] * stride_ak + k_first * BK * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn + k_first * BK * stride_bk
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(k_first, k_stop):
        acc = tl.dot(tl.load(a_ptrs), tl.load(b_ptrs), acc)
        a_ptrs += BK * stride_ak
        b_ptrs += BK * stride_bk
    in_bounds = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    if SPLIT_K == 1 or REDUCE == 0:
        tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn,
                 acc.to(c_ptr.dtype.element_ty), mask=in_bounds)
    else:
        cells = tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :]
        tile_ptr = partial_ptr + pid.to(tl.int64) * (SPLIT_K * BM * BN)
        tl.store(tile_ptr + split * (BM * BN) + cells, acc, mask=in_bounds)
        tl.debug_barrier()
        arrived = tl.atomic_add(count_ptr + pid, 1, sem="acq_rel", scope="gpu")
        if REDUCE == 1:
            if arrived == SPLIT_K - 1:
                acc = tl.zeros((BM, BN), dtype=tl.float32)
                for other in tl.static_range(SPLIT_K):
                    acc += tl.load(tile_ptr + other * (BM * BN) + cells, mask=in_bounds, other=0.0,
                                   cache_modifier=".cg")
                tl.store(count_ptr + pid, 0)
                tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn,
                         acc.to(c_ptr.dtype.element_ty), mask=in_bounds)
        else:
            # Wait for every split of this tile; then sum this split's slice of rows.
            while tl.atomic_add(count_ptr + pid, 0, sem="acquire", scope="gpu") < SPLIT_K:
                pass
            ROWS: tl.constexpr = BM // SPLIT_K
            rows = split * ROWS + tl.arange(0, ROWS)
            slice_cells = rows[:, None] * BN + tl.arange(0, BN)[None, :]
            slice_m = pid_m * BM + rows
            slice_in = (slice_m[:, None] < M) & (offs_n[None, :] < N)
            part = tl.zeros((ROWS, BN), dtype=tl.float32)
            for other in tl.static_range(SPLIT_K):
                part += tl.load(tile_ptr + other * (BM * BN) + slice_cells, mask=slice_in, other=0.0,
                                cache_modifier=".cg")
            tl.store(c_ptr + slice_m[:, None] * stride_cm + offs_n[None, :] * stride_cn,
                     part.to(c_ptr.dtype.element_ty), mask=slice_in)
            # Departures: the last one leaves the counter at zero for the next launch.
            left = tl.atomic_add(count_ptr + pid, 1, sem="relaxed", scope="gpu")
            if left == 2 * SPLIT_K - 1:
                tl.store(count_ptr + pid, 0)


SMS = torch.cuda.get_device_properties(0).multi_processor_count
COUNTERS = torch.zeros(4096, dtype=torch.int32, device="cuda")


def launcher(a, b, c, bm, bn, bk, split, warps, stages, reduce):
    M, K = a.shape
    N = b.shape[1]
    tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
    partial = torch.empty(tiles * split * bm * bn, dtype=torch.float32, device="cuda")

    def call():
        _mm[(tiles, split)](a, b, c, partial, COUNTERS, M, N, K, *a.stride(), *b.stride(), *c.stride(),
                            BM=bm, BN=bn, BK=bk, SPLIT_K=split, REDUCE=reduce, GROUP_M=8,
                            num_warps=warps, num_stages=stages)
    return call


SHAPES = [(16, 4096, 4096), (64, 4096, 4096), (128, 4096, 4096)]
CONFIGS = [  # (BM, BN, BK, SPLIT_K, warps, stages)
    (64, 64, 128, 1, 4, 5), (64, 64, 128, 2, 4, 4), (64, 64, 64, 2, 4, 5), (64, 128, 128, 2, 4, 4),
    (64, 128, 64, 4, 4, 4), (64, 256, 64, 8, 8, 3), (128, 64, 64, 2, 4, 4), (128, 128, 64, 4, 8, 4),
    (128, 128, 64, 4, 4, 4), (128, 128, 128, 4, 8, 3), (128, 256, 64, 8, 8, 3),
]
REDUCES = {0: "none", 1: "last", 2: "spread"}
ROUNDS = 3


def cases():
    out = []
    for shape in SHAPES:
        M, N, K = shape
        for cfg in CONFIGS:
            bm, bn, bk, split = cfg[:4]
            tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
            if bm > max(64, M) or (split > 1 and tiles * split > 4 * SMS):
                continue
            for reduce in ((1,) if split == 1 else (0, 1, 2)):
                if reduce == 2 and tiles * split > SMS:
                    continue
                out.append((shape, cfg, reduce))
    return out


def compile_and_check(index):
    """Compile one case's kernels (both dtypes) into the shared cache and check their results
    (twice, so a counter left behind would show), in a process of its own: a case that fails or
    hangs is left out of the timing."""
    shape, cfg, reduce = cases()[index]
    for dtype in (torch.float16, torch.bfloat16):
        a = torch.randn(shape[0], shape[2], device="cuda", dtype=dtype)
        b = torch.randn(shape[2], shape[1], device="cuda", dtype=dtype)
        c = torch.empty(shape[0], shape[1], device="cuda", dtype=dtype)
        call = launcher(a, b, c, *cfg, reduce)
        for _ in range(2):
            c.zero_()
            call()
            if reduce or cfg[3] == 1:
                torch.testing.assert_close(c, a @ b, atol=0.5, rtol=2e-2)
    torch.cuda.synchronize()


def main():
    todo = cases()
    running, failed = [], []

    def finish(i, proc):
        try:
            code = proc.wait(timeout=180)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = "hung"
        if code != 0:
            failed.append(i)
            print(f"left out {todo[i]}: {code}", flush=True)

    for i in range(len(todo)):  # 14 at a time
        running.append((i, subprocess.Popen([sys.executable, __file__, str(i)])))
        if len(running) >= 14:
            finish(*running.pop(0))
    for i, proc in running:
        finish(i, proc)
    todo = [case for i, case in enumerate(todo) if i not in failed]
    print(f"triton {triton.__version__} torch {torch.__version__} SMs {SMS}, {len(todo)} cases checked",
          flush=True)
    samples = {}
    for rnd in range(ROUNDS):
        for shape in SHAPES:
            M, N, K = shape
            for dtype in (torch.float16, torch.bfloat16):
                torch.manual_seed(0)
                a = torch.randn(M, K, device="cuda", dtype=dtype)
                b = torch.randn(K, N, device="cuda", dtype=dtype)
                c = torch.empty(M, N, device="cuda", dtype=dtype)
                name = str(dtype)[6:]
                samples.setdefault((shape, name, "torch.mm"), []).append(
                    do_bench(lambda: a @ b, return_mode="median") * 1e3)
                samples.setdefault((shape, name, "generated (table)"), []).append(
                    do_bench(lambda: generated.matmul(a, b), return_mode="median") * 1e3)
                for case_shape, cfg, reduce in todo:
                    if case_shape != shape:
                        continue
                    call = launcher(a, b, c, *cfg, reduce)
                    label = f"BM{cfg[0]} BN{cfg[1]} BK{cfg[2]} split{cfg[3]} w{cfg[4]} s{cfg[5]} {REDUCES[reduce]}"
                    samples.setdefault((shape, name, label), []).append(do_bench(call, return_mode="median") * 1e3)
    for (shape, name, label), values in samples.items():
        print(f"{'x'.join(map(str, shape)):15} {name:9} {label:42} median {statistics.median(values):6.1f} us"
              f"  (rounds: {', '.join(f'{v:.1f}' for v in values)})")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        compile_and_check(int(sys.argv[1]))
    else:
        main()
