"""torch.vmap of generated ops: the batching rule registered with each op
(torch.library.register_vmap).

A Triton kernel cannot read the batched tensors torch.vmap wraps its inputs in, so an op's Python
function hands a vmapped call to the registered op (library.vmapped), and PyTorch calls the rule
here with the plain tensors and the axis each is batched along. Where every batched input takes
extra leading axes (an elementwise op's broadcasting inputs, a reduction's rows, a batched
matmul's operands: shapes the spec declares as `[..., ...]`), the batch axis moved first is one
more of them: one call serves the whole batch. Otherwise (a batched input of a fixed rank: a bias
or a weight, a 2-D matmul's operand) the op runs once a sample and the results are stacked, as
PyTorch's own fallback would, without its performance warning on every call.
"""

import torch
from torch._subclasses.fake_tensor import FakeTensorMode


def vmap_rule(op, tensors, batchable=None, own_axes=None):
    """The batching rule of the registered op `op`, whose first `tensors` arguments are tensors.
    Per tensor input: `batchable`, whether it takes extra leading axes (None: none does);
    `own_axes`, how many of its last axes are its own, the axes before them lining up with the
    other inputs' from the right (0 for an elementwise op's inputs, which broadcast whole; 1 for a
    reduction's row [..., N]; 0 for its per-row input [...])."""
    batchable = (False,) * tensors if batchable is None else tuple(batchable)
    own_axes = (0,) * tensors if own_axes is None else tuple(own_axes)

    def rule(info, in_dims, *args):
        # (PyTorch calls it only where some input is batched at its level.)
        dims = in_dims[:tensors]
        if all(takes or d is None for takes, d in zip(batchable, dims)):
            return _at_once(op, own_axes, dims, args)
        return _per_sample(op, info.batch_size, in_dims, args)

    return rule


def _at_once(op, own_axes, dims, args):
    """The whole batch in one call: each batched input's batch axis moved first, then 1-sized axes
    after it, so that every input has as many lined-up axes before its own as the one with the
    most: broadcasting pairs the batch axis with itself and each sample's axes as per sample."""
    tensors = len(own_axes)
    lined = [a.dim() - (d is not None) - own for a, d, own in zip(args[:tensors], dims, own_axes)]
    most = max(lined)
    ready = [a if d is None else _first(a, d, most - n) for a, d, n in zip(args[:tensors], dims, lined)]
    return _batched_at_0(op(*ready, *args[tensors:]))


def _first(tensor, dim, pad):
    return tensor.movedim(dim, 0)[(slice(None),) + (None,) * pad]


def _per_sample(op, size, in_dims, args):
    """The op once a sample, the results stacked along a new first axis (an empty batch: empty
    results of the shapes a sample's would have, found on fake tensors)."""
    if size == 0:
        return _empty_batch(op, in_dims, args)
    results = [op(*(a if d is None else a.select(d, i) for a, d in zip(args, in_dims))) for i in range(size)]
    if isinstance(results[0], torch.Tensor):
        return torch.stack(results), 0
    return tuple(torch.stack(parts) for parts in zip(*results)), (0,) * len(results[0])


def _empty_batch(op, in_dims, args):
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        samples = [a if d is None else mode.from_tensor(_sample_like(a, d)) for a, d in zip(args, in_dims)]
        results = op(*samples)
    empty = [torch.empty((0, *r.shape), dtype=r.dtype, device=r.device)
             for r in ((results,) if isinstance(results, torch.Tensor) else results)]
    return (empty[0], 0) if isinstance(results, torch.Tensor) else (tuple(empty), (0,) * len(empty))


def _sample_like(tensor, dim):
    """A sample of `tensor` batched along `dim` (of size 0): its shape less that axis, its dtype."""
    shape = tensor.shape[:dim] + tensor.shape[dim + 1:]
    return torch.empty(shape, dtype=tensor.dtype, device=tensor.device)


def _batched_at_0(output):
    return output, (0 if isinstance(output, torch.Tensor) else (0,) * len(output))
