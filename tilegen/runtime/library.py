"""Generated ops as PyTorch ops: registration with torch.library, and the rules a wrapper follows
so that eager calls stay fast while tracing (torch.compile, torch.export, make_fx, fake tensors)
sees the registered op.

- On a GPU an op is a `torch.library.triton_op`: its implementation launches its kernels through
  `torch.library.wrap_triton` while it is traced, so TorchInductor sees into the kernels.
- Under Triton's interpreter (TRITON_INTERPRET=1) kernels cannot be traced, so an op is an opaque
  `torch.library.custom_op` whose fake implementation is the same code with every launch left
  out (it checks the arguments and allocates the outputs, on fake tensors).

Until autograd is derived for an op, a call with an input that requires grad (grad mode on)
raises; so does a backward through the registered op called directly.
"""

import os

import torch

from .device import INTERPRET

# Whether registered ops are triton_ops (traceable into their kernels) or opaque custom ops
# (always under the interpreter; TILEGEN_OPAQUE_OPS=1 asks for them on a GPU too).
TRACEABLE = not INTERPRET and os.environ.get("TILEGEN_OPAQUE_OPS", "0") in ("", "0")

# Tensor types that hold real data: any other (fake, functional, a subclass) is being traced.
_PLAIN = (torch.Tensor, torch.nn.Parameter)


def traced(values):
    """Whether any tensor among `values` is a tracing stand-in (fake or functional) rather than
    real data: kernels are then recorded (wrap_triton) or left out (a fake implementation)."""
    return any(type(v) not in _PLAIN for v in values if isinstance(v, torch.Tensor))


def tracing(values):
    """Whether a call with `values` is being traced: under torch.compile's frame tracing, under a
    torch dispatch mode (fake tensors, make_fx, export), or with tensors that are stand-ins."""
    return torch.compiler.is_compiling() or torch._C._len_torch_dispatch_stack() > 0 or traced(values)


def refuse_grad(op, **tensors):
    """Raise where an input requires grad with grad mode on: the op has no backward yet, and a
    result detached from its inputs would be silently wrong."""
    if torch.is_grad_enabled():
        for name, value in tensors.items():
            if isinstance(value, torch.Tensor) and value.requires_grad:
                raise RuntimeError(f"{op}: argument '{name}' requires grad, but {op} has no backward yet; "
                                   "call it under torch.no_grad() or on a detached tensor")


def copy_out(out, result):
    """`result` written into `out=` (a tensor, or a tuple for several outputs): how a traced call
    with out= is expressed, so that tracing sees a functional op and a copy."""
    if isinstance(out, torch.Tensor):
        return out.copy_(result)
    for target, value in zip(out, result):
        target.copy_(value)
    return tuple(out)


def register(qualname, traceable=None):
    """Decorator: register the annotated function as the op `qualname` ("namespace::name") and
    return its OpOverload (`torch.ops.namespace.name.default`)."""
    traceable = TRACEABLE if traceable is None else traceable

    def decorate(impl):
        if traceable:
            op = torch.library.triton_op(qualname, impl, mutates_args=())
        else:
            op = torch.library.custom_op(qualname, impl, mutates_args=())
            op.register_fake(impl)
        op.register_autograd(_no_backward(qualname), setup_context=_keep_nothing)
        namespace, name = qualname.split("::")
        return getattr(getattr(torch.ops, namespace), name).default

    return decorate


def _keep_nothing(ctx, inputs, output):
    pass


def _no_backward(qualname):
    def backward(ctx, *grads):
        raise RuntimeError(f"{qualname}: no backward is registered for this op yet")
    return backward
