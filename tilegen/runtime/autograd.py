"""Autograd of generated ops: the formula registered with each op (Gradients), and the eager
training path (call).

tilegen derives each op's backward from its spec and registers it as an op of its own
(`<op>_backward`); a Gradients tells the op's autograd formula what to save, how the gradients
of its inputs come from that op's results or straight from the incoming gradients, and sums a
broadcast input's gradient over its broadcast axes. While traced, autograd records the registered
ops; an eager call that records autograd runs the same implementations under a
torch.autograd.Function instead (call), without the dispatcher's round trips, or under an
autograd node in C++ (csrc/autograd_node.cpp) once that is built; under torch.func's transforms
and forward mode, under transforms.TransformedAutograd.
"""

import os
import threading
import warnings

import torch
from torch.autograd import forward_ad

from . import native, ops, transforms
from .library import batched_gradients, dual, formula_of, implementation_of, tracing
from .sizes import same_shape


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
    `records`: per result, the tensor inputs it records a graph from (it reads them other than
    through detach() or a comparison), or None for every input: a result that records from no
    input requiring grad in a call is marked non-differentiable there, as PyTorch's would not
    require grad;
    `saved_outputs`: the positions of outputs the backward reads, None for one it recomputes
    (passed as None: a matmul's accumulator, kept by its training op, recomputed otherwise);
    `whole`: the backward op is one launch of its module's backward kernel, which that kernel's
    call path learns from the backward op's own arguments (elementwise and reduction ops);
    `phases`: (first, rest), the backward op in two calls, for an eager backward to free the kept
    outputs between them: first(*backward's arguments) returns what rest(*saved inputs, *incoming
    gradients, *scalars, first's result) needs (a matmul's gradient at the accumulator, before
    the products that allocate the operands' gradients);
    `selective`: the backward op (and the phases' second) takes last which tensor inputs need a
    gradient (a list of bools), and computes the others' not (a matmul's products; the gradients
    an elementwise or reduction backward kernel stores, and the column sums it runs);
    `named`: the op its errors and its node name, where another op registers it (a matmul's
    training variant: the op itself), else the registered op's own name;
    `differentiable`: the backward op's math in PyTorch's own ops (called as the backward op is,
    returning what it returns, or None for a gradient not needed), which autograd differentiates
    again: what a backward asked for gradients with create_graph=True runs, on the saved tensors
    with their history (None: such a backward raises);
    `read_by`: per saved input, the tensor inputs whose gradients read its values, or None for a
    saved input the backward always reads (the default, for all): where none of those requires
    grad in a call, only its shape is kept (shape_only), as eager PyTorch's mm keeps no `self`
    for a frozen `mat2` (a matmul's A is read for B's gradient alone, once the accumulator is kept);
    () for one whose shape alone is read (a matmul's operands, where the epilogue gives the kept
    accumulator no gradient)."""

    def __init__(self, backward, tensors, saved, sources, outputs=1, saved_outputs=(), records=None, phases=None,
                 whole=False, selective=False, read_by=None, differentiable=None, named=None):
        self.backward, self.tensors, self.saved, self.sources = backward, tensors, tuple(saved), tuple(sources)
        self.differentiable = differentiable
        self.selective = selective
        self.read_by = (None,) * len(self.saved) if read_by is None else tuple(
            None if read is None else tuple(read) for read in read_by)
        if len(self.read_by) != len(self.saved):
            raise ValueError(f"Gradients: read_by names {len(self.read_by)} saved inputs, saved has {len(self.saved)}, "
                             "each read by some inputs' gradients, by none (its shape alone), or always (None)")
        self.outputs, self.saved_outputs, self.phases, self.whole = outputs, tuple(saved_outputs), phases, whole
        self.records = None if records is None else tuple(tuple(r) for r in records)
        # What setup_context does on every call, worked out once (a training step's host time is
        # mostly Python): the outputs an eager call keeps apart from autograd's saved tensors (see
        # setup_context), and whether the backward kernel runs for a gradient at all.
        self._apart = tuple(i for i in self.saved_outputs if i is not None and i >= outputs) if phases is not None else ()
        self._computes = backward is not None and any(s is not None and s[0] == "result" for s in self.sources)
        self._node = None  # node_formula's (the module, its Formula), once made
        # The compiled call paths that attach this formula's node to the calls they serve
        # (callpath.CallPath.formula): a table made while the node was not to be had (turned off,
        # its build failed or not yet loaded) takes it once a call on the Python path finds it.
        self.call_paths = []
        self.named = named
        self.name = named or "op"  # the op's name, for errors (register sets it)

    def setup_context(self, ctx, inputs, output, eager=False, transformed=False):
        """`eager`: called by call's Function (outputs kept apart, see below); `transformed`: by the
        Function torch.func's transforms and dual tensors run, where an input may carry a tangent
        and not require grad: every saved input is kept whole (for a jvp too, inside a dual
        level), and only a result that records from no input at all is marked non-differentiable."""
        outputs = output if isinstance(output, tuple) else (output,)
        # An eager call (call) keeps the outputs kept for the backward only (past the results)
        # out of autograd's saved tensors, which live until the whole backward returns: its first
        # phase drops them (compute). None can reach them but the backward.
        apart = self._apart if eager else ()
        ctx.kept = {i: outputs[i] for i in apart}
        # (Under torch.func every input is kept whole: the backward there is the differentiable
        # math, whose accumulator needs both operands' values and history.)
        saved = (*(inputs[i] if read is None or transformed or _any_requires_grad(inputs, read) else shape_only(inputs[i])
                   for i, read in zip(self.saved, self.read_by)),
                 *(outputs[i] for i in self.saved_outputs if i is not None and i not in apart))
        ctx.save_for_backward(*saved)
        if transformed and forward_ad._current_level >= 0:  # (tangents exist only inside a dual level)
            ctx.save_for_forward(*saved)  # (what a jvp reads as ctx.saved_tensors: tangents)
            ctx.results = [(o.shape, o.dtype, o.device) for o in outputs]
        ctx.scalars = inputs[self.tensors:]
        # A gradient comes back in the outputs' shape; an input that was broadcast gets it
        # summed over its broadcast axes.
        ctx.shapes = [inputs[i].shape for i in range(self.tensors)]
        ctx.dtypes = [inputs[i].dtype for i in range(self.tensors)]  # (the precision each is summed in)
        if len(outputs) > self.outputs:
            # An output no loss reads gets no gradient (None): it counts as zeros of its shape,
            # made in compute only for the op's results (autograd would also make zeros for each
            # kept output, an [M, N] tensor for a matmul's accumulator, never read). Where every
            # output is a result, autograd makes the zeros itself.
            ctx.set_materialize_grads(False)
            ctx.outputs = [(o.shape, o.dtype, o.device) for o in outputs[:self.outputs]]
            ctx.mark_non_differentiable(*outputs[self.outputs:], *self._plain(inputs, outputs, transformed))
        else:
            ctx.outputs = None
            if self.records is not None:
                ctx.mark_non_differentiable(*self._plain(inputs, outputs, transformed))

    def _plain(self, inputs, outputs, transformed=False):
        """The results that record a graph from no input that requires grad in this call (from no
        input at all, where `transformed`)."""
        if self.records is None:
            return []
        return [o for o, read in zip(outputs, self.records)
                if not (read if transformed else _any_requires_grad(inputs, read))]

    def _saved(self, ctx):
        # Detached: the backward computes no graph, and the compiled call path (which leaves
        # tensors that require grad to autograd) can then serve its launches. Under
        # create_graph=True with their history: the gradients are differentiated through them.
        saved = list(ctx.saved_tensors) if torch.is_grad_enabled() else [t.detach() for t in ctx.saved_tensors]
        apart = ctx.kept
        if not _keeps_graph():
            ctx.kept = {}  # the backward holds them alone from here (retain_graph=True: ctx still does)
        return self._arranged(saved, apart)

    def _arranged(self, saved, apart):
        """The backward's saved arguments from the tensors a ctx saved (the saved inputs, then the
        saved outputs that are tensors) and the outputs kept `apart` from them: None for an output
        the backward recomputes."""
        outputs = saved[len(self.saved):]
        return saved[:len(self.saved)] + [None if i is None else apart[i] if i in apart else outputs.pop(0)
                                          for i in self.saved_outputs]

    def tangents(self, saved, tangents, scalars, shapes, results):
        """The op's output tangents for its tensor inputs' `tangents` (None: no tangent), forward
        mode's derivative (jvp, jacfwd, hessian, dual tensors): the derived backward is linear in
        the incoming gradients, and its transpose is the forward derivative, taken by torch.func.vjp
        of the backward's differentiable math (PyTorch's ops) at zero gradients, so that forward
        mode needs no derivation of its own. `saved`: the backward's saved arguments (_arranged);
        `shapes`: the tensor inputs'; `results`: (shape, dtype, device) of each output, those past
        the op's results (kept for the backward) getting no tangent."""
        needed = [t is not None for t in tangents]
        if not any(needed):
            return (None,) * len(results)
        if self.differentiable is None and self._reads_results(needed):
            raise RuntimeError(transforms.no_forward_mode(self.name))
        # (a result that records from no input at all is non-differentiable: setup_context)
        seeded = [dtype.is_floating_point and (self.records is None or bool(self.records[i]))
                  for i, (_, dtype, _) in enumerate(results[:self.outputs])]
        constant = [torch.zeros(shape, dtype=dtype, device=device) for shape, dtype, device in results[:self.outputs]]

        def input_gradients(*seeds):
            given = iter(seeds)
            grads = [next(given) if s else c for s, c in zip(seeded, constant)]
            chosen = self.gradients(list(saved) if self._reads_results(needed) else None, grads, needed, scalars)
            return tuple(self._summed_to(g, shapes[i], i, tangents[i].dtype) if g is not None else torch.zeros_like(tangents[i])
                         for i, g in enumerate(chosen) if needed[i])

        with torch.enable_grad():
            chosen, transpose = torch.func.vjp(input_gradients, *(c for s, c in zip(seeded, constant) if s))
            out = iter(transpose(tuple(t.to(g.dtype) for t, g in zip((t for t in tangents if t is not None), chosen))))
        return tuple(next(out) if i < self.outputs and seeded[i] else None for i in range(len(results)))

    def __call__(self, ctx, *grads):
        return self.compute(ctx, grads, ctx.needs_input_grad[:self.tensors])

    def compute(self, ctx, grads, needed):
        """The gradients of the op's arguments (None for scalars and inputs not `needed`)."""
        if ctx.outputs is not None:  # (else autograd made any missing gradient zeros)
            grads = [g if g is not None else torch.zeros(shape, dtype=dtype, device=device)
                     for g, (shape, dtype, device) in zip(grads[:self.outputs], ctx.outputs)]
        saved = self._saved(ctx) if self._reads_results(needed) else None
        chosen = self.gradients(saved, grads, needed, ctx.scalars)
        return (*(self._summed_to(g, shape, i, dtype) for i, (g, shape, dtype) in enumerate(zip(chosen, ctx.shapes, ctx.dtypes))),
                *(None for _ in ctx.scalars))

    def _summed_to(self, gradient, shape, index, dtype):
        """Input `index`'s gradient summed over the axes it was broadcast along (as the C++
        node's sum_to_input, whose error it names the same way), in the input's `dtype` where
        that is the more precise: a float64 bias's gradient is an incoming gradient of a float32
        output as it is, and a sum of it in float32 would lose float64's digits."""
        if gradient is None or same_shape(gradient.shape, shape):
            return gradient
        if dtype != gradient.dtype and torch.promote_types(gradient.dtype, dtype) == dtype:
            gradient = gradient.to(dtype)
        try:
            return gradient.sum_to_size(shape)
        except RuntimeError as exc:
            raise RuntimeError(f"{self.name}: the gradient of its input {index}: {exc}") from exc

    def _reads_results(self, needed):
        """Whether a gradient `needed` comes from the backward op's results (else none is called)."""
        return self._computes and any(n and s is not None and s[0] == "result" for n, s in zip(needed, self.sources))

    def gradients(self, saved, grads, needed, scalars):
        """Each tensor input's gradient in the outputs' shape (None where not `needed` or not
        dependent), from `saved` (the saved inputs, then the saved outputs: a list, which the
        two-phase backward empties of its kept outputs as it goes; None where no result is read),
        the incoming gradients (none missing) and the scalars. A broadcast input's gradient is
        summed to its shape by the caller."""
        results = ()
        if saved is not None:
            traced = tracing((*saved, *grads))
            selected = (list(needed),) if self.selective else ()
            batched = not traced and batched_gradients(grads)
            if (torch.is_grad_enabled() or batched) and not traced:
                # create_graph=True: gradients autograd can differentiate again, from PyTorch's ops
                # on the saved tensors with their history (a kernel's results would carry none, and
                # a gradient penalty or a Hessian-vector product built on them leave this op out).
                # Batched incoming gradients (is_grads_batched=True: a kernel cannot read them)
                # take the same math, which PyTorch's vmap batches.
                if self.differentiable is None:
                    raise RuntimeError(no_batched_backward(self.name) if batched else no_second_derivative(self.name))
                results = self.differentiable(*saved, *grads, *scalars, *selected)
            elif self.phases is not None and not traced:
                first, rest = self.phases
                computed = first(*saved, *grads, *scalars)
                # The kept outputs' last references: freed before the products allocate theirs,
                # as eager PyTorch frees a pre-activation once its activation's backward ran.
                del saved[len(self.saved):]
                results = rest(*saved, *grads, *scalars, computed, *selected)
            else:
                # Eager, the backward's implementation runs directly: a registered op's call costs
                # tens of microseconds of dispatch. Traced, the graph records the registered op.
                backward = self.backward if traced else implementation_of(self.backward)
                results = backward(*saved, *grads, *scalars, *selected)
        return tuple(None if not need or source is None else results[source[1]] if source[0] == "result"
                     else grads[source[1]] for need, source in zip(needed, self.sources))

    def node_formula(self):
        """This op's Formula (its autograd node in C++, see call and native_module), or None:
        turned off, not built (yet)."""
        module = native_module()
        if module is None or (self.tensors > _MASKED_INPUTS and (self.records is not None or self._reads_some())):
            return None
        if self._node is None or self._node[0] is not module:
            layout = [-1 if i is None else i for i in self.saved_outputs]
            # Per tensor input: the incoming gradient that is its own, none (-1), or the backward
            # op's result r (-2 - r).
            sources = [-1 if s is None else s[1] if s[0] == "grad" else -2 - s[1] for s in self.sources]
            self._node = module, module.Formula(self.name, self._node_gradients, self.tensors, self.saved, layout,
                                                self.outputs, sources, self._backward_path(),
                                                None if self.records is None else [_mask(read) for read in self.records],
                                                self.selective, [0 if read is None else _mask(read) for read in self.read_by])
        node = self._node[1]
        for path in self.call_paths:
            if path.table is not None and path.table.formula is None:
                path.table.formula = node
        return node

    def _reads_some(self):
        """Whether some saved input is kept only where a gradient that reads it is asked for."""
        return any(read is not None for read in self.read_by)

    def _backward_path(self):
        """The backward op's compiled call path, where it serves the op's backward whole (the
        backward is one kernel's launch, learned from the backward op's own arguments): the node
        then launches it from C++. Else None."""
        if not self.whole or self.backward is None:
            return None
        implementation = implementation_of(self.backward)
        return ops.backward_op_of(implementation.__module__).call_path

    def _node_gradients(self, saved, grads, needed, scalars):
        # The node keeps the saved outputs that are tensors; the backward takes None for the others.
        kept = saved[len(self.saved):][::-1]  # (reversed, for pop: the list ends empty, holding none)
        arranged = saved[:len(self.saved)] + [None if i is None else kept.pop() for i in self.saved_outputs]
        # Where the graph is not kept, the node handed its saved tensors over to `saved`: emptied,
        # `arranged` holds their last references, which a two-phase backward drops midway.
        saved.clear()
        return self.gradients(arranged if self._reads_results(needed) else None, grads, needed, scalars)


def _any_requires_grad(inputs, positions):
    """Whether an input at one of `positions` requires grad in this call (records, read_by)."""
    return any(inputs[i].requires_grad for i in positions)


# The node's masks hold a bit for each of at most 62 tensor inputs (an op of more records no node);
# the next bit is no input's, and stands for none: a read_by mask of 0 means "always read".
_MASKED_INPUTS = 62


def _mask(positions):
    """The node's mask of input `positions` (records, read_by): bit i for input i; for none, a bit
    that is no input's (read_by's () reads the shape alone, as 0 would read the values always)."""
    return sum(1 << i for i in positions) if positions else 1 << _MASKED_INPUTS


def shape_only(t):
    """What is saved for an input whose values no gradient asked for reads: its shape, dtype and
    device over one element (every stride 0), for the sizes the backward reads, so that `t`'s memory
    goes with its last other reference (an activation feeding a frozen weight, a matmul's A)."""
    return t.new_empty(()).expand(t.shape)


def _keeps_graph():
    """Whether the backward running now keeps the graph for another (retain_graph=True); taken
    as kept while compiled autograd traces it (the query is no op its graph can hold)."""
    if torch.compiler.is_compiling():
        return True
    return _GRAPH_TASK_KEEPS_GRAPH is not None and _GRAPH_TASK_KEEPS_GRAPH()


_GRAPH_TASK_KEEPS_GRAPH = getattr(torch._C._autograd, "_get_current_graph_task_keep_graph", None)


# The C++ autograd node (csrc/autograd_node.cpp): eager training calls record it instead of
# torch.autograd.Function's node, which costs about twice a small step's host time
# (bench/probes/training_host_cpu.py). It compiles against torch's headers (10-20 s, cached after)
# in a background thread started by the first training call; calls record Function's node until
# it is ready. TILEGEN_AUTOGRAD_NODE=0 turns it off.
# _NODE: "module", the loaded module, or None where it cannot be built ("why" says why, until a
# warning has said it); "loader", (the thread building it, the process that started it).
_NODE = {}
_NODE_LOCK = threading.Lock()  # (held while a loader is started)


def native_module(wait=False):
    """The autograd node's native module once built and loaded, else None: turned off, not ready
    yet (the first call starts its build; wait=True waits for it) or not buildable here (a
    warning says once why)."""
    if os.environ.get("TILEGEN_AUTOGRAD_NODE", "1") in ("", "0"):
        return None
    if "module" not in _NODE:
        with _NODE_LOCK:
            loader = _NODE.get("loader")
            if loader is None or loader[1] != os.getpid():  # a forked child starts its own
                loader = _NODE["loader"] = (threading.Thread(target=_load_node, name="tilegen-autograd-node",
                                                             daemon=True), os.getpid())
                loader[0].start()
        if not wait:
            return None
        loader[0].join()
    if _NODE.get("why"):
        warnings.warn(f"the autograd node is not available ({_NODE.pop('why')}); training calls record "
                      "torch.autograd.Function's node (TILEGEN_AUTOGRAD_NODE=0 says so without this warning)",
                      RuntimeWarning, stacklevel=3)
    return _NODE["module"]


def _load_node():
    try:
        module = native.load("autograd_node")
    except (OSError, ImportError) as exc:  # (BuildError is an OSError; a load can fail to link)
        module, _NODE["why"] = None, str(exc)
    _NODE["module"] = module


class _EagerAutograd(torch.autograd.Function):
    """An op's implementation and its autograd formula (a Gradients) as a torch.autograd.Function:
    the formula a registered op has, without the dispatcher's round trips (see call)."""

    @staticmethod
    def forward(ctx, gradients, implementation, *args):
        output = op_forward(gradients, implementation, args)
        ctx.gradients = gradients
        gradients.setup_context(ctx, args, output, eager=True)
        return output

    @staticmethod
    def backward(ctx, *grads):
        gradients = ctx.gradients
        return (None, None, *gradients.compute(ctx, grads, ctx.needs_input_grad[2:2 + gradients.tensors]))


def op_forward(gradients, implementation, args):
    """The op's forward on `args`, its tensors detached, so that the compiled call path (which
    leaves tensors that require grad to autograd) can serve the launch."""
    tensors = gradients.tensors
    return implementation(*[a.detach() for a in args[:tensors]], *args[tensors:])


def no_second_derivative(op):
    """Why a backward run with create_graph=True raises where the op has no `differentiable` math
    (a reduction that reruns its forward's kernel for the sums its decisions read): its kernel's
    gradients would carry no history, so a gradient penalty or a Hessian-vector product built on
    them would silently leave this op's share out."""
    return (f"{op}: a second derivative is not derived for this op (create_graph=True asks for gradients that "
            "can be differentiated again; its backward is a kernel's, with no history); compute the gradients "
            "without create_graph")


def no_batched_backward(op):
    """Why a backward with batched incoming gradients raises where the op has no `differentiable`
    math (a kernel cannot read them; PyTorch's ops batch)."""
    return (f"{op}: a backward with batched incoming gradients (torch.autograd.grad(is_grads_batched=True), "
            "torch.autograd.functional.jacobian(vectorize=True)) is not derived for this op (its kernel cannot "
            "read them, and this op's backward reruns its forward's kernel for the sums its decisions read); "
            "compute the gradients one incoming gradient at a time")


def accumulator_with_history(op, kept, a, b, a_needed, b_needed, a_name, b_name):
    """A matmul's accumulator A @ B in float32 for its differentiable backward (`kept`: the
    forward's, or None: recomputed here), with the history its operands give it (a kept one has
    none); its values are the kept ones, so that a kink is decided as the forward decided it. An
    operand whose values no gradient asked for read was kept as its shape alone (read_by): the
    other then requires no grad and is a constant, and the stand-in's history (the C++ node gives
    it its input's) is the accumulator's. Where it has none (torch.autograd.Function's node) and
    its gradient is asked for, nothing can give the accumulator's dependence on it: refused."""
    if kept is None:  # (the registered op's backward, called directly: both operands kept)
        return torch.matmul(a.float(), b.float())
    kept = kept.float()  # (the math's precision, as the kernel upcasts it on load)
    a_shape_only, b_shape_only = _stand_in(a, b), _stand_in(b, a)
    if not (a_shape_only or b_shape_only):
        # (its history alone counts: in the operands' dtype, where it may overflow)
        return kept + zero_with_history(torch.matmul(a, b))
    stand_in, needed, name, other = (a, a_needed, a_name, b_name) if a_shape_only else (b, b_needed, b_name, a_name)
    if stand_in.requires_grad:  # (a stand-in's one element is any bits: never read)
        return kept + (zero_with_history(a) @ b if a_shape_only else a @ zero_with_history(b))
    if needed:
        raise RuntimeError(f"{op}: a second derivative through the accumulator A @ B needs '{name}''s history, but its "
                           f"values were not kept ('{other}' does not require grad) and this call's autograd node "
                           "(torch.autograd.Function's, recorded under saved-tensor hooks, torch.func or compiled "
                           f"autograd) keeps none for it; let '{other}' require grad in the call, or compute the "
                           "gradients without create_graph")
    return kept


def accumulator_without_history(kept, a, b):
    """A matmul's accumulator A @ B in float32 for the differentiable backward of an epilogue that
    gives it no gradient (`where(acc > 0, r, 0)`: it decides, nothing flows through it): the kept
    one, or computed again from the operands (the registered op's backward keeps them whole; its
    training variant keeps the accumulator and the operands' shapes alone)."""
    return (torch.matmul(a.float(), b.float()) if kept is None else kept.float()).detach()


class _ZeroWithHistory(torch.autograd.Function):
    """Zeros of t's shape whose gradient passes to t as it is: `t - t.detach()`, which is NaN where t
    is not finite (a product that overflowed its dtype, a stand-in's bits)."""
    generate_vmap_rule = True

    @staticmethod
    def forward(t):
        return t.new_zeros(()).expand(t.shape)

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
        return grad


def zero_with_history(t):
    """Zeros of t's shape and dtype, with t's history (_ZeroWithHistory)."""
    return _ZeroWithHistory.apply(t)


def _stand_in(t, other):
    """Whether a matmul operand `t` was kept as its shape alone (shape_only: every stride 0), which
    happens only where the other operand requires no grad (only that one's gradient reads `t`)."""
    return not other.requires_grad and t.numel() > 1 and all(s == 0 for s in t.stride())


def summed_gradient_dtype(plain, shape, inputs, reads):
    """The dtype a backward makes a gradient of `shape` in: `plain`, or, where one of `inputs`
    (those it is the gradient of) was broadcast to that shape, the widest of `plain` and the
    dtypes of the tensors its terms `reads`: autograd sums it over the broadcast axes before
    casting to the input's dtype, and its terms, as PyTorch computes them, are of that dtype
    (float16 ones past float16's range sum to NaN where their float32 sum is finite)."""
    if not any(_broadcast(t, shape) for t in inputs):
        return plain
    for t in reads:
        plain = torch.promote_types(plain, t.dtype)
    return plain


def _broadcast(t, shape):
    """Whether `t` is broadcast to `shape`: of another shape, or of it with an axis of stride 0 and
    size > 1 (a backward op expands its broadcast inputs before it allocates the gradients). A
    function of the layout alone, as the compiled call path's signature is, so a repeat call it
    serves makes its gradients in the same dtype. A user's expanded view and a shape-only stand-in
    (kept for a frozen input) count too: their wider buffer holds the same values, cast once after
    the backward."""
    return not same_shape(t.shape, shape) or any(stride == 0 and size > 1 for size, stride in zip(t.shape, t.stride()))


def in_precision(floor, *tensors):
    """`tensors` in the precision of an op's math, as its kernels compute (a differentiable
    backward's inputs): `floor` (the spec's compute dtype), float64 where one of them is; int and
    bool tensors as they are."""
    wide = floor == torch.float64 or any(t.dtype == torch.float64 for t in tensors)
    dtype = torch.float64 if wide else floor
    return tuple(_upcast(t, dtype) if t.is_floating_point() else t for t in tensors)


def _upcast(t, dtype):
    """`t` in `dtype`; one of every stride 0 (a value broadcast, a stand-in kept for a shape:
    shape_only) as one element expanded again, not materialized."""
    if t.dtype == dtype or t.numel() <= 1 or any(s != 0 for s in t.stride()):
        return t.to(dtype)
    return t[(0,) * t.dim()].to(dtype).expand(t.shape)


def call(op, *args):
    """The registered op `op` (an OpOverload rt.register made) called on `args`: through the
    dispatcher while traced (the graph records the op), else its implementation directly, under
    the same autograd formula. An eager call through a registered op's autograd costs hundreds
    of microseconds of host time (bench/probes/training_step_profile.py); through
    torch.autograd.Function, tens (bench/probes/training_host_cpu.py). With the autograd node
    (native_module), the formula's node is C++: the forward runs, then the node is attached to
    its results; a repeat call the compiled call path serves attaches it there."""
    formula = formula_of(op)
    if formula is not None and torch.compiler.is_compiling() and transforms.traced_under_torch_func():
        return transforms.eager_call(op, *args)
    if formula is None or tracing(args):
        return op(*args)
    implementation = implementation_of(op)
    functorch = torch._C._are_functorch_transforms_active() or dual(args)
    node = None if functorch else formula.node_formula()
    if node is not None and node.usable():
        output = op_forward(formula, implementation, args)
        node.attach(args, output if isinstance(output, tuple) else (output,))
        return output
    if functorch:
        return transforms.TransformedAutograd.apply(op, *args)
    # Function.apply's Python wrapper adds only that check and about 4 us a call.
    return _apply(_EagerAutograd, formula, implementation, *args)


def _apply(function, *args):
    """torch.autograd.Function's own apply (C++), under its Python wrapper."""
    return _C_APPLY.__get__(None, function)(*args)


_C_APPLY = torch._C._FunctionBase.__dict__["apply"]
