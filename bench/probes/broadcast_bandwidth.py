"""Bandwidth of broadcast elementwise calls against same-shape ones, on the same op and math.

scaled_silu_mul(x, b) is timed with b of x's shape and with b a row [N] broadcast over x's rows
(a stride-0 view read by the strided kernel); bias_gelu(x, bias) declares bias [N] in its spec.
Beside them: eager PyTorch and torch.compile (fp16) of the same math, and a device-to-device copy
of x, whose rate is the bound. GB/s counts each tensor once (x, b as passed, the output).

    PYTHONPATH=. python3 bench/probes/broadcast_bandwidth.py OUT_DIR
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import torch
import triton

from generated import bias_gelu, scaled_silu_mul

HIDDEN = 4096


def timed(fn):
    fn()
    return triton.testing.do_bench(fn, warmup=25, rep=100)


def main(out_dir: str) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        for numel in (1 << 24, 1 << 26, 1 << 28):
            x = torch.randn(numel // HIDDEN, HIDDEN, device="cuda", dtype=dtype)
            full = torch.randn_like(x)
            row = torch.randn(HIDDEN, device="cuda", dtype=dtype)
            size = x.element_size()
            copy_ms = timed(lambda: x.clone())
            copy_gbs = 2 * numel * size / copy_ms / 1e6
            cases = {
                "scaled_silu_mul same-shape": (lambda: scaled_silu_mul(x, full), 3 * numel * size),
                "scaled_silu_mul broadcast [N]": (lambda: scaled_silu_mul(x, row), (2 * numel + HIDDEN) * size),
                "eager silu(x)*b broadcast": (lambda: torch.nn.functional.silu(x) * row, (2 * numel + HIDDEN) * size),
                "bias_gelu broadcast [N]": (lambda: bias_gelu(x, row), (2 * numel + HIDDEN) * size),
                "eager gelu(x+bias)": (lambda: torch.nn.functional.gelu(x + row), (2 * numel + HIDDEN) * size),
            }
            if dtype == torch.float16:
                gelu = torch.compile(lambda a, b: torch.nn.functional.gelu(a + b))
                silu = torch.compile(lambda a, b: torch.nn.functional.silu(a) * b)
                cases["compile gelu(x+bias)"] = (lambda: gelu(x, row), (2 * numel + HIDDEN) * size)
                cases["compile silu(x)*b broadcast"] = (lambda: silu(x, row), (2 * numel + HIDDEN) * size)
            for name, (fn, moved) in cases.items():
                ms = timed(fn)
                gbs = moved / ms / 1e6
                rows.append(dict(case=name, dtype=str(dtype).split(".")[1], numel=numel, ms=round(ms, 4),
                                 gbs=round(gbs, 1), of_copy=round(gbs / copy_gbs, 3), copy_gbs=round(copy_gbs, 1)))
                print(f"{name:32s} {rows[-1]['dtype']:9s} 2^{numel.bit_length() - 1}: {ms:.4f} ms "
                      f"{gbs:7.1f} GB/s ({gbs / copy_gbs:.0%} of copy)", flush=True)
    with open(out / "broadcast_bandwidth.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bench/out/broadcast")
