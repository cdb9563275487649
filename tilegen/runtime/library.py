"""Generated ops as PyTorch ops: registration with torch.library, and the rules a wrapper follows
so that eager calls stay fast while tracing (torch.compile, torch.export, make_fx, fake tensors)
sees the registered op.

- On a GPU an op is a `torch.library.triton_op`: its implementation launches its kernels through
  `torch.library.wrap_triton` while it is traced, so TorchInductor sees into the kernels.
- Under Triton's interpreter (TRITON_INTERPRET=1) kernels cannot be traced, so an op is an opaque
  `torch.library.custom_op` whose fake implementation is the same code with every launch left
  out (it checks the arguments and allocates the outputs, on fake tensors).

Autograd: tilegen derives each op's backward from its spec and registers it as an op of its own
(`<op>_backward`); `Gradients` tells the op's autograd formula how the gradients of its inputs
come from that op's results or straight from the incoming gradients. A backward of a backward
(double backward) is not derived: it raises.
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


def wants_grad(values):
    """Whether autograd must record a call with `values`: grad mode is on and a tensor requires grad."""
    return torch.is_grad_enabled() and any(isinstance(v, torch.Tensor) and v.requires_grad for v in values)


def refuse_out_with_grad(op, out, **tensors):
    """out= writes into a tensor autograd does not track: refused where an input requires grad
    (as PyTorch's own out= variants do), rather than returning a result detached from its inputs."""
    if out is None or not torch.is_grad_enabled():
        return
    for name, value in tensors.items():
        if isinstance(value, torch.Tensor) and value.requires_grad:
            raise RuntimeError(f"{op}: out= does not support automatic differentiation, but argument '{name}' "
                               "requires grad; call it without out=, or under torch.no_grad()")


class Gradients:
    """How an op's autograd formula gets the gradient of each tensor input.

    `backward`: the registered backward op (None where no gradient needs a kernel), called as
    backward(*saved inputs, *saved outputs, *incoming gradients, *scalars), returning a tuple;
    `tensors`: how many leading arguments of the op are tensors (scalars follow);
    `saved`: the positions of the inputs the backward reads (the others are not kept);
    `sources`: per tensor input, ("result", i) for the backward's i-th result, ("grad", j) for the
    j-th incoming gradient itself (an input the op adds to an output), or None (no dependence);
    `outputs`: how many leading outputs are the op's results (any after them are kept for the
    backward only, and carry no gradient);
    `saved_outputs`: the positions of outputs the backward reads, None for one it recomputes
    (passed as None: a matmul's accumulator, kept by its training op, recomputed otherwise)."""

    def __init__(self, backward, tensors, saved, sources, outputs=1, saved_outputs=()):
        self.backward, self.tensors, self.saved, self.sources = backward, tensors, tuple(saved), tuple(sources)
        self.outputs, self.saved_outputs = outputs, tuple(saved_outputs)

    def setup_context(self, ctx, inputs, output):
        outputs = output if isinstance(output, tuple) else (output,)
        ctx.save_for_backward(*(inputs[i] for i in self.saved),
                              *(outputs[i] for i in self.saved_outputs if i is not None))
        ctx.scalars = tuple(inputs[self.tensors:])
        # An output no loss reads gets no gradient (None): it counts as zeros of its shape, made
        # here only for the op's results (autograd would also make zeros for each kept output,
        # an [M, N] tensor for a matmul's accumulator, never read).
        ctx.set_materialize_grads(False)
        # A gradient comes back in the outputs' shape; an input that was broadcast gets it
        # summed over its broadcast axes.
        ctx.shapes = [inputs[i].shape for i in range(self.tensors)]
        ctx.outputs = [(o.shape, o.dtype, o.device) for o in outputs[:self.outputs]]
        if len(outputs) > self.outputs:
            ctx.mark_non_differentiable(*outputs[self.outputs:])

    def _saved(self, ctx):
        # Detached: the backward computes no graph, and the compiled call path (which leaves
        # tensors that require grad to autograd) can then serve its launches.
        saved = [t.detach() for t in ctx.saved_tensors]
        kept = saved[len(self.saved):]
        return saved[:len(self.saved)] + [None if i is None else kept.pop(0) for i in self.saved_outputs]

    def __call__(self, ctx, *grads):
        return self.compute(ctx, grads, ctx.needs_input_grad[:self.tensors])

    def compute(self, ctx, grads, needed):
        """The gradients of the op's arguments (None for scalars and inputs not `needed`)."""
        grads = [g if g is not None else torch.zeros(shape, dtype=dtype, device=device)
                 for g, (shape, dtype, device) in zip(grads[:self.outputs], ctx.outputs)]
        results = ()
        if self.backward is not None and any(
                n and s is not None and s[0] == "result" for n, s in zip(needed, self.sources)):
            saved = self._saved(ctx)
            # Eager, the backward's implementation runs directly: a registered op's call costs
            # tens of microseconds of dispatch. Traced, the graph records the registered op.
            backward = self.backward if tracing((*saved, *grads)) else _IMPLEMENTATIONS[self.backward]
            results = backward(*saved, *grads, *ctx.scalars)
        chosen = []
        for need, source, shape in zip(needed, self.sources, ctx.shapes):
            if not need or source is None:
                chosen.append(None)
                continue
            grad = results[source[1]] if source[0] == "result" else grads[source[1]]
            chosen.append(grad if grad.shape == shape else grad.sum_to_size(shape))
        return (*chosen, *(None for _ in ctx.scalars))


class _EagerAutograd(torch.autograd.Function):
    """An op's implementation and its autograd formula (a Gradients) as a torch.autograd.Function:
    the formula a registered op has, without the dispatcher's round trips (see call)."""

    @staticmethod
    def forward(ctx, gradients, implementation, *args):
        # Detached, so that the compiled call path (which leaves tensors that require grad to
        # autograd) can serve the forward's launch.
        output = implementation(*(a.detach() if isinstance(a, torch.Tensor) else a for a in args))
        ctx.gradients = gradients
        gradients.setup_context(ctx, args, output)
        return output

    @staticmethod
    @torch.autograd.function.once_differentiable  # a second derivative raises, never comes back detached
    def backward(ctx, *grads):
        gradients = ctx.gradients
        return (None, None, *gradients.compute(ctx, grads, ctx.needs_input_grad[2:2 + gradients.tensors]))


def refuse_functorch(op, **tensors):
    """torch.func's transforms (grad, vmap, jvp, jacrev) wrap tensors in ways Triton's kernels
    cannot read: refused with one error naming the op, rather than an error from deep inside."""
    if torch.compiler.is_compiling():  # traced tensors are never torch.func's
        return
    for name, value in tensors.items():
        if isinstance(value, torch.Tensor) and torch._C._functorch.is_functorch_wrapped_tensor(value):
            raise TypeError(f"{op}: argument '{name}' is transformed by torch.func (grad, vmap, jvp, jacrev), "
                            "which tilegen's ops do not support; use torch.autograd (backward, "
                            "torch.autograd.grad) and call the op on whole batches")


def call(op, *args):
    """The registered op `op` (an OpOverload rt.register made) called on `args`: through the
    dispatcher while traced (the graph records the op), else its implementation directly, under
    the same autograd formula. An eager call through a registered op's autograd costs hundreds
    of microseconds of host time (bench/probes/training_step_profile.py)."""
    if tracing(args) or op not in _FORMULAS:
        return op(*args)
    return _EagerAutograd.apply(_FORMULAS[op], _IMPLEMENTATIONS[op], *args)


# Each registered op's implementation and autograd formula, by its OpOverload.
_IMPLEMENTATIONS = {}
_FORMULAS = {}


def copy_out(out, result):
    """`result` written into `out=` (a tensor, or a tuple for several outputs): how a traced call
    with out= is expressed, so that tracing sees a functional op and a copy."""
    if isinstance(out, torch.Tensor):
        return out.copy_(result)
    for target, value in zip(out, result):
        target.copy_(value)
    return tuple(out)


def register(qualname, gradients=None, traceable=None):
    """Decorator: register the annotated function as the op `qualname` ("namespace::name"), with
    `gradients` (a Gradients) as its autograd formula, and return its OpOverload
    (`torch.ops.namespace.name.default`). Without `gradients` a backward through it raises."""
    traceable = TRACEABLE if traceable is None else traceable

    def decorate(impl):
        if traceable:
            op = torch.library.triton_op(qualname, impl, mutates_args=())
        else:
            op = torch.library.custom_op(qualname, impl, mutates_args=())
            op.register_fake(impl)
        if gradients is None:
            op.register_autograd(_no_backward(qualname), setup_context=_keep_nothing)
        else:
            op.register_autograd(gradients, setup_context=gradients.setup_context)
        namespace, name = qualname.split("::")
        overload = getattr(getattr(torch.ops, namespace), name).default
        _IMPLEMENTATIONS[overload] = impl
        if gradients is not None:
            _FORMULAS[overload] = gradients
        return overload

    return decorate


def _keep_nothing(ctx, inputs, output):
    pass


def _no_backward(qualname):
    def backward(ctx, *grads):
        raise RuntimeError(f"{qualname}: no backward is derived for this op (a backward op has no double backward)")
    return backward
