"""Batch axes of a batched matmul ([..., M, K] @ [..., K, N]): how leading axes broadcast (as
torch.matmul's do), and how the kernel reaches every matrix of a tensor through one batch stride.

The kernel indexes each tensor as [batch, rows, cols] with one stride per axis. A tensor's batch
axes, broadcast to the call's batch shape, flatten into one axis where their strides allow it (a
contiguous batch, or one broadcast along every axis, stride 0); otherwise the tensor is read from
a copy (as torch.matmul would materialize it) or written through one.
"""

import math


from .checks import broadcast_leading
from .sizes import known


def batch_shape(op, named, ranks):
    """The broadcast batch shape of the tensors `named` ([(name, tensor)]), each with its last
    `ranks[i]` dims its matrix ones. Raises ValueError naming the argument whose batch axes do
    not broadcast, its batch shape and that of the arguments before it."""
    leads = [(name, tuple(value.shape[:max(value.dim() - rank, 0)])) for (name, value), rank in zip(named, ranks)]
    return broadcast_leading(op, [(name, lead) for name, lead in leads if lead], "batch axes", "the batch axes of",
                             "batch axes broadcast as in torch.matmul")


def batch_stride(tensor, batch, rank):
    """The one stride that steps `tensor` (its last `rank` dims a matrix) from matrix to matrix of
    the flattened batch `batch` (its batch axes broadcast to it: stride 0 along missing or size-1
    axes), or None where its batch axes do not flatten into one stride."""
    lead = tensor.dim() - rank
    strides = [0] * (len(batch) - lead) + [0 if known(size == 1) else stride for size, stride in
                                           zip(tensor.shape[:lead], tensor.stride()[:lead])]
    step, span = None, 1
    for size, stride in reversed(list(zip(batch, strides))):
        if known(size == 1):
            continue
        if step is None:
            step = stride
        elif not known(stride == step * span):  # (traced sizes: as runtime.sizes.known decides)
            return None
        span *= size
    return 0 if step is None else step


def matrices(tensor, batch, rank):
    """`tensor` as [matrices, *matrix dims] over the flattened batch `batch` (a view where its
    batch axes flatten into one stride, else a contiguous copy), and whether it is a copy."""
    count = math.prod(batch)
    stride = batch_stride(tensor, batch, rank)
    matrix = tuple(tensor.shape[tensor.dim() - rank:])
    if stride is None:
        copy = tensor.expand(*batch, *matrix).reshape(count, *matrix).contiguous()
        return copy, True
    return tensor.as_strided((count, *matrix), (stride, *tensor.stride()[tensor.dim() - rank:])), False


def folded(views, rows, along_rows):
    """The [matrices, ...] `views` as one matrix of matrices * rows rows, where that reads the
    same elements (a batched matmul then runs as a plain one, on the tables' own shapes): a
    tensor along the rows (A, C, [M, N] and [M] epilogue inputs) must hold the next matrix's rows
    right after this one's last; any other (B, [N] epilogue inputs) must be the same for every
    matrix (batch stride 0). None where some tensor does not fold."""
    count = views[0].shape[0]
    out = []
    for view, along in zip(views, along_rows):
        if not along:
            if not known(view.stride(0) == 0) and not known(count == 1):
                return None
            out.append(view[0])
            continue
        if known(rows == 1):
            step = view.stride(0)
        elif known(view.stride(0) == rows * view.stride(1)) or known(count == 1):
            step = view.stride(1)
        else:
            return None
        out.append(view.as_strided((count * rows, *view.shape[2:]), (step, *view.stride()[2:])))
    return out
