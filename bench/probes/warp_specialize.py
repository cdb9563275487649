"""Does Triton's warp specialization (`tl.range(..., warp_specialize=True)`: producer warps issue
the tensor-descriptor loads, consumer warp groups run the MMAs and the epilogue, as cuBLAS's
sm90 kernels do with their two consumer groups) close the batched matmul's gap to torch.matmul on
the H200? The flattened persistent kernel of bmm_flatten.py, its tile loop warp-specialized or
not, flattened or not, beside torch.matmul in the same run, each result checked against it.

    PYTHONPATH=. python3 bench/probes/warp_specialize.py > OUT.txt
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from bench.probes.bmm_flatten import _coords, _store


@triton.jit
def _persistent(a_desc, b_desc, c_desc, B, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                GROUP_M: tl.constexpr, PROGRAMS: tl.constexpr, FLATTEN: tl.constexpr, SPECIALIZE: tl.constexpr):
    tiles_m = tl.cdiv(M, BM)
    tiles_n = tl.cdiv(N, BN)
    k_steps = tl.cdiv(K, BK)
    tiles = B * tiles_m * tiles_n
    for tile in tl.range(tl.program_id(0), tiles, PROGRAMS, flatten=FLATTEN, warp_specialize=SPECIALIZE):
        batch, pid_m, pid_n = _coords(tile, tiles_m, tiles_n, GROUP_M)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(k_steps):
            a = a_desc.load([batch, pid_m * BM, k * BK]).reshape(BM, BK)
            b = b_desc.load([batch, k * BK, pid_n * BN]).reshape(BK, BN)
            acc = tl.dot(a, b, acc)
        _store(c_desc, acc, batch, pid_m * BM, pid_n * BN, BM, BN, False)


def launch(a, b, c, config):
    bm, bn, bk, warps, stages, flatten, specialize = config
    bsz, m, k = a.shape
    n = b.shape[2]
    tiles = bsz * triton.cdiv(m, bm) * triton.cdiv(n, bn)
    programs = min(tiles, torch.cuda.get_device_properties(a.device).multi_processor_count)
    _persistent[(programs,)](TensorDescriptor.from_tensor(a, [1, bm, bk]), TensorDescriptor.from_tensor(b, [1, bk, bn]),
                             TensorDescriptor.from_tensor(c, [1, bm, bn]), bsz, m, n, k, bm, bn, bk, 8, programs,
                             flatten, specialize, num_warps=warps, num_stages=stages)


TILES = [(128, 128, 128, 4, 3), (128, 128, 64, 4, 4), (128, 256, 64, 8, 3), (128, 256, 64, 8, 4)]
FORMS = [(True, False), (False, True), (True, True)]


def main():
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, triton {triton.__version__}, {torch.cuda.get_device_name()}", flush=True)
    for bsz, m, n, k in [(32, 2048, 2048, 128), (8, 1024, 1024, 1024), (4, 4096, 4096, 4096), (1, 8192, 8192, 8192)]:
        a = torch.randn(bsz, m, k, device="cuda", dtype=torch.float16)
        b = torch.randn(bsz, k, n, device="cuda", dtype=torch.float16)
        want = torch.matmul(a, b)
        base = triton.testing.do_bench(lambda: torch.matmul(a, b), warmup=25, rep=200)
        flops = 2 * bsz * m * n * k
        print(f"{bsz}x{m}x{n}x{k} float16: torch.matmul {base * 1e3:.1f} us ({flops / base / 1e9:.0f} TFLOP/s)",
              flush=True)
        for tile in TILES:
            for flatten, specialize in FORMS:
                config = (*tile, flatten, specialize)
                label = (f"BM{tile[0]} BN{tile[1]} BK{tile[2]} w{tile[3]} s{tile[4]}"
                         f"{' flatten' if flatten else ''}{' warp_specialize' if specialize else ''}")
                c = torch.empty_like(want)
                try:
                    launch(a, b, c, config)
                    torch.cuda.synchronize()
                    torch.testing.assert_close(c, want, atol=2e-2, rtol=2e-2)
                except Exception as error:  # noqa: BLE001 - a form this Triton cannot build is a result too
                    print(f"  {label}: {type(error).__name__}: {str(error).splitlines()[0][:160]}", flush=True)
                    continue
                ms = triton.testing.do_bench(lambda: launch(a, b, c, config), warmup=25, rep=200)
                print(f"  {ms * 1e3:8.1f} us  {base / ms:5.2f}x  {label}", flush=True)


if __name__ == "__main__":
    main()
