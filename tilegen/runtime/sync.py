"""Synchronization between the programs of one launch, for generated kernels to call.

wait_for_every_program is a grid-wide barrier. It is only for launches whose programs are all
resident at once (at most one program a multiprocessor: ReductionOp launches so, where
grid_wait_allowed says it may), and never for Triton's interpreter, which runs programs one
after another. PyTorch's Inductor launches its cooperative reductions the same way
(triton_helpers.x_grid_barrier).
"""

import os

import triton
import triton.language as tl

from .device import INTERPRET


def grid_wait_allowed(device) -> bool:
    """Whether a launch on `device` may wait for all its programs (at most one a multiprocessor):
    on a GPU, unless the process shares it through MPS with a cap on its multiprocessors (then
    fewer than the device reports may run at once, and a wait could never end) or
    TILEGEN_GRID_WAIT=0 asks not to. Not in the interpreter, which runs programs one at a time."""
    if device.type != "cuda" or INTERPRET or os.environ.get("TILEGEN_GRID_WAIT", "1") in ("", "0"):
        return False
    share = os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")
    try:
        return share is None or float(share) >= 100
    except ValueError:
        return False


@triton.jit
def wait_for_every_program(counters_ptr):
    """Return once every program of the launch has called this. `counters_ptr` points at two
    int32 counters at zero (split-K's workspace: arrivals, then departures); the last program to
    leave sets both back to zero, as every user of that workspace leaves its counters.

    Stores a program made before the call are visible to every program's loads after it where
    those loads read from L2 (cache_modifier=".cg"): the arrival releases them, the wait acquires."""
    programs = tl.num_programs(0)
    # Every thread's stores are issued before the arrival.
    tl.debug_barrier()
    seen = tl.atomic_add(counters_ptr, 1, sem="acq_rel", scope="gpu") + 1
    while seen < programs:
        seen = tl.atomic_add(counters_ptr, 0, sem="acquire", scope="gpu")
    tl.debug_barrier()
    # Every program has passed the wait once the last one departs: only then may the arrivals
    # go back to zero.
    if tl.atomic_add(counters_ptr + 1, 1, sem="acq_rel", scope="gpu") == programs - 1:
        tl.atomic_xchg(counters_ptr, 0, sem="relaxed", scope="gpu")
        tl.atomic_xchg(counters_ptr + 1, 0, sem="relaxed", scope="gpu")


@triton.jit
def finish_share(count_ptr, chunks, SHARED: tl.constexpr):
    """(first, step): the chunks of a launch's finish (of `chunks`, each a strip of columns) this
    program takes once every program's own work is stored, as `range(first, chunks, step)`.

    SHARED (every program resident: grid_wait_allowed, one program a multiprocessor at most): all
    wait for each other, then each takes every num_programs-th chunk from its index. Otherwise the
    last program to arrive takes every chunk, the others none, and it leaves the arrival counter
    at zero for the next launch. Every thread's stores are issued before the arrival; the arrival
    releases them to the program that finishes, whose acquire makes them visible to its loads
    where those read from L2 (cache_modifier=".cg")."""
    if SHARED:
        wait_for_every_program(count_ptr)
        first = tl.program_id(0)
        step = tl.num_programs(0)
    else:
        tl.debug_barrier()
        last = tl.atomic_add(count_ptr, 1, sem="acq_rel", scope="gpu") == tl.num_programs(0) - 1
        if last:
            tl.store(count_ptr, 0)
        first = tl.where(last, 0, chunks)
        step = 1
    return first, step
