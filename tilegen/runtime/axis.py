"""A reduction over another axis than the last: `softmax(x, dim=1)`.

The kernels reduce the last axis of their rows. A call with `dim=` runs the op itself on views
with that axis moved last and moves it back in the results, so the kernels, the registered op,
its autograd and its checks are the ones every call takes, and autograd, torch.compile and export
see ordinary view ops around it (each view's gradient is the view moved back).
"""

import torch

from .checks import check_apart
from .configs import ACROSS_ROWS
from .layout import collapse
from .library import tracing
from .sizes import hint


def rows_rank(roles, inputs):
    """The rank of the rows' shape a call's `inputs` ({name: value}, in order) make: element
    tensors ([..., N]) count their own rank, per-row ones ([...]) one more (the axis they lack)."""
    rank = 0
    for value, role in zip(inputs.values(), roles):
        if isinstance(value, torch.Tensor) and role in ("element", "row"):
            rank = max(rank, value.dim() + (role == "row"))
    return rank


def rows_one_apart(value):
    """Whether the rows of `value` (its leading axes, merged where they can be) are one element
    apart: a single row axis of stride 1."""
    sizes, (strides,) = collapse(value.shape[:-1], [value.stride()[:-1]])
    return len(sizes) == 1 and strides[0] == 1


def laid_out_for_rows(value):
    """A copy of `value` ([..., N], its N strided and its rows not one element apart: the channels
    of an image batch) that the kernels read at full speed. Many rows: laid out with N outermost,
    so that the rows are one element apart (read in place by ReductionOp's tile across the rows)
    and the copy moves the source's contiguous runs (the rows' innermost axis) whole, where a copy
    with N innermost transposes every run (layer_norm over the channels of 32x512x4096
    half-precision elements on the H200: 0.32 ms this way, 0.51 that way:
    bench/results/h200/reductions/reduced_axis/channels/). Fewer rows
    than that tile holds: in row-major order, each row's elements together."""
    if hint(value[..., 0].numel()) < ACROSS_ROWS:  # (a layout choice: no guard on traced sizes)
        return value.contiguous()
    return value.movedim(-1, 0).contiguous().movedim(0, -1)


def reduce_along(op, roles, wrapper, dim, inputs, scalars, out):
    """`wrapper(*inputs, **scalars, out=out)` (the op's public function, which reduces the last
    axis) reducing axis `dim` instead. `roles` gives each input, then each output, its lie along
    the rows (runtime.ops.ReductionOp): element tensors have `dim` moved last, per-row ones
    ([...], the rows' shape without the reduced axis) and per-column ones ([N]) are passed as
    they are. Element results come back with the axis moved back in place: views of rows laid out
    with it last, so not contiguous where PyTorch's are (`.reshape`, not `.view`, flattens them).
    A copy into PyTorch's layout took the calls 2-3x as long on the H200 (the transposing copy
    alone costs more than the op; bench/results/h200/dynamic_shapes/): the kernels writing the
    caller's layout would give it at no cost."""
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError(f"{op}: argument 'dim' must be an int, got {type(dim).__name__}")
    rank = rows_rank(roles, inputs)
    if rank and not -rank <= dim < rank:
        raise IndexError(f"{op}: argument 'dim' is {dim}, out of range for rows of rank {rank} "
                         f"(from {-rank} to {rank - 1})")
    axis = dim - rank if dim >= 0 else dim  # counted from the end: inputs of lower rank broadcast
    if rank == 0 or axis == -1:
        return wrapper(*inputs.values(), **scalars, out=out)
    moved = []
    for (name, value), role in zip(inputs.items(), roles):
        if role == "element" and isinstance(value, torch.Tensor):
            if value.dim() < -axis:
                raise ValueError(f"{op}: argument '{name}' has shape {tuple(value.shape)}: no axis at dim {dim} "
                                 f"to reduce (its rows have rank {rank}; an input along the rows has the "
                                 "reduced axis)")
            value = value.movedim(axis, -1)
            if value.stride(-1) != 1 and value.shape[-1] > 1 and not rows_one_apart(value):
                value = laid_out_for_rows(value)
        moved.append(value)
    output_roles = roles[len(inputs):]
    single = len(output_roles) == 1
    moved_out = out
    if out is not None:
        given = (out,) if single else out
        if not isinstance(out, torch.Tensor if single else (tuple, list)):
            return wrapper(*moved, **scalars, out=out)  # (the op's own check names what out= must be)
        # (The op checks its out= against the views it reads, which may be copies: the
        # arguments themselves are checked here.)
        if not tracing((*given, *inputs.values())):  # (stand-ins have no memory to compare)
            for index, t in enumerate(given):
                if isinstance(t, torch.Tensor):
                    check_apart(op, "out" if single else f"out[{index}]", t, list(inputs.items()))
        moved_out = tuple(t.movedim(axis, -1) if role == "element" and isinstance(t, torch.Tensor) and t.dim() >= -axis
                          else t for t, role in zip(given, output_roles))
        moved_out = moved_out[0] if single else moved_out
    result = wrapper(*moved, **scalars, out=moved_out)
    if out is not None:
        return out if single else tuple(out)
    if single:
        return result.movedim(-1, axis) if output_roles[0] == "element" else result
    return tuple(r.movedim(-1, axis) if role == "element" else r for r, role in zip(result, output_roles))
