"""Bandwidth of broadcast elementwise calls against same-shape ones, on the same op and math.

scaled_silu_mul(x, b) is timed with b of x's shape and with b a row [N] broadcast over x's rows
(a stride-0 view read by the strided kernel); bias_gelu(x, bias) declares bias [N] in its spec.
Each broadcast call also runs as it did before: with the table's block as it is (the block for
streams off: runtime.configs.block_for_streams), and that with the strided kernel's blocks across
lines (LINES off: each element's indices divided out of its flat offset). Every case alternates
with the others over ROUNDS rounds, each case's median taken. Beside them:
eager PyTorch and torch.compile (fp16) of the same math, and a device-to-device copy of x, whose
rate is the bound. GB/s counts each tensor once (x, b as passed, the output).

    PYTHONPATH=. python3 bench/probes/broadcast_bandwidth.py OUT_DIR
"""

from __future__ import annotations

import contextlib
import csv
import statistics
import sys
from pathlib import Path

import torch
import triton

import tilegen.runtime as rt
from generated import bias_gelu, scaled_silu_mul
from generated.bias_gelu import _OP as BIAS_GELU
from generated.scaled_silu_mul import _OP as SCALED_SILU_MUL

HIDDEN = 4096
ROUNDS = 3


@contextlib.contextmanager
def as_before(op, lines):
    """`op`'s broadcast launches with the table's block as it is, and with `lines` False its
    strided kernel's blocks across lines too (its learned calls forgotten on the way in and out,
    so that the compiled call path launches what the Python path decides)."""
    op.call_path.forget()
    op._for_broadcast = lambda config, *_: config
    if not lines:
        op._by_lines = lambda line, block: False
    try:
        yield
    finally:
        del op._for_broadcast
        if not lines:
            del op._by_lines
        op.call_path.forget()


def timed(fn, before=None):
    """do_bench's median of `fn` (with `before`, (op, lines): as_before)."""
    with as_before(*before) if before is not None else contextlib.nullcontext():
        fn()
        return triton.testing.do_bench(fn, warmup=25, rep=100)


def main(out_dir: str) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    rt.callpath.load(wait=True)  # repeat calls on the compiled call path from the first, as a user's settle
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        for numel in (1 << 24, 1 << 26, 1 << 28):
            x = torch.randn(numel // HIDDEN, HIDDEN, device="cuda", dtype=dtype)
            full = torch.randn_like(x)
            row = torch.randn(HIDDEN, device="cuda", dtype=dtype)
            size = x.element_size()
            copy_ms = timed(lambda: x.clone())
            copy_gbs = 2 * numel * size / copy_ms / 1e6
            broadcast = (2 * numel + HIDDEN) * size
            cases = {
                "scaled_silu_mul same-shape": (lambda: scaled_silu_mul(x, full), 3 * numel * size, None),
                "scaled_silu_mul broadcast [N]": (lambda: scaled_silu_mul(x, row), broadcast, None),
                "scaled_silu_mul [N] table's block": (lambda: scaled_silu_mul(x, row), broadcast, (SCALED_SILU_MUL, True)),
                "scaled_silu_mul [N] & LINES off": (lambda: scaled_silu_mul(x, row), broadcast, (SCALED_SILU_MUL, False)),
                "eager silu(x)*b broadcast": (lambda: torch.nn.functional.silu(x) * row, broadcast, None),
                "bias_gelu broadcast [N]": (lambda: bias_gelu(x, row), broadcast, None),
                "bias_gelu [N] table's block": (lambda: bias_gelu(x, row), broadcast, (BIAS_GELU, True)),
                "bias_gelu [N] & LINES off": (lambda: bias_gelu(x, row), broadcast, (BIAS_GELU, False)),
                "eager gelu(x+bias)": (lambda: torch.nn.functional.gelu(x + row), broadcast, None),
            }
            if dtype == torch.float16:
                gelu = torch.compile(lambda a, b: torch.nn.functional.gelu(a + b))
                silu = torch.compile(lambda a, b: torch.nn.functional.silu(a) * b)
                cases["compile gelu(x+bias)"] = (lambda: gelu(x, row), broadcast, None)
                cases["compile silu(x)*b broadcast"] = (lambda: silu(x, row), broadcast, None)
            times = {name: [] for name in cases}
            for _ in range(ROUNDS):  # alternating, so that a drift of the clock touches every case
                for name, (fn, _moved, before) in cases.items():
                    times[name].append(timed(fn, before))
            for name, (fn, moved, _before) in cases.items():
                ms = statistics.median(times[name])
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
