"""The index arithmetic of the strided elementwise kernels (transposed, sliced and broadcast
layouts): a block's index along each of the four collapsed dims it addresses
(runtime.layout.collapse and pad_after_first make them; ElementwiseOp decides LINES). Generated
modules import it by its own name (tilegen.naming.KERNEL_HELPERS)."""

import triton
import triton.language as tl


@triton.jit
def strided_indices(pid, numel, size_1, size_2, size_3, BLOCK: tl.constexpr, LINES: tl.constexpr):
    """Program `pid`'s block: its elements' indices (i_0, i_1, i_2, i_3) along the dims of
    sizes (numel / (size_1 * size_2 * size_3), size_1, size_2, size_3), and which of them lie
    within the tensors.

    LINES (the last dim at least a block long): a program takes a block of one line of the last
    dim, so i_0, i_1 and i_2 are scalars (one division each a program, none an element) and the
    block is contiguous in every tensor whose last dim is, which lets its loads go wide. A row
    [N] broadcast over [M, N] is read so at the speed of same-shape inputs. Otherwise a program
    takes `BLOCK` consecutive elements of the whole, each element's indices by a division and a
    remainder a dim (Triton folds those by sizes of 1, what padding adds)."""
    if LINES:
        blocks_per_line = (size_3 + BLOCK - 1) // BLOCK
        line = pid // blocks_per_line
        i_3 = (pid - line * blocks_per_line) * BLOCK + tl.arange(0, BLOCK)
        in_bounds = i_3 < size_3
    else:
        offsets = pid * BLOCK + tl.arange(0, BLOCK)
        in_bounds = offsets < numel
        i_3 = offsets % size_3
        line = offsets // size_3
    i_2 = line % size_2
    rest = line // size_2
    i_1 = rest % size_1
    i_0 = rest // size_1
    return i_0, i_1, i_2, i_3, in_bounds
