"""LayerNorm's forward on long rows, stand-alone variants of the generated kernel's two shapes:

- a row held whole, one program a row block, 1-4 programs a multiprocessor with the next block's
  loads issued a trip ahead (PER_SM, as generated), its weight and bias (COLUMNS) either held in
  float32 for the program's life (0: as generated), held in their own dtype and converted at use
  (1), or loaded at use, each row block (2): the generated kernel spills on rows of 32768;
- a row looped in blocks: three passes (the mean, the centred squares' mean, the outputs: as
  generated) against two, the mean and the centred squares summed in one pass by each lane's
  running Welford sums merged at the row's end (Chan et al.).

Beside eager F.layer_norm and a copy of the same bytes (do_bench, L2 emptied), each checked
against eager.

    PYTHONPATH=. python3 bench/probes/layer_norm_rows.py [SHAPES] [DTYPES]
"""
import sys

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

SHAPES = "4096x32768,512x32768,4096x16384,131072x1024"
DTYPES = "float16,bfloat16,float32"


@triton.jit
def _whole(x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, eps, n_rows, n, BLOCK: tl.constexpr,
           ROWS: tl.constexpr, COLUMNS: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)[None, :]
    cmask = cols < n
    if COLUMNS == 0:
        w = tl.load(w_ptr + cols, mask=cmask).to(tl.float32)
        b = tl.load(b_ptr + cols, mask=cmask).to(tl.float32)
    elif COLUMNS == 1:
        w_own = tl.load(w_ptr + cols, mask=cmask)
        b_own = tl.load(b_ptr + cols, mask=cmask)
    ahead = pid * ROWS + tl.arange(0, ROWS)[:, None]
    p_x = tl.load(x_ptr + ahead * n + cols, mask=(ahead < n_rows) & cmask)
    for row_block in range(pid, tl.cdiv(n_rows, ROWS), tl.num_programs(0)):
        rows = row_block * ROWS + tl.arange(0, ROWS)[:, None]
        row_mask = rows < n_rows
        mask = row_mask & cmask
        x = p_x.to(tl.float32)
        ahead = rows + tl.num_programs(0) * ROWS
        p_x = tl.load(x_ptr + ahead * n + cols, mask=(ahead < n_rows) & cmask)
        mu = tl.sum(tl.where(mask, x, 0.0), axis=1, keep_dims=True) / n
        d = x - mu
        r = tl.rsqrt(tl.sum(tl.where(mask, d * d, 0.0), axis=1, keep_dims=True) / n + eps)
        if COLUMNS == 1:
            w = w_own.to(tl.float32)
            b = b_own.to(tl.float32)
        elif COLUMNS == 2:
            w = tl.load(w_ptr + cols, mask=cmask).to(tl.float32)
            b = tl.load(b_ptr + cols, mask=cmask).to(tl.float32)
        y = d * r * w + b
        tl.store(y_ptr + rows * n + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
        tl.store(mean_ptr + rows, mu, mask=row_mask)
        tl.store(rstd_ptr + rows, r, mask=row_mask)


@triton.jit
def _looped(x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, eps, n_rows, n, BLOCK: tl.constexpr,
            UNROLL: tl.constexpr, WELFORD: tl.constexpr):
    row = tl.program_id(0)
    x_row = x_ptr + row * n
    if WELFORD:
        # Each lane's running mean and sum of squared deviations over the blocks it saw (Welford),
        # merged over the lanes at the end (Chan et al.); a lane past the row's end counts nothing.
        m = tl.zeros([BLOCK], tl.float32)
        s = tl.zeros([BLOCK], tl.float32)
        c = tl.zeros([BLOCK], tl.float32)
        for group in range(0, n, BLOCK * UNROLL):
            for block in tl.static_range(UNROLL):
                cols = group + block * BLOCK + tl.arange(0, BLOCK)
                mask = cols < n
                x = tl.load(x_row + cols, mask=mask).to(tl.float32)
                c_new = c + mask.to(tl.float32)
                delta = tl.where(mask, x - m, 0.0)
                m += delta / tl.maximum(c_new, 1.0)
                s += delta * tl.where(mask, x - m, 0.0)
                c = c_new
        mu = tl.sum(m * c, axis=0) / n
        dev = m - mu
        var = (tl.sum(s, axis=0) + tl.sum(c * dev * dev, axis=0)) / n
    else:
        acc = tl.zeros([BLOCK], tl.float32)
        for group in range(0, n, BLOCK * UNROLL):
            for block in tl.static_range(UNROLL):
                cols = group + block * BLOCK + tl.arange(0, BLOCK)
                acc += tl.load(x_row + cols, mask=cols < n, other=0.0).to(tl.float32)
        mu = tl.sum(acc, axis=0) / n
        acc = tl.zeros([BLOCK], tl.float32)
        for group in range(0, n, BLOCK * UNROLL):
            for block in tl.static_range(UNROLL):
                cols = group + block * BLOCK + tl.arange(0, BLOCK)
                mask = cols < n
                d = tl.where(mask, tl.load(x_row + cols, mask=mask).to(tl.float32) - mu, 0.0)
                acc += d * d
        var = tl.sum(acc, axis=0) / n
    r = tl.rsqrt(var + eps)
    for group in range(0, n, BLOCK * UNROLL):
        for block in tl.static_range(UNROLL):
            cols = group + block * BLOCK + tl.arange(0, BLOCK)
            mask = cols < n
            x = tl.load(x_row + cols, mask=mask).to(tl.float32)
            w = tl.load(w_ptr + cols, mask=mask).to(tl.float32)
            b = tl.load(b_ptr + cols, mask=mask).to(tl.float32)
            tl.store(y_ptr + row * n + cols, ((x - mu) * r * w + b).to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(mean_ptr + row, mu)
    tl.store(rstd_ptr + row, r)


def launcher(x, w, b, config):
    rows, n = x.shape
    y = torch.empty_like(x)
    mean = torch.empty(rows, device=x.device, dtype=torch.float32)
    rstd = torch.empty_like(mean)
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    kind, params = config
    if kind == "whole":
        block_rows, per_sm, warps, columns = params
        grid = (min(triton.cdiv(rows, block_rows), per_sm * sms),)
        kernel = _whole[grid]
        args = dict(BLOCK=triton.next_power_of_2(n), ROWS=block_rows, COLUMNS=columns, num_warps=warps)
    else:
        block, unroll, warps, welford = params
        kernel = _looped[(rows,)]
        args = dict(BLOCK=block, UNROLL=unroll, WELFORD=welford, num_warps=warps)
    return lambda: (kernel(x, w, b, y, mean, rstd, 1e-5, rows, n, **args), (y, mean, rstd))[1]


def configs(n, itemsize):
    out = []
    whole = triton.next_power_of_2(n)
    if whole * itemsize <= 65536:
        block_rows = max(1, 4096 // whole)
        for warps in (8, 16) if whole >= 16384 else (4, 8):
            for per_sm in (1, 2):
                if per_sm * warps <= 32:
                    for columns in (0, 1, 2):
                        out.append(("whole", (block_rows, per_sm, warps, columns)))
    if n >= 8192:
        for block, unroll, warps in ((8192, 0, 16), (4096, 2, 8), (2048, 4, 8), (1024, 4, 4)):
            for welford in (0, 1):
                out.append(("looped", (block, max(1, unroll), warps, welford)))
    return out


def main(shapes=SHAPES, dtypes=DTYPES):
    torch.manual_seed(0)
    for shape_text in shapes.split(","):
        rows, n = (int(s) for s in shape_text.split("x"))
        for dtype_name in dtypes.split(","):
            dtype = getattr(torch, dtype_name)
            # An offset mean: the sums' cancellation shows in the error where it is there.
            x = torch.randn(rows, n, device="cuda", dtype=dtype) * 2 + 3
            w = torch.randn(n, device="cuda", dtype=dtype)
            b = torch.randn(n, device="cuda", dtype=dtype)
            nbytes = 2 * x.numel() * x.element_size()
            source = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")
            target = torch.empty_like(source)
            copy_ms = do_bench(lambda: target.copy_(source))
            eager = lambda: torch.nn.functional.layer_norm(x, (n,), w, b, 1e-5)
            eager_ms = do_bench(eager)
            want = torch.nn.functional.layer_norm(x.double(), (n,), w.double(), b.double(), 1e-5)
            eager_error = (eager().double() - want).abs().max().item()
            print(f"{shape_text} {dtype_name}: copy {copy_ms * 1e3:.1f} us, eager {eager_ms * 1e3:.1f} "
                  f"(of copy {copy_ms / eager_ms:.2f}, max error {eager_error:.2g})", flush=True)
            for config in configs(n, x.element_size()):
                try:
                    call = launcher(x, w, b, config)
                    y = call()[0]
                    ms = do_bench(call)
                except Exception as error:  # out of resources: the config does not launch
                    print(f"    {config}: {type(error).__name__}: {str(error)[:80]}", flush=True)
                    continue
                error = (y.double() - want).abs().max().item()
                print(f"    {config}: {ms * 1e3:.1f} us, of copy {copy_ms / ms:.2f}, {eager_ms / ms:.2f}x eager, "
                      f"max error {error:.2g}", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
