"""Reductions over another axis than the last (`dim=`), beside PyTorch eager and torch.compile.

For each shape and dtype: tilegen's softmax / layer_norm with `dim=` (views with the axis moved
last, read in place where rows are one element apart, else copied in memory order), the op on
a copy of the moved view in memory order, the op on the moved view as it lies (rows read along
a stride), PyTorch eager and
torch.compile of the same call, the last axis of a contiguous tensor of the same size (the op's
own bound), and a device-to-device copy. Where the moved view's rows are one element apart (the
first axis of a matrix reduced), the strided view also runs under forced configs of many rows a
program and short blocks along them (`rows R block B wW`): a tile whose rows are contiguous,
which Triton's coalescing can load a line at a time. GB/s counts the input and the output once
each. Medians of three interleaved rounds.

    PYTHONPATH=. python3 bench/probes/reduced_axis.py OUT_DIR [--across | --plain]

`--plain`: every case, only tilegen's `dim=` beside eager, torch.compile and the copy.
"""

from __future__ import annotations

import contextlib
import csv
import importlib
import statistics
import sys
from pathlib import Path

import torch
import triton

from generated import layer_norm, softmax

# (shape, dim): channels of an image batch ([B, C, HW], C reduced: rows that do not merge into
# one stride), and the first axis of a matrix (rows one element apart, the reduced axis strided).
CASES = [((32, 512, 4096), 1), ((8192, 4096), 0), ((64, 1024, 1024), 1), ((1024, 16384), 0)]
ROUNDS = 3
# (ROWS, BLOCK_N, num_warps) forced on the strided view whose rows are one element apart
# (runtime.configs.across_rows_config's); `--across` times only those shapes, and these tiles.
ROW_TILES = [(128, 32, 4), (64, 64, 4), (32, 128, 4), (256, 16, 8), (128, 64, 8), (64, 32, 2)]
ACROSS_TILES = [(32, 128, 4), (16, 256, 4), (8, 512, 4), (16, 256, 8), (32, 256, 8)]


def timed(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=100)


def cases_for(op, x, dim, w, b):
    n = x.shape[dim]
    if op == "softmax":
        compiled = torch.compile(lambda t: torch.softmax(t, dim))
        last = torch.randn(x.numel() // n, n, device="cuda", dtype=x.dtype)
        return {
            "tilegen dim=": lambda: softmax(x, dim=dim),
            "tilegen through a copy": lambda: softmax(x.movedim(dim, -1).contiguous()).movedim(-1, dim),
            "tilegen strided view": lambda: softmax(x.movedim(dim, -1)).movedim(-1, dim),
            "eager": lambda: torch.softmax(x, dim),
            "torch.compile": lambda: compiled(x),
            "tilegen last axis (bound)": lambda: softmax(last),
            "copy": lambda: x.clone(),
        }
    # layer_norm over the channels: PyTorch's has no dim, so eager and compile move the axis too.
    def eager(t):
        return torch.nn.functional.layer_norm(t.movedim(dim, -1), (n,), w, b).movedim(-1, dim)

    compiled = torch.compile(eager)
    last = torch.randn(x.numel() // n, n, device="cuda", dtype=x.dtype)
    return {
        "tilegen dim=": lambda: layer_norm(x, w, b, dim=dim),
        "tilegen through a copy": lambda: layer_norm(x.movedim(dim, -1).contiguous(), w, b)[0].movedim(-1, dim),
        "tilegen strided view": lambda: layer_norm(x.movedim(dim, -1), w, b)[0].movedim(-1, dim),
        "eager": lambda: eager(x),
        "torch.compile": lambda: compiled(x),
        "tilegen last axis (bound)": lambda: layer_norm(last, w, b),
        "copy": lambda: x.clone(),
    }


# What `--plain` times of each case.
PLAIN = ("tilegen dim=", "eager", "torch.compile", "copy")


def main(out_dir: str, across: bool = False, plain: bool = False) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for op in ("softmax", "layer_norm"):
        for dtype in (torch.float16, torch.float32):
            for shape, dim in CASES:
                if across and dim != 0:
                    continue
                x = torch.randn(shape, device="cuda", dtype=dtype)
                n = shape[dim]
                w = torch.randn(n, device="cuda", dtype=dtype)
                b = torch.randn(n, device="cuda", dtype=dtype)
                want = torch.softmax(x.float(), dim) if op == "softmax" else \
                    torch.nn.functional.layer_norm(x.float().movedim(dim, -1), (n,), w.float(), b.float()).movedim(-1, dim)
                got = softmax(x, dim=dim) if op == "softmax" else layer_norm(x, w, b, dim=dim)[0]
                torch.testing.assert_close(got.float(), want, atol=2e-2, rtol=2e-2)
                cases = {name: (fn, None) for name, fn in cases_for(op, x, dim, w, b).items()
                         if not plain or name in PLAIN}
                if not plain and x.movedim(dim, -1).stride()[:-1] == (1,):  # rows one element apart
                    strided = cases["tilegen strided view"][0]
                    for tile_rows, block, warps in ACROSS_TILES if across else ROW_TILES:
                        config = {"BLOCK_N": block, "ROWS": tile_rows, "num_warps": warps, "UNROLL": 0}
                        cases[f"rows {tile_rows} block {block} w{warps}"] = (strided, config)
                ops = importlib.import_module(f"generated.{op}")._OP
                for name, (fn, config) in cases.items():
                    with ops.configs.forcing(config) if config else contextlib.nullcontext():
                        result = fn()
                    if config:  # the forced tile computes the same values
                        torch.testing.assert_close(result.float(), want, atol=2e-2, rtol=2e-2)
                times = {name: [] for name in cases}
                for _ in range(ROUNDS):
                    for name, (fn, config) in cases.items():
                        with ops.configs.forcing(config) if config else contextlib.nullcontext():
                            times[name].append(timed(fn))
                moved = 2 * x.numel() * x.element_size()
                copy_ms = statistics.median(times["copy"])
                for name, runs in times.items():
                    ms = statistics.median(runs)
                    gbs = moved / ms / 1e6
                    rows.append(dict(op=op, dtype=str(dtype).split(".")[1], shape="x".join(map(str, shape)), dim=dim,
                                     case=name, ms=round(ms, 4), gbs=round(gbs, 1),
                                     of_copy=round(copy_ms / ms, 3), runs=" ".join(f"{r:.4f}" for r in runs)))
                    print(f"{op:10s} {rows[-1]['dtype']:8s} {rows[-1]['shape']:>14s} dim={dim} {name:26s} "
                          f"{ms:8.4f} ms {gbs:7.1f} GB/s ({copy_ms / ms:.0%} of copy)", flush=True)
    with open(out / "reduced_axis.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    main(args[0] if args else "bench/out/reduced_axis", across="--across" in sys.argv, plain="--plain" in sys.argv)
