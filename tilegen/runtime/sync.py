"""Synchronization between the programs of one launch, for generated kernels to call.

wait_for_every_program is a grid-wide barrier. It is only for launches whose programs are all
resident at once (at most one program a multiprocessor: ReductionOp launches so), and never
for Triton's interpreter, which runs programs one after another. PyTorch's Inductor launches its
cooperative reductions the same way (triton_helpers.x_grid_barrier).
"""

import triton
import triton.language as tl


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
