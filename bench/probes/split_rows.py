"""Long rows split over several programs that exchange per-row partial statistics, against the
forward kernels tilegen launches today, eager PyTorch, torch.compile and a copy of the same bytes
(all do_bench, L2 emptied).

Each row of N goes to SPLIT programs, each holding a chunk of N / SPLIT elements in registers: the
row is read once and written once, however long, and a few rows' worth of programs fill the GPU
(512 rows of 32768 are 512 programs today, four a multiprocessor). A reduction over the row is
each program's reduction over its chunk, stored to a workspace, then a wait on the row's counter
until all SPLIT have arrived, and the partials combined in a fixed order (the same result every
run). Programs take rows in the order they start (a ticket), so a program only ever waits for
programs that have already started: no deadlock however few are resident.

    PYTHONPATH=. python3 bench/probes/split_rows.py [SHAPES] [DTYPES]

softmax (two exchanges: max, then the sum of exponentials; or one exchange of (max, sum) pairs,
each sum rescaled to the row's max) and layer_norm (two exchanges: the mean, then the centered
squares). A line per variant: time, and 'of copy' (the copy's time over it).
"""
import sys

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

from tilegen.bench import same_bytes_copy
from tilegen.measure import load_bench_modules
from tilegen.runtime import callpath

SHAPES = "512x32768,4096x32768"
DTYPES = "float16,float32"


@triton.jit
def _take_row(ticket_ptr, SPLIT: tl.constexpr):
    """(row, part): the next chunk in start order. The last program resets the ticket."""
    ticket = tl.atomic_add(ticket_ptr, 1, sem="relaxed", scope="gpu")
    if ticket == tl.num_programs(0) - 1:
        tl.atomic_xchg(ticket_ptr, 0, sem="relaxed", scope="gpu")
    return ticket // SPLIT, ticket % SPLIT


@triton.jit
def _arrive_and_wait(count_ptr, row, round, SPLIT: tl.constexpr):
    """Wait until every program of the row has stored its partial of exchange `round` (1, 2...)."""
    tl.debug_barrier()
    seen = tl.atomic_add(count_ptr + row, 1, sem="acq_rel", scope="gpu") + 1
    while seen < round * SPLIT:
        seen = tl.atomic_add(count_ptr + row, 0, sem="acquire", scope="gpu")
    tl.debug_barrier()


@triton.jit
def _leave(count_ptr, row, rounds, SPLIT: tl.constexpr):
    """The last program of the row to leave sets its counter back to zero for the next launch."""
    if tl.atomic_add(count_ptr + row, 1, sem="acq_rel", scope="gpu") == (rounds + 1) * SPLIT - 1:
        tl.atomic_xchg(count_ptr + row, 0, sem="relaxed", scope="gpu")


@triton.jit
def softmax_split(x_ptr, y_ptr, part_ptr, count_ptr, ticket_ptr, N, stride_x, stride_y,
                  CHUNK: tl.constexpr, SPLIT: tl.constexpr, ONE_EXCHANGE: tl.constexpr):
    row, part = _take_row(ticket_ptr, SPLIT)
    cols = part * CHUNK + tl.arange(0, CHUNK)
    mask = cols < N
    x = tl.load(x_ptr + row.to(tl.int64) * stride_x + cols, mask=mask, other=float("-inf")).to(tl.float32)
    parts = tl.arange(0, SPLIT)
    m = tl.max(x, 0)
    if ONE_EXCHANGE:
        s = tl.sum(tl.exp(x - m), 0)
        tl.store(part_ptr + (row * SPLIT + part) * 2, m)
        tl.store(part_ptr + (row * SPLIT + part) * 2 + 1, s)
        _arrive_and_wait(count_ptr, row, 1, SPLIT)
        ms = tl.load(part_ptr + (row * SPLIT + parts) * 2, cache_modifier=".cg")
        ss = tl.load(part_ptr + (row * SPLIT + parts) * 2 + 1, cache_modifier=".cg")
        row_max = tl.max(ms, 0)
        total = tl.sum(ss * tl.exp(ms - row_max), 0)
        _leave(count_ptr, row, 1, SPLIT)
    else:
        tl.store(part_ptr + (row * SPLIT + part) * 2, m)
        _arrive_and_wait(count_ptr, row, 1, SPLIT)
        row_max = tl.max(tl.load(part_ptr + (row * SPLIT + parts) * 2, cache_modifier=".cg"), 0)
        s = tl.sum(tl.exp(x - row_max), 0)
        tl.store(part_ptr + (row * SPLIT + part) * 2 + 1, s)
        _arrive_and_wait(count_ptr, row, 2, SPLIT)
        total = tl.sum(tl.load(part_ptr + (row * SPLIT + parts) * 2 + 1, cache_modifier=".cg"), 0)
        _leave(count_ptr, row, 2, SPLIT)
    y = tl.exp(x - row_max) / total
    tl.store(y_ptr + row.to(tl.int64) * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def layer_norm_split(x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, part_ptr, count_ptr, ticket_ptr, N, eps,
                     stride_x, stride_y, CHUNK: tl.constexpr, SPLIT: tl.constexpr):
    row, part = _take_row(ticket_ptr, SPLIT)
    cols = part * CHUNK + tl.arange(0, CHUNK)
    mask = cols < N
    x = tl.load(x_ptr + row.to(tl.int64) * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    parts = tl.arange(0, SPLIT)
    tl.store(part_ptr + (row * SPLIT + part) * 2, tl.sum(x, 0))
    _arrive_and_wait(count_ptr, row, 1, SPLIT)
    mu = tl.sum(tl.load(part_ptr + (row * SPLIT + parts) * 2, cache_modifier=".cg"), 0) / N
    d = tl.where(mask, x - mu, 0.0)
    tl.store(part_ptr + (row * SPLIT + part) * 2 + 1, tl.sum(d * d, 0))
    _arrive_and_wait(count_ptr, row, 2, SPLIT)
    var = tl.sum(tl.load(part_ptr + (row * SPLIT + parts) * 2 + 1, cache_modifier=".cg"), 0) / N
    _leave(count_ptr, row, 2, SPLIT)
    r = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=mask).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask).to(tl.float32)
    tl.store(y_ptr + row.to(tl.int64) * stride_y + cols, (d * r * w + b).to(y_ptr.dtype.element_ty), mask=mask)
    if part == 0:
        tl.store(mean_ptr + row, mu)
        tl.store(rstd_ptr + row, r)


class Workspace:
    def __init__(self, rows, split, device):
        self.part = torch.empty(rows * split * 2, dtype=torch.float32, device=device)
        self.count = torch.zeros(rows, dtype=torch.int32, device=device)
        self.ticket = torch.zeros(1, dtype=torch.int32, device=device)


def softmax(x, split, warps, one_exchange, ws):
    rows, n = x.shape
    y = torch.empty_like(x)
    chunk = triton.next_power_of_2(triton.cdiv(n, split))
    softmax_split[(rows * split,)](x, y, ws.part, ws.count, ws.ticket, n, x.stride(0), y.stride(0),
                                   CHUNK=chunk, SPLIT=split, ONE_EXCHANGE=one_exchange, num_warps=warps)
    return y


def layer_norm(x, w, b, eps, split, warps, ws):
    rows, n = x.shape
    y = torch.empty_like(x)
    mean = torch.empty(rows, dtype=torch.float32, device=x.device)
    rstd = torch.empty(rows, dtype=torch.float32, device=x.device)
    chunk = triton.next_power_of_2(triton.cdiv(n, split))
    layer_norm_split[(rows * split,)](x, w, b, y, mean, rstd, ws.part, ws.count, ws.ticket, n, eps,
                                      x.stride(0), y.stride(0), CHUNK=chunk, SPLIT=split, num_warps=warps)
    return y, mean, rstd


def variants(op, n, itemsize):
    out = []
    for split in (2, 4, 8, 16):
        chunk = n // split
        if chunk < 1024 or chunk * 4 > 65536:  # a chunk of up to 16K float32 values in registers
            continue
        for warps in (4, 8, 16, 32):
            if chunk // (warps * 32) < 4 or chunk // (warps * 32) > 64:
                continue
            if op == "softmax":
                out += [dict(split=split, warps=warps, one_exchange=one) for one in (False, True)]
            else:
                out.append(dict(split=split, warps=warps))
    return out


def main(shapes=SHAPES, dtypes=DTYPES):
    callpath.load(wait=True)
    for op in ("softmax", "layer_norm"):
        module = load_bench_modules([op], "generated")[0]
        for shape_text in shapes.split(","):
            shape = tuple(int(s) for s in shape_text.split("x"))
            for dtype_name in dtypes.split(","):
                dtype = getattr(torch, dtype_name)
                inputs = module.make_inputs(shape, dtype)
                copy = same_bytes_copy(module.bytes_moved(shape, dtype), "cuda")
                copy_ms = do_bench(lambda: copy(inputs))
                eager_ms = do_bench(lambda: module.run_torch(inputs))
                compiled = torch.compile(module.run_torch)
                compiled(inputs)
                compiled_ms = do_bench(lambda: compiled(inputs))
                today_ms = do_bench(lambda: module.run_tilegen(inputs))
                print(f"{op} {shape_text} {dtype_name}: copy {copy_ms * 1e3:.1f} us, eager {eager_ms * 1e3:.1f} "
                      f"({copy_ms / eager_ms:.2f}), compile {compiled_ms * 1e3:.1f} ({copy_ms / compiled_ms:.2f}), "
                      f"tilegen today {today_ms * 1e3:.1f} ({copy_ms / today_ms:.2f})", flush=True)
                want = module.run_torch(inputs).float()
                for v in variants(op, shape[-1], dtype.itemsize):
                    ws = Workspace(shape[0], v["split"], "cuda")
                    if op == "softmax":
                        run = lambda: softmax(inputs[0], ws=ws, **v)
                    else:
                        run = lambda: layer_norm(*inputs, 1e-5, ws=ws, **v)[0]
                    try:
                        got = run()
                        ms = do_bench(run)
                        again = run()
                    except Exception as error:
                        print(f"    {v}: {type(error).__name__}: {str(error)[:80]}", flush=True)
                        continue
                    error = (got.float() - want).abs().max().item()
                    print(f"    {v}: {ms * 1e3:.1f} us, of copy {copy_ms / ms:.2f}, {today_ms / ms:.2f}x today's, "
                          f"{compiled_ms / ms:.2f}x compile, max error {error:.2g}, same twice "
                          f"{bool(torch.equal(got, again))}, counters left at zero "
                          f"{bool((ws.count == 0).all().item() and ws.ticket.item() == 0)}", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
