"""Memory layouts: collapsing strided shapes, offsets that need 64 bits, alignment facts the
kernels are specialized on."""

import torch

from .device import INTERPRET
from .sizes import guarding, known, symbolic

try:  # host-side tensor descriptors (tensor-memory-accelerator loads) arrived in Triton 3.4
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # pragma: no cover - older Triton: no TMA configs run
    TensorDescriptor = None

INT32_LIMIT = 2**31 - 1
# Dims a strided elementwise kernel indexes; layouts with more independent dims run on copies.
MAX_STRIDED_RANK = 4


def max_offset(t):
    """The largest element offset a kernel computes for `t` (its reach from the base pointer)."""
    return sum((size - 1) * abs(stride) for size, stride in zip(t.shape, t.stride()))


def needs_int64(*tensors, extra=0):
    """True when 32-bit offset arithmetic could overflow for any tensor (plus one tile of slack).
    Traced sizes: unless 32 bits hold, as runtime.sizes.known decides."""
    for t in tensors:
        numel = t.numel()
        # Fast path: a contiguous tensor reaches exactly numel - 1 elements.
        if known(numel + extra <= INT32_LIMIT) and t.is_contiguous():
            continue
        if not (known(max_offset(t) + extra <= INT32_LIMIT) and known(numel + extra <= INT32_LIMIT)):
            return True
    return False


def offsets_along_fit(stride, length):
    """Whether `length` elements `stride` apart stay within 32-bit offsets: a reduction kernel
    computes offsets along a row in 32 bits (its row offsets go to 64 bits where needs_int64)."""
    return known(abs(stride) * (length - 1) <= INT32_LIMIT)


def collapse(shape, strides_per_tensor):
    """Merge dims that are contiguous in every tensor; drop size-1 dims.

    Returns (sizes, [strides per tensor]), fewest dims first-to-last, so that a strided
    kernel does as little index arithmetic as the layouts allow. Traced sizes merge (and drop)
    where runtime.sizes.known says they do.
    """
    dims = [(size, [strides[d] for strides in strides_per_tensor]) for d, size in enumerate(shape)
            if not known(size == 1)]
    merged = []
    for size, strides in dims:
        if merged:
            prev_size, prev_strides = merged[-1]
            if all(known(p == s * size) for p, s in zip(prev_strides, strides)):
                merged[-1] = (prev_size * size, strides)
                continue
        merged.append((size, strides))
    if not merged:
        merged = [(1, [0] * len(strides_per_tensor))]
    sizes = [size for size, _ in merged]
    strides = [[s[i] for _, s in merged] for i in range(len(strides_per_tensor))]
    return sizes, strides


def pad_after_first(values, rank, fill):
    """`values` of a collapsed layout padded to `rank` dims by size-1 (or stride-0) dims after
    the first: the strided kernel finds index 0 by a division, the others by a division and a
    remainder each, and Triton specializes arguments equal to 1, so each padded dim costs
    nothing, where padded in front the first dim would cost a remainder and a division more."""
    values = list(values)
    return values[:1] + [fill] * (rank - len(values)) + values[1:]


def stride_factor(stride):
    """The power of two (up to 16) a kernel may multiply back into `stride` // it: Triton's own
    specialization knows multiples of 16 only. Strides past 32 bits stay whole (factor 1), so
    the product never needs more bits than the stride did. A traced stride: 16 where
    runtime.sizes.known says it is a multiple of 16 within 32 bits, else 1."""
    if symbolic(stride):
        return 16 if known(stride % 16 == 0) and known(stride <= INT32_LIMIT) else 1
    if stride > INT32_LIMIT:
        return 1
    return 16 if stride % 16 == 0 else stride & -stride


def size_factor(size):
    """As stride_factor, for a matmul's M, N or K: a multiple of 16 comes whole, since Triton's
    own specialization marks it and the kernel then compiles as it would without factors (with
    factor 16, 4000^3 ran 7% slower, bench/probes/tma_edges.txt); 1000 comes as 125 * 8. A
    traced size: under torch.compile, factor 16 where it is a multiple of 16 (with a guard), since
    Inductor's launch cannot mark a traced size as one; else whole."""
    if symbolic(size):
        return 16 if guarding() and known(size % 16 == 0) and known(size <= INT32_LIMIT) else 1
    if size % 16 == 0 or size > INT32_LIMIT:
        return 1
    return size & -size


def k_rows_load_wide(a, b, assume_aligned=False):
    """Whether either matmul operand ([M, K] and [K, N]) holds K contiguously in 16-byte aligned
    rows: only then do loads along K go wide, and only then does a mask on K narrow them.
    `assume_aligned`: take base addresses as aligned (traced tensors have none to read)."""
    def wide(t, k_dim):
        row = t.stride(1 - k_dim) * t.element_size()
        aligned = assume_aligned or t.data_ptr() % 16 == 0
        return known(t.stride(k_dim) == 1) and known(row % 16 == 0) and aligned
    return wide(a, 1) or wide(b, 0)


def tma_orientation(t):
    """How tensor-memory-accelerator loads read the 2-D operand `t`: "rows" (its last dim
    contiguous), "columns" (its first dim contiguous: a transposed view such as a backward's A^T,
    described as its row-major transpose, each tile transposed back in the kernel), or None (they
    cannot: its base address or the other dim's stride is not 16-byte aligned)."""
    size = t.element_size()
    if t.data_ptr() % 16:
        return None
    if t.stride(1) == 1 and (t.stride(0) * size) % 16 == 0:
        return "rows"
    if t.stride(0) == 1 and (t.stride(1) * size) % 16 == 0:
        return "columns"
    return None


def tma_loads_fit(a, b):
    """Whether tensor-memory-accelerator loads can read the 2-D operands `a` ([M, K]) and `b`
    ([K, N]): a GPU that has them (compute capability 9 or later; the interpreter runs them too)
    and each operand row- or column-major with 16-byte aligned lines and base address
    (tma_orientation). 8-bit operands only where both are K-major (A row-major, B column-major,
    torch._scaled_mm's layout): the tensor cores' 8-bit path reads both tiles K-major from shared
    memory, which a descriptor of such a B gives as it lies (its row-major transpose's tiles,
    transposed back in the kernel), and of a row-major B would not."""
    if TensorDescriptor is None:
        return False
    orientations = (tma_orientation(a), tma_orientation(b))
    if None in orientations:
        return False
    if 1 in (a.element_size(), b.element_size()) and orientations != ("rows", "columns"):
        return False
    return INTERPRET or torch.cuda.get_device_capability(a.device)[0] >= 9


def described(tensor, block):
    """A tensor descriptor of `tensor` with `block` (reads past the edges return zeros)."""
    return TensorDescriptor.from_tensor(tensor, list(block))


def batch_descriptors_fit(*matrices):
    """Whether 3-D descriptors ([matrices, rows, cols], one matrix a box) can read these batched
    operand views: each steps to its next matrix by a nonzero, 16-byte aligned stride (a matrix
    broadcast over the batch, stride 0, has no such descriptor: its launch loads through pointers)."""
    return all(t.stride(0) != 0 and (t.stride(0) * t.element_size()) % 16 == 0 for t in matrices)


def tma_stores_fit(outputs):
    """Whether a matmul kernel can store each of `outputs` (its [rows, cols] matrix, or a batch of
    them, [matrices, rows, cols]) through a tensor descriptor: each row-major with 16-byte aligned
    rows and base address, a batch stepping by a nonzero, 16-byte aligned stride."""
    return TensorDescriptor is not None and all(
        tma_orientation(out if out.dim() == 2 else out[0]) == "rows" and (out.dim() == 2 or batch_descriptors_fit(out))
        for out in outputs)


def described_operand(view, block, transposed):
    """The descriptor a matmul kernel loads an operand through: `view` is its [rows, cols] matrix
    or a batch of them ([matrices, rows, cols], read a matrix a box); `block` its tile. A
    column-major operand (`transposed`) is described as its row-major transpose, with the
    tile's transpose for a box: the kernel transposes each tile back."""
    if transposed:
        view, block = view.transpose(-2, -1), block[::-1]
    return described(view, (1, *block) if view.dim() == 3 else block)
