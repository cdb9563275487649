"""torch.func's transforms and forward mode on generated ops: the torch.autograd.Function they
run (autograd.call applies it), and the route a call torch.compile traces under them takes.

Under grad, vjp, jacrev, jvp, jacfwd, hessian (vmap over or under them) and with forward_ad's dual
tensors, an op runs as TransformedAutograd: its forward runs the kernels on the tensors functorch
unwraps at each level, its backward the formula's differentiable math in PyTorch's ops (a kernel
cannot read a transform's tensors; functorch differentiates with create_graph=True, so that math
serves any transform above it), its jvp the transpose of that math (Gradients.tangents), its vmap
rule the op's batching rule. vmap alone never reaches here: the registered op's batching rule
serves it (library.vmapped).
"""

import functools

import torch
from torch.autograd import forward_ad

from . import autograd
from .batching import vmap_rule
from .library import batching_of, differentiating, formula_of, implementation_of


class TransformedAutograd(torch.autograd.Function):
    """An op's implementation and autograd formula under torch.func's transforms, which need a
    Function with its own setup_context, a vmap rule, and for forward mode a jvp. Called with
    the registered op first (autograd.call)."""

    @staticmethod
    def forward(op, *args):
        return _untraced_forward(formula_of(op), implementation_of(op), args)

    @staticmethod
    def setup_context(ctx, inputs, output):
        gradients = ctx.gradients = formula_of(inputs[0])
        gradients.setup_context(ctx, inputs[1:], output, transformed=True)

    @staticmethod
    def jvp(ctx, _, *tangents):
        gradients = ctx.gradients
        saved = gradients._arranged(list(ctx.saved_tensors), {})
        out = gradients.tangents(saved, tangents[:gradients.tensors], ctx.scalars, ctx.shapes, ctx.results)
        return out if len(out) > 1 else out[0]

    @staticmethod
    def backward(ctx, *grads):
        gradients = ctx.gradients
        needed = ctx.needs_input_grad[1:1 + gradients.tensors]
        if gradients.differentiable is None and gradients._reads_results(needed):
            raise RuntimeError(no_transformed_backward(gradients.name))
        return (None, *gradients.compute(ctx, grads, needed))

    @staticmethod
    def vmap(info, in_dims, op, *args):
        # The op's batching rule, calling the op through autograd.call again: at the next
        # transform down (grad's wrapped tensors: this Function again) or on plain tensors.
        return vmap_rule(functools.partial(autograd.call, op), *batching_of(op))(info, in_dims[1:], *args)


@torch.compiler.disable
def _untraced_forward(gradients, implementation, args):
    """autograd's op forward where torch.compile traces no frame: a call eager_call runs under
    torch.compile has kernel launches that are no frames to compile."""
    return autograd.op_forward(gradients, implementation, args)


def traced_under_torch_func():
    """Whether a call torch.compile traces is in forward mode (jvp, jacfwd, hessian, a dual level)
    or under a torch.func transform other than vmap. A registered op gets no tangent there (see
    library._outside_forward_mode), nor a gradient (PyTorch runs no custom op's autograd formula
    under grad): such a call runs eagerly (eager_call). The transforms are read outside the trace
    (it cannot read functorch's interpreter stack), once per compiled frame."""
    return forward_ad._current_level >= 0 or (torch._C._are_functorch_transforms_active() and _differentiating())


@torch._dynamo.assume_constant_result
def _differentiating():
    return differentiating()


@torch.compiler.disable
def eager_call(op, *args):
    """autograd.call(op, *args) outside torch.compile's trace: the op's Function, on the tensors
    torch.func wraps, as in eager mode."""
    return autograd.call(op, *args)


def no_forward_mode(op):
    """Why forward mode (torch.func.jvp, jacfwd, hessian, dual tensors) raises where the op has no
    `differentiable` math: its tangents are the transpose of that math."""
    return (f"{op}: forward mode (torch.func.jvp, jacfwd, hessian, torch.autograd.forward_ad) is not derived for "
            "this op (its tangents transpose its backward's math in PyTorch's ops, and this op's reruns its "
            "forward's kernel for the sums its decisions read); use reverse mode (torch.autograd)")


def no_transformed_backward(op):
    """Why a backward under torch.func.grad or vjp raises where the op has no `differentiable`
    math: there the backward runs in PyTorch's ops (the kernels cannot read functorch's tensors),
    as a second derivative's does."""
    return (f"{op}: torch.func's grad, vjp and jacrev are not derived for this op (under them its backward runs in "
            "PyTorch's ops, and this op's reruns its forward's kernel for the sums its decisions read); compute "
            "its gradients with torch.autograd (backward, torch.autograd.grad)")
