"""torch.vmap of generated ops: the batching rule registered with each op
(torch.library.register_vmap).

A Triton kernel cannot read the batched tensors torch.vmap wraps its inputs in, so an op's Python
function hands a vmapped call to the registered op (library.vmapped), and PyTorch calls the rule
here with the plain tensors and the axis each is batched along. Where every batched input takes
extra leading axes (an elementwise op's inputs broadcast together), the batch axis moved first is
one more of them: one call serves the whole batch. Otherwise (an input of a fixed rank, a matmul
operand, a reduction's row) the op runs once a sample and the results are stacked, as PyTorch's
own fallback would, without its performance warning on every call.
"""

import torch


def vmap_rule(op, name, tensors, leading=None):
    """The batching rule of the registered op `op` ("namespace::name" `name`), whose first
    `tensors` arguments are tensors;
    `leading[i]`: whether tensor input i takes extra leading axes (None: none does)."""
    leading = (False,) * tensors if leading is None else tuple(leading)

    def rule(info, in_dims, *args):
        dims = in_dims[:tensors]
        if all(d is None for d in dims):  # (batched at another level only)
            return _unbatched(op(*args))
        if all(takes or d is None for takes, d in zip(leading, dims)):
            return _at_once(op, tensors, dims, args)
        return _per_sample(op, name, info.batch_size, in_dims, args)

    return rule


def _at_once(op, tensors, dims, args):
    """The whole batch in one call: each batched input's batch axis moved first, then 1-sized axes
    after it up to the samples' highest rank, so that broadcasting lines the batch axis up with
    itself and each sample's axes with the other inputs' (as per sample)."""
    rank = max(a.dim() - (d is not None) for a, d in zip(args[:tensors], dims))
    lined_up = [a if d is None else _first(a, d, rank) for a, d in zip(args[:tensors], dims)]
    return _batched_at_0(op(*lined_up, *args[tensors:]))


def _first(tensor, dim, rank):
    moved = tensor.movedim(dim, 0)
    return moved[(slice(None),) + (None,) * (rank - (moved.dim() - 1))]


def _per_sample(op, name, size, in_dims, args):
    if size == 0:
        raise ValueError(f"torch.ops.{name.replace('::', '.')}: torch.vmap over an empty batch (size 0), which this op runs a sample "
                         "at a time and so cannot give a result shape; vmap over at least one sample")
    results = [op(*(a if d is None else a.select(d, i) for a, d in zip(args, in_dims))) for i in range(size)]
    if isinstance(results[0], torch.Tensor):
        return torch.stack(results), 0
    return tuple(torch.stack(parts) for parts in zip(*results)), (0,) * len(results[0])


def _batched_at_0(output):
    return output, (0 if isinstance(output, torch.Tensor) else (0,) * len(output))


def _unbatched(output):
    return output, (None if isinstance(output, torch.Tensor) else (None,) * len(output))
