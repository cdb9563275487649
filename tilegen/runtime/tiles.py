"""Tile-level helpers every matmul kernel calls: an operand's tile through its tensor descriptor,
an output tile stored through one, and the sum of split-K's partial tiles. Generated modules
import them by their own names (torch.compile copies the functions a kernel calls by the names
they are defined with; tilegen.naming.KERNEL_HELPERS)."""

import triton
import triton.language as tl


@triton.jit
def operand_tile(desc, batch, row, col, ROWS: tl.constexpr, COLS: tl.constexpr, TRANSPOSED: tl.constexpr,
                 BATCHED: tl.constexpr):
    """The [ROWS, COLS] tile at (row, col) of an operand, through its tensor descriptor: of
    matrix `batch` where the descriptor is 3-D (BATCHED, one matrix a box); of the operand's
    row-major transpose where TRANSPOSED, the tile then transposed back."""
    if TRANSPOSED:
        if BATCHED:
            tile = desc.load([batch, col, row]).reshape(COLS, ROWS).T
        else:
            tile = desc.load([col, row]).T
    else:
        if BATCHED:
            tile = desc.load([batch, row, col]).reshape(ROWS, COLS)
        else:
            tile = desc.load([row, col])
    return tile


@triton.jit
def store_tile(desc, tile, batch, row, col, BATCHED: tl.constexpr):
    """Store `tile` at (row, col) of an output through its tensor descriptor (of matrix `batch`
    where the descriptor is 3-D), cast to the output's dtype. The store is asynchronous (the
    tensor memory accelerator drains it from shared memory while the program moves on) and drops
    what lies past the output's edges."""
    if BATCHED:
        desc.store([batch, row, col], tile.to(desc.dtype).reshape(1, tile.shape[0], tile.shape[1]))
    else:
        desc.store([row, col], tile.to(desc.dtype))


@triton.jit
def sum_split_k(acc, partial_ptr, count_ptr, tile, in_bounds, ROWS: tl.constexpr, COLS: tl.constexpr,
                SPLIT_K: tl.constexpr):
    """Split-K: each program of a tile stores its partial [ROWS, COLS] sum; the last to arrive
    adds them all up in split order (the same result whichever program finishes last) and
    returns True."""
    split = tl.program_id(1)
    cells = tl.arange(0, ROWS)[:, None] * COLS + tl.arange(0, COLS)[None, :]
    tile_ptr = partial_ptr + tile.to(tl.int64) * (SPLIT_K * ROWS * COLS)
    tl.store(tile_ptr + split * (ROWS * COLS) + cells, acc, mask=in_bounds)
    # Every thread's store is issued before the arrival; the arrival releases them to the
    # program that arrives last, whose acquire makes them visible to its loads.
    tl.debug_barrier()
    arrived = tl.atomic_add(count_ptr + tile, 1, sem="acq_rel", scope="gpu")
    finishing = arrived == SPLIT_K - 1
    if finishing:
        acc = tl.zeros((ROWS, COLS), dtype=acc.dtype)
        for other in tl.static_range(SPLIT_K):
            # .cg reads from L2, where the other programs' stores landed, never a stale L1 line.
            acc += tl.load(tile_ptr + other * (ROWS * COLS) + cells, mask=in_bounds, other=0.0,
                           cache_modifier=".cg")
        # Leave the counter at zero for the next launch on this stream.
        tl.store(count_ptr + tile, 0)
    return acc, finishing
