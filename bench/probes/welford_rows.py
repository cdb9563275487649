"""LayerNorm's statistics over a long row in one pass (Welford: each lane keeps a count, a running
mean and its sum of squared deviations, the lanes merged at the end by Chan's formula) against
the two passes the generated kernel takes (the mean, then the squares centered on it), each
followed by the pass that writes the output. Beside the forward tilegen launches today, eager
PyTorch, torch.compile and a copy of the same bytes (all do_bench, L2 emptied).

    PYTHONPATH=. python3 bench/probes/welford_rows.py [SHAPES] [DTYPES]

A program a row, loops of BLOCK elements. `uniform`: every trip but a ragged last one divides by
one count for all lanes (a reciprocal per trip, not a division per element).
"""
import sys

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

from tilegen.bench import same_bytes_copy
from tilegen.measure import load_bench_modules
from tilegen.runtime import callpath

SHAPES = "512x32768,4096x32768,4096x16384"
DTYPES = "float16,float32"


@triton.jit
def _merge(mean_a, m2_a, n_a, mean_b, m2_b, n_b):
    n = n_a + n_b
    delta = mean_b - mean_a
    share = tl.where(n == 0.0, 0.0, n_b / tl.where(n == 0.0, 1.0, n))
    return mean_a + delta * share, m2_a + m2_b + delta * delta * n_a * share, n


@triton.jit
def _output_pass(x_row, w_ptr, b_ptr, y_row, mu, r, N, BLOCK: tl.constexpr):
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask).to(tl.float32)
        b = tl.load(b_ptr + cols, mask=mask).to(tl.float32)
        tl.store(y_row + cols, ((x - mu) * r * w + b).to(y_row.dtype.element_ty), mask=mask)


@triton.jit
def ln_welford(x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, N, eps, stride_x, stride_y,
               BLOCK: tl.constexpr, UNIFORM: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    mean = tl.zeros([BLOCK], tl.float32)
    m2 = tl.zeros([BLOCK], tl.float32)
    count = tl.zeros([BLOCK], tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        delta = x - mean
        if UNIFORM:
            count += 1.0
            mean += delta * (1.0 / (start // BLOCK + 1.0))
        else:
            count += mask.to(tl.float32)
            mean += tl.where(mask, delta / tl.maximum(count, 1.0), 0.0)
        m2 += tl.where(mask, delta * (x - mean), 0.0)
    mu, m2_row, _ = tl.reduce((mean, m2, count), 0, _merge)
    r = 1.0 / tl.sqrt(m2_row / N + eps)
    _output_pass(x_row, w_ptr, b_ptr, y_ptr + row * stride_y, mu, r, N, BLOCK)
    tl.store(mean_ptr + row, mu)
    tl.store(rstd_ptr + row, r)


@triton.jit
def ln_two_pass(x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, N, eps, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    total = tl.zeros([BLOCK], tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        total += tl.load(x_row + cols, mask=cols < N, other=0.0).to(tl.float32)
    mu = tl.sum(total, 0) / N
    squares = tl.zeros([BLOCK], tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < N
        d = tl.where(mask, tl.load(x_row + cols, mask=mask).to(tl.float32) - mu, 0.0)
        squares += d * d
    r = 1.0 / tl.sqrt(tl.sum(squares, 0) / N + eps)
    _output_pass(x_row, w_ptr, b_ptr, y_ptr + row * stride_y, mu, r, N, BLOCK)
    tl.store(mean_ptr + row, mu)
    tl.store(rstd_ptr + row, r)


def layer_norm(kernel, x, w, b, eps, block, warps, **flags):
    rows, n = x.shape
    y = torch.empty_like(x)
    mean = torch.empty(rows, dtype=torch.float32, device=x.device)
    rstd = torch.empty(rows, dtype=torch.float32, device=x.device)
    kernel[(rows,)](x, w, b, y, mean, rstd, n, eps, x.stride(0), y.stride(0), BLOCK=block, num_warps=warps, **flags)
    return y, mean, rstd


def variants():
    for block in (2048, 4096, 8192):
        for warps in (8, 16, 32):
            if block // (32 * warps) >= 2:
                yield "two passes", ln_two_pass, block, warps, {}
                yield "welford", ln_welford, block, warps, {"UNIFORM": False}
                yield "welford uniform", ln_welford, block, warps, {"UNIFORM": True}


def main(shapes=SHAPES, dtypes=DTYPES):
    callpath.load(wait=True)
    module = load_bench_modules(["layer_norm"], "generated")[0]
    for shape_text in shapes.split(","):
        shape = tuple(int(s) for s in shape_text.split("x"))
        for dtype_name in dtypes.split(","):
            dtype = getattr(torch, dtype_name)
            inputs = module.make_inputs(shape, dtype)
            # A mean far from zero: the statistics' cancellation shows in the error.
            inputs[0] += 3.0
            copy = same_bytes_copy(module.bytes_moved(shape, dtype), "cuda")
            copy_ms = do_bench(lambda: copy(inputs))  # noqa: B023
            eager_ms = do_bench(lambda: module.run_torch(inputs))  # noqa: B023
            compiled = torch.compile(module.run_torch)
            compiled(inputs)
            compiled_ms = do_bench(lambda: compiled(inputs))  # noqa: B023
            today_ms = do_bench(lambda: module.run_tilegen(inputs))  # noqa: B023
            print(f"layer_norm {shape_text} {dtype_name}: copy {copy_ms * 1e3:.1f} us, eager {eager_ms * 1e3:.1f} "
                  f"({copy_ms / eager_ms:.2f}), compile {compiled_ms * 1e3:.1f} ({copy_ms / compiled_ms:.2f}), "
                  f"tilegen today {today_ms * 1e3:.1f} ({copy_ms / today_ms:.2f})", flush=True)
            x64 = inputs[0].double()
            mu64 = x64.mean(-1)
            rstd64 = (x64.var(-1, unbiased=False) + 1e-5).rsqrt()
            for label, kernel, block, warps, flags in variants():
                def run():
                    return layer_norm(kernel, *inputs, 1e-5, block, warps, **flags)  # noqa: B023
                got = run()
                ms = do_bench(lambda: run()[0])
                print(f"    {label} BLOCK {block} w{warps}: {ms * 1e3:.1f} us, of copy {copy_ms / ms:.2f}, "
                      f"{today_ms / ms:.2f}x today's, {compiled_ms / ms:.2f}x compile; rstd error "
                      f"{((got[2].double() - rstd64).abs() / rstd64).max().item():.1e}, mean error "
                      f"{(got[1].double() - mu64).abs().max().item():.1e}", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
