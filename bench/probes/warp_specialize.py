"""Does Triton's warp specialization (`tl.range(..., warp_specialize=True)`: producer warps issue
the tensor-descriptor loads, consumer warp groups run the MMAs and the epilogue, as cuBLAS's
sm90 kernels do with their two consumer groups) close the batched matmul's gap to torch.matmul on
the H200? A persistent kernel over 2-D descriptors (a batch's matrices stacked along the rows:
[B*M, K] @ [B*K, N] -> [B*M, N], every tile inside one matrix), its tile loop flattened with the K
loop (as tilegen's FLATTEN), warp-specialized, or both, beside torch.matmul in the same run, each
result checked against it. Triton 3.6's Hopper warp specialization aborted the process on the
3-D-descriptor kernel of bmm_flatten.py (probe_first.txt), so each warp-specialized config
compiles and runs in a process of its own.

    PYTHONPATH=. python3 bench/probes/warp_specialize.py > OUT.txt
"""

from __future__ import annotations

import subprocess
import sys

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from bench.probes.bmm_flatten import _coords


@triton.jit
def _persistent(a_desc, b_desc, c_desc, B, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                GROUP_M: tl.constexpr, PROGRAMS: tl.constexpr, FLATTEN: tl.constexpr, SPECIALIZE: tl.constexpr):
    tiles_m = tl.cdiv(M, BM)
    tiles_n = tl.cdiv(N, BN)
    k_steps = tl.cdiv(K, BK)
    tiles = B * tiles_m * tiles_n
    for tile in tl.range(tl.program_id(0), tiles, PROGRAMS, flatten=FLATTEN, warp_specialize=SPECIALIZE):
        batch, pid_m, pid_n = _coords(tile, tiles_m, tiles_n, GROUP_M)
        row = batch * M + pid_m * BM
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(k_steps):
            a = a_desc.load([row, k * BK])
            b = b_desc.load([batch * K + k * BK, pid_n * BN])
            acc = tl.dot(a, b, acc)
        c_desc.store([row, pid_n * BN], acc.to(c_desc.dtype))


def launch(a, b, c, config):
    bm, bn, bk, warps, stages, flatten, specialize = config
    bsz, m, k = a.shape
    n = b.shape[2]
    tiles = bsz * triton.cdiv(m, bm) * triton.cdiv(n, bn)
    programs = min(tiles, torch.cuda.get_device_properties(a.device).multi_processor_count)
    _persistent[(programs,)](TensorDescriptor.from_tensor(a.view(bsz * m, k), [bm, bk]),
                             TensorDescriptor.from_tensor(b.view(bsz * k, n), [bk, bn]),
                             TensorDescriptor.from_tensor(c.view(bsz * m, n), [bm, bn]), bsz, m, n, k, bm, bn, bk, 8,
                             programs, flatten, specialize, num_warps=warps, num_stages=stages)


SHAPES = [(32, 2048, 2048, 128), (8, 1024, 1024, 1024), (4, 4096, 4096, 4096), (1, 8192, 8192, 8192)]
TILES = [(128, 128, 128, 4, 3), (128, 128, 64, 4, 4), (128, 256, 64, 8, 3), (128, 256, 64, 8, 4)]
FORMS = [(True, False), (False, True), (True, True)]


def time_one(shape, config):
    """A line: `config` at `shape` against torch.matmul, or why it did not run."""
    bsz, m, n, k = shape
    torch.manual_seed(0)
    a = torch.randn(bsz, m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(bsz, k, n, device="cuda", dtype=torch.float16)
    want = torch.matmul(a, b)
    base = triton.testing.do_bench(lambda: torch.matmul(a, b), warmup=25, rep=200)
    bm, bn, bk, warps, stages, flatten, specialize = config
    label = (f"BM{bm} BN{bn} BK{bk} w{warps} s{stages}{' flatten' if flatten else ''}"
             f"{' warp_specialize' if specialize else ''}")
    c = torch.empty_like(want)
    try:
        launch(a, b, c, config)
        torch.cuda.synchronize()
        torch.testing.assert_close(c, want, atol=2e-2, rtol=2e-2)
    except Exception as error:  # noqa: BLE001 - a form this Triton cannot build is a result too
        return f"  {label}: {type(error).__name__}: {str(error).splitlines()[0][:160]}"
    ms = triton.testing.do_bench(lambda: launch(a, b, c, config), warmup=25, rep=200)
    return f"  {ms * 1e3:8.1f} us  {base / ms:5.2f}x  {label}  (torch.matmul {base * 1e3:.1f} us)"


def main():
    print(f"torch {torch.__version__}, triton {triton.__version__}, {torch.cuda.get_device_name()}", flush=True)
    for shape in SHAPES:
        print(f"{'x'.join(map(str, shape))} float16", flush=True)
        for tile in TILES:
            for flatten, specialize in FORMS:
                config = (*tile, flatten, specialize)
                if not specialize:
                    print(time_one(shape, config), flush=True)
                    continue
                run = subprocess.run([sys.executable, __file__, repr(shape), repr(config)], capture_output=True,
                                     text=True, timeout=120)
                line = run.stdout.strip() or f"  {config}: the process ended with {run.returncode}: " \
                    + " | ".join(run.stderr.strip().splitlines()[:2])[:200]
                print(line, flush=True)


if __name__ == "__main__":
    if len(sys.argv) == 3:
        print(time_one(eval(sys.argv[1]), eval(sys.argv[2])))  # noqa: S307 - our own repr of tuples
    else:
        main()
