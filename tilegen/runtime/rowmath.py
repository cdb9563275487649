"""Triton helpers that every reduction op's kernels call (imported by name, `_<name>`: a kernel that
torch.compile traces takes the jit functions it calls from its module's globals).

tl.max and tl.min drop NaN (they combine with max-num semantics); PyTorch's amax/amin, and so
the oracle, keep it: these reduce with NaN-propagating combines.
"""

import triton
import triton.language as tl


@triton.jit
def _nan_max(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _nan_min(a, b):
    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def max_along_rows(x):
    """The maximum of each row of a [ROWS, BLOCK] tile, as [ROWS, 1]; NaN where a row holds one."""
    return tl.reduce(x, 1, _nan_max, keep_dims=True)


@triton.jit
def min_along_rows(x):
    """The minimum of each row of a [ROWS, BLOCK] tile, as [ROWS, 1]; NaN where a row holds one."""
    return tl.reduce(x, 1, _nan_min, keep_dims=True)
