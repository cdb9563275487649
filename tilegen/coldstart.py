"""Time to first result: a fresh process's first call of an op, compile included.

Each measurement runs in its own Python process, so nothing is cached in memory; Triton's
on-disk cache, and the generated package's (where the native launcher is built), are a fresh
folder unless the mode says warm. Modes:

- table: the op's own config choice (the tuned table for this GPU, else the heuristic): one
  config is compiled, nothing is timed at runtime;
- table, warm cache: the same, with the compiled kernel already in Triton's disk cache (the
  usual case after the first run on a machine);
- autotune: the op switched to runtime autotuning, which compiles and times every candidate.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from .measure import shape_label

MODES = ("table", "table, warm cache", "autotune")

_CHILD = r"""
import importlib, json, sys, time
start = time.perf_counter()
import torch
root, op, mode = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, root)
bench = importlib.import_module(f"{sys.argv[4]}.bench.bench_{op}")
import tilegen.runtime as rt
configs = rt.op_of(f"{sys.argv[4]}.{op}").configs
shape, dtype = bench.SHAPES[0], bench.DTYPES[0]
inputs = bench.make_inputs(shape, dtype)
torch.cuda.synchronize()
imported = time.perf_counter() - start
with configs.using_mode("autotune" if mode == "autotune" else configs.mode), configs.recording() as chosen:
    start = time.perf_counter()
    bench.run_tilegen(inputs)
    torch.cuda.synchronize()
    first = time.perf_counter() - start
    start = time.perf_counter()
    bench.run_tilegen(inputs)
    torch.cuda.synchronize()
    second = time.perf_counter() - start
print(json.dumps(dict(shape=list(shape), dtype=str(dtype).replace("torch.", ""), import_s=imported,
                      first_call_s=first, second_call_s=second,
                      config=chosen[-1][1])))
"""


def _child(package: Path, op: str, mode: str, cache_dir: str) -> dict:
    # The compiled call path builds in the background of a first call and outlives the child: off
    # here, so that no build competes with the rows after for the CPU (it delays no first call).
    env = dict(os.environ, TRITON_CACHE_DIR=cache_dir, TILEGEN_CACHE_DIR=cache_dir, TILEGEN_CALL_PATH="0")
    env.pop("TRITON_INTERPRET", None)
    command = [sys.executable, "-c", _CHILD, str(package.resolve().parent), op, mode.split(",")[0], package.name]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return dict(op=op, mode=mode, error=tail)
    return dict(op=op, mode=mode, **json.loads(done.stdout.strip().splitlines()[-1]))


def measure(package: Path, ops: list[str], progress=lambda line: None) -> list[dict]:
    """One row per op and mode; each is a fresh process."""
    rows = []
    for op in ops:
        with tempfile.TemporaryDirectory(prefix="tilegen-cold-") as fresh:
            for mode in MODES:
                cache = fresh if mode != "autotune" else tempfile.mkdtemp(prefix="tilegen-cold-", dir=fresh)
                row = _child(package, op, mode, cache)
                rows.append(row)
                progress(format_row(row))
    return rows


def format_row(row: dict) -> str:
    if "error" in row:
        return f"{row['op']:<24} {row['mode']:<18} failed: {row['error']}"
    shape = shape_label(row["shape"])
    return (f"{row['op']:<24} {row['mode']:<18} first call {row['first_call_s'] * 1e3:8.0f} ms   "
            f"second {row['second_call_s'] * 1e3:6.2f} ms   ({shape} {row['dtype']}, import {row['import_s']:.1f} s)")
