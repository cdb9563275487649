"""A row [N] broadcast over x [rows, N] through the strided kernel: each tile's indices divided
out once (IN_ONE_RUN, where N is a multiple of the tile) against each element's (the kernel
before), beside the same op on same-shape inputs, eager PyTorch, torch.compile (fp16) and a copy
of x, in one run; the two index forms take turns, twice each.

    PYTHONPATH=. python3 bench/probes/broadcast_tiles.py

Each line: time, GB/s (each tensor counted once) and the fraction of the copy's rate.
"""
from __future__ import annotations

import statistics

import torch
import triton

from generated import bias_gelu, scaled_silu_mul
from tilegen.runtime import callpath
from tilegen.runtime.launch import Kernel

HIDDEN = 4096
_launch = Kernel.launch


def per_element(self, grid, args, varying, constexprs, *rest):
    """The launch with each element's indices divided out, as before IN_ONE_RUN."""
    if constexprs.get("IN_ONE_RUN"):
        constexprs = dict(constexprs, IN_ONE_RUN=False)
    return _launch(self, grid, args, varying, constexprs, *rest)


def timed(fn):
    fn()
    return triton.testing.do_bench(fn, warmup=25, rep=100)


def in_form(form, fn):
    """`fn` timed with the index form `form`; the ops' learned calls are forgotten around it, so that
    repeat calls launch the form's kernel."""
    Kernel.launch = per_element if form == "per element" else _launch
    for op in (bias_gelu, scaled_silu_mul):
        __import__(op.__module__, fromlist=["_OP"])._OP.call_path.forget()
    try:
        return timed(fn)
    finally:
        Kernel.launch = _launch


def main() -> None:
    callpath.load(wait=True)
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        for numel in (1 << 24, 1 << 26, 1 << 28):
            x = torch.randn(numel // HIDDEN, HIDDEN, device="cuda", dtype=dtype)
            full = torch.randn_like(x)
            row = torch.randn(HIDDEN, device="cuda", dtype=dtype)
            size = x.element_size()
            copy_gbs = 2 * numel * size / timed(lambda: x.clone()) / 1e6
            broadcast = (2 * numel + HIDDEN) * size
            cases = {
                "scaled_silu_mul same-shape": (lambda: scaled_silu_mul(x, full), 3 * numel * size),
                "eager silu(x)*b broadcast": (lambda: torch.nn.functional.silu(x) * row, broadcast),
                "eager gelu(x+bias)": (lambda: torch.nn.functional.gelu(x + row), broadcast),
            }
            if dtype == torch.float16:
                silu = torch.compile(lambda a, b: torch.nn.functional.silu(a) * b)
                gelu = torch.compile(lambda a, b: torch.nn.functional.gelu(a + b))
                cases["compile silu(x)*b broadcast"] = (lambda: silu(x, row), broadcast)
                cases["compile gelu(x+bias)"] = (lambda: gelu(x, row), broadcast)
            results = {name: timed(fn) for name, (fn, _) in cases.items()}
            formed = {"scaled_silu_mul broadcast [N]": lambda: scaled_silu_mul(x, row),
                      "bias_gelu broadcast [N]": lambda: bias_gelu(x, row)}
            turns = {}
            for turn in range(2):
                for form in (("per element", "in one run") if turn == 0 else ("in one run", "per element")):
                    for name, fn in formed.items():
                        turns.setdefault(f"{name}, {form}", []).append(in_form(form, fn))
            results.update({name: statistics.median(times) for name, times in turns.items()})
            moved = {name: (broadcast if "broadcast" in name or "gelu" in name else 3 * numel * size) for name in results}
            for name, ms in results.items():
                gbs = moved[name] / ms / 1e6
                print(f"{name:45s} {str(dtype)[6:]:9s} 2^{numel.bit_length() - 1}: {ms * 1e3:8.1f} us "
                      f"{gbs:7.1f} GB/s ({gbs / copy_gbs:.0%} of copy)", flush=True)


if __name__ == "__main__":
    main()
