"""fp8 matmul against torch._scaled_mm, row-wise and per-tensor scales, bfloat16 output.

fp8_scaled_mm(a, b, a_scale, b_scale) computes (A @ B) * a_scale[:, None] * b_scale[None, :] on
the float32 accumulator, the math of torch._scaled_mm's row-wise scaling; a per-tensor scale is
the same op with 0-d scales (read as stride-0 [M] and [N] views). A row-major, B column-major (the
layout torch._scaled_mm takes), float8_e4m3fn. Each point: both results checked against each
other, then timed by do_bench (median); TFLOP/s, and each as a fraction of the fp8 peak measured
here (the best torch._scaled_mm rate of the run, precise or fast accumulation). The last column
times _scaled_mm with use_fast_accum=True, the accumulation of a spec with precision fast_accum.

    PYTHONPATH=. python3 bench/probes/fp8_scaled_mm.py OUT_DIR
"""

from __future__ import annotations

import csv
import math
import sys
from pathlib import Path

import torch
import triton

from generated import fp8_scaled_mm

SHAPES = [(2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192), (4096, 11008, 4096), (128, 4096, 4096)]


def timed(fn):
    fn()
    return triton.testing.do_bench(fn, warmup=25, rep=200)


def main(out_dir: str) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for m, n, k in SHAPES:
        gen = torch.Generator(device="cuda").manual_seed(0)
        a = (torch.randn(m, k, device="cuda", generator=gen) * k ** -0.25).to(torch.float8_e4m3fn)
        b = (torch.randn(n, k, device="cuda", generator=gen) * k ** -0.25).to(torch.float8_e4m3fn).t()
        row = torch.rand(m, device="cuda", generator=gen) + 0.5
        col = torch.rand(n, device="cuda", generator=gen) + 0.5
        one_a, one_b = row[:1].reshape(()), col[:1].reshape(())
        def scaled_mm(scale_a, scale_b, fast=False):
            return lambda: torch._scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16,
                                            use_fast_accum=fast)

        cases = {
            "row-wise": (lambda: fp8_scaled_mm(a, b, row, col), row[:, None], col[None, :]),
            "per-tensor": (lambda: fp8_scaled_mm(a, b, one_a, one_b), one_a, one_b),
        }
        for scaling, (ours, scale_a, scale_b) in cases.items():
            theirs = scaled_mm(scale_a, scale_b)
            # Both round float32 sums, added in different orders, to bfloat16: a value near a
            # rounding boundary may land one bfloat16 step apart (0.023 at 8192^3 in the first run).
            torch.testing.assert_close(ours().float(), theirs().float(), atol=5e-2, rtol=2e-2)
            ms, torch_ms = timed(ours), timed(theirs)
            # cuBLAS with Hopper's fast fp8 accumulation (the whole K loop in the tensor cores'
            # reduced precision): a bound, not a like-for-like rate (tilegen adds each K step into float32).
            fast_ms = timed(scaled_mm(scale_a, scale_b, fast=True))
            flops = 2 * m * n * k
            rows.append(dict(shape=f"{m}x{n}x{k}", scaling=scaling, tilegen_ms=ms, scaled_mm_ms=torch_ms,
                             tilegen_tflops=flops / ms / 1e9, scaled_mm_tflops=flops / torch_ms / 1e9,
                             speedup=torch_ms / ms, scaled_mm_fast_accum_ms=fast_ms, speedup_vs_fast=fast_ms / ms))
    peak = max(max(r["scaled_mm_tflops"], 2 * math.prod(map(int, r["shape"].split("x"))) / r["scaled_mm_fast_accum_ms"] / 1e9)
               for r in rows)
    lines = [f"fp8 peak (best torch._scaled_mm rate here, either accumulation): {peak:.0f} TFLOP/s",
             f"{'shape':<18} {'scaling':<11} {'tilegen us':>10} {'_scaled_mm us':>13} {'tilegen TF/s':>12} "
             f"{'of peak':>7} {'_scaled_mm TF/s':>15} {'speedup':>7} {'fast-accum _scaled_mm us':>24} {'vs fast':>7}"]
    for r in rows:
        r["tilegen_of_peak"] = r["tilegen_tflops"] / peak
        lines.append(f"{r['shape']:<18} {r['scaling']:<11} {r['tilegen_ms'] * 1e3:>10.1f} {r['scaled_mm_ms'] * 1e3:>13.1f} "
                     f"{r['tilegen_tflops']:>12.0f} {r['tilegen_of_peak']:>7.0%} {r['scaled_mm_tflops']:>15.0f} "
                     f"{r['speedup']:>6.2f}x {r['scaled_mm_fast_accum_ms'] * 1e3:>24.1f} {r['speedup_vs_fast']:>6.2f}x")
    for scaling in ("row-wise", "per-tensor"):
        for key, baseline in (("speedup", "precise"), ("speedup_vs_fast", "fast-accum")):
            speedups = [r[key] for r in rows if r["scaling"] == scaling]
            lines.append(f"{scaling} against {baseline} _scaled_mm: geomean "
                         f"{math.exp(sum(map(math.log, speedups)) / len(speedups)):.2f}x, worst {min(speedups):.2f}x")
    text = "\n".join(lines)
    print(text)
    (out / "fp8_scaled_mm.txt").write_text(text + "\n")
    with open(out / "fp8_scaled_mm.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bench/out/fp8")
