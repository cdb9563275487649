"""Generated ops as PyTorch ops: registration with torch.library, and the rules a wrapper follows
so that eager calls stay fast while tracing (torch.compile, torch.export, make_fx, fake tensors)
sees the registered op.

- On a GPU an op is a `torch.library.triton_op`: its implementation launches its kernels through
  `torch.library.wrap_triton` while it is traced, so TorchInductor sees into the kernels.
- Under Triton's interpreter (TRITON_INTERPRET=1) kernels cannot be traced, so an op is an opaque
  `torch.library.custom_op` whose fake implementation is the same code with every launch left
  out (it checks the arguments and allocates the outputs, on fake tensors).

An op's autograd formula (an autograd.Gradients) is registered with it; autograd.py has the
formula and the eager training path. A backward op registered without one raises on a double
backward.
"""

import functools
import inspect
import os

import torch
from torch._functorch.pyfunctorch import retrieve_all_functorch_interpreters
from torch.autograd import forward_ad
from torch.utils.flop_counter import register_flop_formula

from .batching import vmap_rule
from .device import INTERPRET

# Whether registered ops are triton_ops (traceable into their kernels) or opaque custom ops
# (always under the interpreter; TILEGEN_OPAQUE_OPS=1 asks for them on a GPU too).
TRACEABLE = not INTERPRET and os.environ.get("TILEGEN_OPAQUE_OPS", "0") in ("", "0")

# Tensor types that hold real data: any other (fake, functional, a subclass) is being traced.
_PLAIN = (torch.Tensor, torch.nn.Parameter)


def traced(values):
    """Whether any tensor among `values` is a tracing stand-in (fake or functional, or a
    torch.fx.symbolic_trace Proxy) rather than real data: kernels are then recorded (wrap_triton)
    or left out (a fake implementation), and a Proxy records the registered op's call."""
    return any(type(v) not in _PLAIN if isinstance(v, torch.Tensor) else isinstance(v, torch.fx.Proxy) for v in values)


def tracing(values):
    """Whether a call with `values` is being traced: under torch.compile's frame tracing, under a
    torch dispatch mode (fake tensors, make_fx, export), under torch.jit.trace (which records the
    torch calls it sees: a launch it cannot see would leave the graph returning the uninitialized
    output; it records the registered op), or with tensors that are stand-ins."""
    return (torch.compiler.is_compiling() or torch._C._len_torch_dispatch_stack() > 0
            or torch._C._get_tracing_state() is not None or traced(values))


def wants_grad(values):
    """Whether autograd must record a call with `values`: grad mode is on and a tensor requires
    grad, or a tensor is wrapped by a torch.func transform other than vmap alone (vmapped serves
    that) or carries a forward-mode tangent; autograd.call's Function serves those."""
    if torch.is_grad_enabled() and any(isinstance(v, torch.Tensor) and v.requires_grad for v in values):
        return True
    return _differentiated(values)


def _differentiated(values):
    """Whether a tensor among `values` is a torch.func transform's (vmapped serves vmap alone
    before this is asked) or carries a forward-mode tangent. Never while torch.compile traces:
    the trace cannot ask (autograd.call decides a traced call's route)."""
    if torch.compiler.is_compiling():
        return False
    return any(isinstance(v, torch.Tensor) and _wrapped(v) for v in values) or dual(values)


def dual(values):
    """Whether a tensor among `values` carries a forward-mode tangent (torch.autograd.forward_ad):
    the op's Function, whose jvp gives the results theirs, must serve the call."""
    return forward_ad._current_level >= 0 and any(
        isinstance(v, torch.Tensor) and forward_ad.unpack_dual(v).tangent is not None for v in values)


def refuse_out_with_grad(op, out, /, **tensors):
    """out= writes into a tensor autograd does not track: refused where an input requires grad
    (as PyTorch's own out= variants do), or carries a tangent (a dual tensor, a torch.func
    transform's: vmap alone refuses out= in vmapped), rather than returning a result detached
    from its inputs."""
    if out is None:
        return
    for name, value in tensors.items():
        if not isinstance(value, torch.Tensor):
            continue
        if torch.is_grad_enabled() and value.requires_grad:
            raise RuntimeError(f"{op}: out= does not support automatic differentiation, but argument '{name}' "
                               "requires grad; call it without out=, or under torch.no_grad()")
        if _differentiated([value]):
            raise RuntimeError(f"{op}: out= does not support automatic differentiation, but argument '{name}' "
                               "is differentiated (torch.func's grad, vjp, jvp or their kin, or a forward-mode "
                               "dual tensor); call it without out=")


def refuse_grad(op, why, /, **tensors):
    """An op with no backward (`why` says why) refuses inputs that require grad while grad mode
    is on, at the call, rather than failing later in backward or leaving a gradient out; and
    inputs differentiated in forward mode or by torch.func (a dual tensor's tangent, a transform's
    wrapper: vmap alone is served before this check), rather than a result with no tangent."""
    for name, value in tensors.items():
        if not isinstance(value, torch.Tensor):
            continue
        if torch.is_grad_enabled() and value.requires_grad:
            raise RuntimeError(f"{op}: argument '{name}' requires grad, but {why}; call it under "
                               "torch.no_grad() or with detached inputs")
        if _differentiated([value]):
            raise RuntimeError(f"{op}: argument '{name}' is differentiated (torch.func's grad, vjp, jvp or "
                               f"their kin, or a forward-mode dual tensor), but {why}; call it with "
                               "plain tensors")


def vmapped(op, out, scalars, /, **tensors):
    """Whether a call is made under torch.vmap alone (no other torch.func transform): the op's
    Python function then calls the registered op, which its batching rule serves (batching.py),
    since a Triton kernel cannot read the batched tensors vmap wraps. Under torch.func's other
    transforms (grad, vjp, jacrev, jvp, jacfwd, hessian; vmap with them) it is False: wants_grad
    sends the call to the op's autograd.Function (autograd.call), which runs the kernels on the
    tensors functorch unwraps. Refused, with one error naming the op and the argument:
    functionalize, and out= under vmap. `scalars`: ("name", value, kind) triples, checked here for
    a vmapped call (PyTorch would read a tensor given for one before any check of the op's: a
    batched one fails in its dispatcher, naming no argument)."""
    if torch.compiler.is_compiling():  # traced tensors are never torch.func's
        return False
    batched = False
    for name, value in tensors.items():
        if isinstance(value, torch.Tensor) and _wrapped(value):
            transforms = _active_transforms()
            if _FUNCTIONALIZE in transforms:
                raise TypeError(f"{op}: argument '{name}' is transformed by torch.func's functionalize, which "
                                "tilegen's ops do not support (a kernel cannot read its tensors); the ops are "
                                "functional already, and torch.compile and torch.export trace them as registered ops")
            if transforms != {_VMAP}:
                return False
            batched = True
    if not batched:
        return False
    if out is not None:
        raise TypeError(f"{op}: out= under torch.vmap, which the op cannot write through; call it without out= "
                        "(vmap returns the batched result)")
    from .checks import check_scalar  # (checks imports this module)
    for name, value, kind in scalars:
        if isinstance(value, torch.Tensor):
            raise TypeError(f"{op}: argument '{name}' must be a Python {kind}, got Tensor (a scalar is one value "
                            "for the whole call; under torch.vmap, pass a value that varies over the batch as a "
                            "tensor input of the spec)")
        check_scalar(op, name, value, kind)
    return True


_wrapped = torch._C._functorch.is_functorch_wrapped_tensor


def batched_gradients(grads):
    """Whether an incoming gradient is batched (torch.autograd.grad(is_grads_batched=True) runs the
    backward under vmap; a kernel cannot read such a tensor), by either of PyTorch's vmaps."""
    return any(g is not None and (_wrapped(g) or _legacy_batched(g)) for g in grads)


_legacy_batched = torch._C._functorch.is_legacy_batchedtensor


def differentiating():
    """Whether a torch.func transform other than vmap is active now (grad, vjp, jvp and their kin)."""
    return bool(_active_transforms() - {_VMAP})


def _active_transforms():
    """The kinds of torch.func transform active now (a set of TransformType)."""
    return {interpreter.key() for interpreter in retrieve_all_functorch_interpreters()}


_VMAP = torch._C._functorch.TransformType.Vmap
_FUNCTIONALIZE = torch._C._functorch.TransformType.Functionalize


# Each registered op's implementation, autograd formula and batching, by its OpOverload
# (autograd.call runs them directly in eager code, and under torch.func's transforms).
_IMPLEMENTATIONS = {}
_FORMULAS = {}
_BATCHING = {}


def implementation_of(op):
    """The Python implementation registered as `op` (an OpOverload register made)."""
    return _IMPLEMENTATIONS[op]


def batching_of(op):
    """How torch.vmap batches `op` (an OpOverload register made): batching.vmap_rule's arguments
    after the op, (tensors, batchable, own_axes)."""
    return _BATCHING[op]


def formula_of(op):
    """The autograd formula (a Gradients) registered with `op`, or None."""
    return _FORMULAS.get(op)


def copy_out(out, result):
    """`result` written into `out=` (a tensor, or a tuple for several outputs): how a traced call
    with out= is expressed, so that tracing sees a functional op and a copy."""
    if isinstance(out, torch.Tensor):
        return out.copy_(result)
    for target, value in zip(out, result):
        target.copy_(value)
    return tuple(out)


def register(qualname, gradients=None, traceable=None, batchable=None, own_axes=None, flops=None):
    """Decorator: register the annotated function as the op `qualname` ("namespace::name"), with
    `gradients` (a Gradients) as its autograd formula, and return its OpOverload
    (`torch.ops.namespace.name.default`). Without `gradients` a backward through it raises.
    Under torch.vmap it runs the whole batch at once where every batched tensor input takes extra
    leading axes, else once a sample (`batchable` and `own_axes`: batching.vmap_rule's). `flops`:
    its FLOP count for torch.utils.flop_counter (flops.py), where it multiplies matrices."""
    traceable = TRACEABLE if traceable is None else traceable

    def decorate(impl):
        registered = _one_result_as_list(impl)
        entry = _outside_forward_mode(qualname, registered)
        if traceable:
            op = torch.library.triton_op(qualname, entry, mutates_args=())
        else:
            op = torch.library.custom_op(qualname, entry, mutates_args=())
            op.register_fake(registered)
        if gradients is None:
            op.register_autograd(_no_backward(qualname), setup_context=_keep_nothing)
        else:
            op.register_autograd(gradients, setup_context=gradients.setup_context)
        namespace, name = qualname.split("::")
        overload = getattr(getattr(torch.ops, namespace), name).default
        batching = _BATCHING[overload] = _tensor_count(overload), batchable, own_axes
        op.register_vmap(vmap_rule(overload, *batching))
        if flops is not None:
            register_flop_formula(overload.overloadpacket)(flops)
        _IMPLEMENTATIONS[overload] = impl
        if gradients is not None:
            gradients.name = gradients.named or name
            _FORMULAS[overload] = gradients
        return overload

    return decorate


def _tensor_count(overload):
    """How many leading arguments of the op are tensors, optional ones included (its schema's;
    scalars follow them)."""
    tensor = torch._C.OptionalType(torch._C.TensorType.get())
    arguments = overload._schema.arguments
    return next((i for i, a in enumerate(arguments) if not a.type.isSubtypeOf(tensor)), len(arguments))


def _one_result_as_list(impl):
    """`impl`, registered: an implementation annotated `-> tuple[torch.Tensor]` (a backward with
    one gradient) registered as returning a list (schema `Tensor[]`), which callers index alike.
    A custom op whose schema returns a one-tensor tuple, called in a backward that AOT autograd
    traces with dynamic shapes, makes every size constant (torch 2.11-2.13): each new size then
    recompiles. Other implementations are returned as they are."""
    signature = inspect.signature(impl)
    if signature.return_annotation != tuple[torch.Tensor]:
        return impl

    @functools.wraps(impl)
    def listed(*args, **kwargs):
        return list(impl(*args, **kwargs))

    listed.__signature__ = signature.replace(return_annotation=list[torch.Tensor])
    return listed


def _outside_forward_mode(qualname, impl):
    """`impl` as the dispatcher calls it: refused inside a forward-mode AD level. PyTorch passes no
    tangent through a custom op: under torch.func.jvp (and jacfwd) the result's tangent comes back
    zeros, and a forward_ad dual input's tangent is dropped, silently. Its implementation cannot tell
    a tangent that was dropped from a plain input (the dispatcher hands it plain tensors either
    way), so any call inside a level is refused; the op's Python function (generated.<op>) serves
    plain tensors there and gives dual or transformed ones their tangents (autograd.call's
    Function, whose jvp transposes the derived backward). Eager calls that run the
    implementation directly (autograd.call) do not pass here."""
    @functools.wraps(impl)
    def entry(*args, **kwargs):
        if forward_ad._current_level >= 0 and not torch.compiler.is_compiling():
            raise TypeError(f"torch.ops.{qualname.replace('::', '.')}: called inside a forward-mode AD level "
                            "(torch.func.jvp or jacfwd, or torch.autograd.forward_ad.dual_level), where PyTorch "
                            "passes no tangent through a custom op (the result's would be silently missing); "
                            f"call it outside the level (the op's Python function in {impl.__module__} serves "
                            "plain tensors and dual ones there, giving the results their tangents, except where "
                            "the level is traced, as torch.func.linearize traces it: use torch.func.jvp)")
        return impl(*args, **kwargs)
    return entry


def _keep_nothing(ctx, inputs, output):
    pass


def _no_backward(qualname):
    def backward(ctx, *grads):
        raise RuntimeError(f"{qualname}: no backward is derived for this op (a backward op has no double backward)")
    return backward
