"""Does a persistent batched matmul whose tile loop and K loop are one flattened loop (Triton's
`tl.range(..., flatten=True)`, as in Triton's persistent-matmul tutorial) overlap a tile's store
with the next tile's loads where a short K leaves nothing else to hide it behind? Attention's
scores (32 x 2048x2048x128) mostly store their output; tilegen's launch there (one program a tile,
or a persistent loop that calls the tile's code, with no overlap across tiles) reached 0.70x
torch.matmul. Stand-alone kernels, 3-D tensor descriptors for the loads and the store, beside
torch.matmul in the same run:

- flatten: the persistent loop flattened with its K loop (the software pipeliner then prefetches
  the next tile's first K steps during this tile's epilogue), or nested as tilegen's is;
- subtile: the output tile stored in two halves along N (less shared memory for the store's
  staging, the halves' stores in flight while the second converts);
- one program a tile (no persistence) for reference.

    PYTHONPATH=. python3 bench/probes/bmm_flatten.py > OUT.txt
"""

from __future__ import annotations

import itertools

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor


@triton.jit
def _coords(tile, tiles_m, tiles_n, GROUP_M: tl.constexpr):
    per_matrix = tiles_m * tiles_n
    batch = tile // per_matrix
    t = tile % per_matrix
    group = GROUP_M * tiles_n
    first_m = (t // group) * GROUP_M
    size_m = min(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (t % group) % size_m
    pid_n = (t % group) // size_m
    return batch, pid_m, pid_n


@triton.jit
def _store(c_desc, acc, batch, row, col, BM: tl.constexpr, BN: tl.constexpr, SUBTILE: tl.constexpr):
    if SUBTILE:
        halves = tl.permute(tl.reshape(acc, (BM, 2, BN // 2)), (0, 2, 1))
        left, right = tl.split(halves)
        c_desc.store([batch, row, col], left.to(c_desc.dtype).reshape(1, BM, BN // 2))
        c_desc.store([batch, row, col + BN // 2], right.to(c_desc.dtype).reshape(1, BM, BN // 2))
    else:
        c_desc.store([batch, row, col], acc.to(c_desc.dtype).reshape(1, BM, BN))


@triton.jit
def _persistent(a_desc, b_desc, c_desc, B, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                GROUP_M: tl.constexpr, PROGRAMS: tl.constexpr, FLATTEN: tl.constexpr, SUBTILE: tl.constexpr):
    tiles_m = tl.cdiv(M, BM)
    tiles_n = tl.cdiv(N, BN)
    k_steps = tl.cdiv(K, BK)
    tiles = B * tiles_m * tiles_n
    # The tile being stored trails the tile being loaded: its coordinates are recomputed at the
    # store, as the tutorial does, so none stay live across the flattened loop.
    stored = tl.program_id(0) - PROGRAMS
    for tile in tl.range(tl.program_id(0), tiles, PROGRAMS, flatten=FLATTEN):
        batch, pid_m, pid_n = _coords(tile, tiles_m, tiles_n, GROUP_M)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(k_steps):
            a = a_desc.load([batch, pid_m * BM, k * BK]).reshape(BM, BK)
            b = b_desc.load([batch, k * BK, pid_n * BN]).reshape(BK, BN)
            acc = tl.dot(a, b, acc)
        stored += PROGRAMS
        batch_c, pid_m_c, pid_n_c = _coords(stored, tiles_m, tiles_n, GROUP_M)
        _store(c_desc, acc, batch_c, pid_m_c * BM, pid_n_c * BN, BM, BN, SUBTILE)


@triton.jit
def _per_tile(a_desc, b_desc, c_desc, B, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
              GROUP_M: tl.constexpr, SUBTILE: tl.constexpr):
    batch, pid_m, pid_n = _coords(tl.program_id(0), tl.cdiv(M, BM), tl.cdiv(N, BN), GROUP_M)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(tl.cdiv(K, BK)):
        a = a_desc.load([batch, pid_m * BM, k * BK]).reshape(BM, BK)
        b = b_desc.load([batch, k * BK, pid_n * BN]).reshape(BK, BN)
        acc = tl.dot(a, b, acc)
    _store(c_desc, acc, batch, pid_m * BM, pid_n * BN, BM, BN, SUBTILE)


def launch(a, b, c, config):
    bm, bn, bk, warps, stages, form, subtile = config
    bsz, m, k = a.shape
    n = b.shape[2]
    store_n = bn // 2 if subtile else bn
    args = (TensorDescriptor.from_tensor(a, [1, bm, bk]), TensorDescriptor.from_tensor(b, [1, bk, bn]),
            TensorDescriptor.from_tensor(c, [1, bm, store_n]), bsz, m, n, k, bm, bn, bk, 8)
    tiles = bsz * triton.cdiv(m, bm) * triton.cdiv(n, bn)
    if form == "per_tile":
        _per_tile[(tiles,)](*args, subtile, num_warps=warps, num_stages=stages)
    else:
        programs = min(tiles, torch.cuda.get_device_properties(a.device).multi_processor_count)
        _persistent[(programs,)](*args, programs, form == "flatten", subtile, num_warps=warps, num_stages=stages)


def main():
    torch.manual_seed(0)
    shapes = [(32, 2048, 2048, 128), (8, 1024, 1024, 1024), (64, 128, 128, 64), (4, 4096, 4096, 4096)]
    for bsz, m, n, k in shapes:
        a = torch.randn(bsz, m, k, device="cuda", dtype=torch.float16)
        b = torch.randn(bsz, k, n, device="cuda", dtype=torch.float16)
        want = torch.matmul(a, b)
        base = triton.testing.do_bench(lambda: torch.matmul(a, b), warmup=25, rep=200)
        print(f"{bsz}x{m}x{n}x{k} float16: torch.matmul {base * 1e3:.1f} us "
              f"({bsz * m * n * 2 / base / 1e9:.2f} TB/s of output)", flush=True)
        rows = []
        small = m <= 128
        for bm, bn, bk, warps, stages, form, subtile in itertools.product(
                [64, 128] if small else [128], [64, 128] if small else [128, 256], [64, 128] if k >= 128 else [64],
                [4, 8], [3, 4] if (m, k) == (2048, 128) else [3], ["flatten", "nested", "per_tile"], [False, True]):
            if bm * bn > 128 * 128 and warps == 4 or bm * bn < 128 * 128 and warps == 8:
                continue
            if subtile and form != "flatten":  # (the halves' store is tried where loads can overlap it)
                continue
            config = (bm, bn, bk, warps, stages, form, subtile)
            label = f"BM{bm} BN{bn} BK{bk} w{warps} s{stages} {form}{' subtile' if subtile else ''}"
            c = torch.empty_like(want)
            try:
                launch(a, b, c, config)
            except Exception as error:  # out of shared memory, and the like: not a candidate
                rows.append((float("inf"), f"{label}: {type(error).__name__}"))
                continue
            torch.testing.assert_close(c, want, atol=2e-2, rtol=2e-2)
            ms = triton.testing.do_bench(lambda: launch(a, b, c, config), warmup=25, rep=200)
            rows.append((ms, label))
        for ms, label in sorted(rows)[:10]:
            print(f"  {ms * 1e3:8.1f} us  {base / ms:5.2f}x  {label}")
        for form in ("flatten", "nested", "per_tile"):
            best = min((r for r in rows if f" {form}" in r[1] and r[0] != float("inf")), default=None)
            if best:
                print(f"  best {form}: {best[0] * 1e3:.1f} us ({base / best[0]:.2f}x) {best[1]}")
        failed = [label for ms, label in rows if ms == float("inf")]
        if failed:
            print(f"  not launched: {failed[:4]}{' ...' if len(failed) > 4 else ''}")
        print(flush=True)


if __name__ == "__main__":
    main()
