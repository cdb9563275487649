"""Helpers that the measuring commands (bench, tune, coldstart) share: shapes and dtypes as
command lines spell them, host timing, agreement with PyTorch, loading generated benchmarks."""

from __future__ import annotations

import importlib
import re
import sys
import time
from pathlib import Path


class BenchError(Exception):
    """Bad input to `tilegen bench` (exit 2)."""


def dtype_name(dtype) -> str:
    """torch.float16 -> 'float16', as reports and command lines spell dtypes."""
    return str(dtype).replace("torch.", "")


def check_dtype_names(modules, names) -> None:
    """Refuse a --dtype that none of `modules` benchmarks, naming those they do."""
    known = sorted({dtype_name(d) for m in modules for d in _benchmarked(m)})
    unknown = [name for name in names or () if name not in known]
    if unknown:
        raise BenchError(f"--dtype {unknown[0]!r} is not a dtype these ops benchmark (one of: {', '.join(known)})")


def module_dtypes(module, names) -> list:
    """The dtypes of `module`'s benchmark that --dtype `names` picks (every default one where
    none is given; one it times on request only where named)."""
    if not names:
        return list(module.DTYPES)
    return [d for d in _benchmarked(module) if dtype_name(d) in names]


def _benchmarked(module) -> list:
    """Every dtype `module` can time: its defaults, then those it times only on request."""
    return [*module.DTYPES, *getattr(module, "ASKED_DTYPES", ())]


_SIZE = re.compile(r"^(\d+)(?:\^(\d+))?$")


def parse_size(text: str) -> int:
    """'4096' or '2^20' -> int."""
    match = _SIZE.match(text.strip())
    if not match:
        raise BenchError(f"--shapes: {text!r} is not a size (write 4096 or 2^20)")
    base, power = int(match.group(1)), match.group(2)
    return base ** int(power) if power else base


def parse_shapes(text: str | None, kind: str, batched: bool = False) -> list[tuple[int, ...]] | None:
    """'1024x1024x1024,16x4096x4096' -> [(1024, 1024, 1024), (16, 4096, 4096)]; matmul shapes are MxNxK,
    a batched matmul's BxMxNxK."""
    if not text:
        return None
    shapes = []
    for item in text.split(","):
        dims = tuple(parse_size(part) for part in item.strip().lower().split("x"))
        if kind == "matmul" and len(dims) != 3 + batched:
            form = "BxMxNxK (batched matmul ops need four sizes)" if batched else "MxNxK (matmul ops need three sizes)"
            raise BenchError(f"--shapes: {item!r} is not {form}")
        if any(d <= 0 for d in dims):
            raise BenchError(f"--shapes: {item!r} has an empty dimension")
        shapes.append(dims)
    return shapes


def shape_label(shape) -> str:
    if len(shape) == 1 and shape[0] >= 4096 and shape[0] & (shape[0] - 1) == 0:
        return f"2^{shape[0].bit_length() - 1}"
    return "x".join(str(d) for d in shape)


def issue_ms(fn, calls: int, *args) -> float:
    """Milliseconds of host work per call of `fn(*args)`: `calls` calls issued back to back and
    timed without waiting on the GPU, whose queue then drains outside the timing."""
    import torch

    start = time.perf_counter()
    for _ in range(calls):
        fn(*args)
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / calls * 1e3


def settle_call_path(training: bool = False) -> None:
    """Wait for the compiled call path (built in the background on first use) before any timing,
    and for training steps the C++ autograd node too (until it is built, training calls record
    torch.autograd.Function's node, at about twice the host time: the first op's steps would be
    timed on it), so that host times are those of the path calls settle on; say so where there is
    none."""
    from .runtime import autograd, callpath

    if callpath.load(wait=True) is None:
        print(f"note: {callpath.UNAVAILABLE}", file=sys.stderr, flush=True)
    if training and autograd.native_module(wait=True) is None:
        print("note: no C++ autograd node here (turned off, or a warning said why): training steps record "
              "torch.autograd.Function's node", file=sys.stderr, flush=True)


def as_tuple(value):
    """An op's outputs as a tuple (a single output is one tensor)."""
    return value if isinstance(value, tuple) else (value,)


def check_agreement(got, want, label, tolerance=None):
    """Raise (naming `label`) unless tilegen's outputs `got` match PyTorch's `want`, to `tolerance`
    (default, by each output's dtype: 2e-2 for half precision, 1e-3 otherwise; an fp8 matmul's
    output is what it stores, not its operands). An output tilegen gives in float32 where the eager
    equivalent computes it in the inputs' half precision (a norm's rstd) is held to the eager
    one's precision: bfloat16's rounding alone moves it by 0.5%."""
    import torch

    half = (torch.float16, torch.bfloat16)
    for g, w in zip(as_tuple(got), as_tuple(want)):
        tol = tolerance if tolerance is not None else 2e-2 if g.dtype in half or w.dtype in half else 1e-3
        torch.testing.assert_close(g.float(), w.float(), atol=tol, rtol=tol, equal_nan=True,
                                   msg=lambda m: f"{label}: tilegen and PyTorch disagree: {m}")


def load_bench_modules(ops: list[str], package: str):
    root = Path(package)
    folder = root / "bench"
    if not folder.is_dir():
        raise BenchError(f"{folder}: no generated benchmarks; run `tilegen build` first")
    known = sorted(p.stem[len("bench_"):] for p in folder.glob("bench_*.py"))
    for op in ops:
        if op not in known:
            raise BenchError(f"unknown op {op!r} (generated ops: {', '.join(known) or 'none'})")
    sys.path.insert(0, str(root.resolve().parent))
    return [importlib.import_module(f"{root.name}.bench.bench_{op}") for op in (ops or known)]
