"""The checks of an op as a PyTorch op, the same for every op: opcheck, torch.compile, export,
CUDA graphs, vmap, out=, and its gradients against autograd of the oracle."""

import functools

import pytest
import torch

from tilegen.testing.compare import (
    TOLERANCES, allowances, assert_identical, assert_same_gradients, assert_same_results, gradient_key, held_by,
)
from tilegen.testing.samples import FP8_DTYPES, INTERPRET, as_tuple, exact, random, with_layout

OPCHECK_AOT = "test_aot_dispatch_dynamic"
OPCHECK_UTILS = ("test_schema", "test_autograd_registration", "test_faketensor", OPCHECK_AOT)  # opcheck's own default
OPCHECK_UTILS_WITHOUT_SCHEMA = ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
# opcheck's AOT autograd check adds every output's sum into one tensor whose dtype the first
# output's sets: an int or bool output beside float ones breaks it. Such an op's backward is
# checked against autograd of the oracle by the gradient tests.
OPCHECK_UTILS_WITHOUT_AOT = ("test_schema", "test_autograd_registration", "test_faketensor")

# torch.compile's backend in these tests: Inductor on a GPU. In the interpreter Inductor cannot
# compile Triton kernels for the CPU, so AOT autograd's eager backend runs the same trace.
COMPILE_BACKEND = "aot_eager" if INTERPRET else "inductor"


def _stack(tensors, dim):
    """torch.stack, fp8 included (stacked as their bytes)."""
    if tensors[0].dtype not in FP8_DTYPES:
        return torch.stack(tensors, dim)
    return torch.stack([t.view(torch.uint8) for t in tensors], dim).view(tensors[0].dtype)


def compiled_afresh(fn):
    """torch.compile(fullgraph=True) of `fn`, Dynamo's caches emptied first: the helpers here
    compile the same code objects for every op, and one process running many ops' tests (a
    `-k` selection) would pass Dynamo's recompile limit, which fullgraph makes an error."""
    import torch._dynamo

    torch._dynamo.reset()
    return torch.compile(fn, fullgraph=True, backend=COMPILE_BACKEND)


def recorded_gradients(outputs, leaves, seeds):
    """The gradients of `leaves` from `outputs` seeded by `seeds` (the op's or the oracle's), None
    where nothing depends on a leaf: an output that records no graph (a count of comparisons, a
    where() of constants) adds nothing."""
    pairs = [(o, g) for o, g in zip(outputs, seeds) if o.requires_grad]
    if not pairs:
        return [None] * len(leaves)
    return torch.autograd.grad([o for o, _ in pairs], leaves, [g for _, g in pairs], allow_unused=True)

def opcheck_compared(op, args):
    """What opcheck's AOT check compares for `op` on `args`: the float outputs, and the gradients
    of the sum of each output's sum's size (as it takes them)."""
    outputs = [o for o in as_tuple(op(*args)) if o.is_floating_point()]
    compared = [o.detach() for o in outputs]
    leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    recorded = [o for o in outputs if o.requires_grad]
    if leaves and recorded:
        gradients = torch.autograd.grad(sum(o.sum().abs() for o in recorded), leaves, allow_unused=True)
        compared += [g for g in gradients if g is not None]
    return compared


def opcheck_tolerances(compared, key):
    """opcheck's atol and rtol for the tensors it `compared` (opcheck_compared): the dtype's
    tolerance (`key`) relative to their size. Traced with dynamic shapes, a launch whose rows are
    not known to fit its block takes the looped kernel, whose sums run in another order than the
    eager call's: where a gradient element sums terms that cancel, float32 rounding alone passes
    opcheck's own absolute 1e-5 (the compiled backward tests allow the same, assert_same_gradients)."""
    sizes = [t[torch.isfinite(t)].abs().max().item() for t in compared if torch.isfinite(t).any()]
    atol, rtol = TOLERANCES[key]
    return {"atol": atol * max([1.0] + sizes), "rtol": rtol}


def opcheck(op, args, key, test_utils=OPCHECK_UTILS):
    """torch.library.opcheck of `op` on `args`, to the tolerance of `key`. Its AOT check compares
    the eager and the compiled results with assert_close, which fails NaN against NaN: where the
    results hold a NaN (an op `log(1 - b)` on a b above 1: the right result, eager and compiled
    alike), that check runs here on its own, NaN matching NaN in the same place."""
    compared = opcheck_compared(op, args)
    tolerances = opcheck_tolerances(compared, key)
    if OPCHECK_AOT not in test_utils or not any(t.isnan().any() for t in compared):
        torch.library.opcheck(op, args, test_utils=test_utils, **tolerances)
        return
    torch.library.opcheck(op, args, test_utils=tuple(u for u in test_utils if u != OPCHECK_AOT), **tolerances)
    from torch.testing._internal.optests.aot_autograd import aot_autograd_check

    def called_on_copies(*xs):  # (aot_autograd_check calls it more than once: the inputs stay as they were)
        return op(*(x.clone() if isinstance(x, torch.Tensor) else x for x in xs))

    same = functools.partial(torch.testing.assert_close, equal_nan=True, **tolerances)
    aot_autograd_check(called_on_copies, args, {}, dynamic=True, check_gradients="auto", assert_equals_fn=same)

def check_out_is_an_input(op, wrapper, inputs, index, label):
    """out= that is input `index` itself (`label` by name) is written in place, as PyTorch's out=
    allows, contiguous and (2-D and up) through a transpose's strides, eager and under
    torch.compile; an out= sharing only part of its memory is refused by name."""
    want = wrapper(*inputs)
    layouts = [lambda t: t.clone()]
    if want.dim() > 1:
        # (clone, not contiguous(): a transpose that is contiguous already, [M, 1], would come back
        # as the input itself, and the call would write into the inputs the checks below reuse)
        layouts.append(lambda t: t.transpose(-1, -2).clone(memory_format=torch.contiguous_format).transpose(-1, -2))
    for layout in layouts:
        given = list(inputs)
        given[index] = layout(inputs[index])
        got = wrapper(*given, out=given[index])
        assert got is given[index]
        assert_identical(got, want)
    # Under torch.compile: the op, then a copy into the input it read (functionalized).
    given = [t.clone() for t in inputs]
    compiled_afresh(lambda *t: wrapper(*t, out=t[index]))(*given)
    assert_same_results(given[index], want, want.dtype, "out= that is an input, under torch.compile")
    # Shifted by one element: the two share all but one element, at different places.
    room = torch.empty(want.numel() + 1, dtype=want.dtype, device=want.device)
    given = list(inputs)
    given[index] = room[1:].view(want.shape).copy_(inputs[index])
    with pytest.raises(ValueError, match=f"{op}: argument 'out' shares memory with input '{label}' other than"):
        wrapper(*given, out=room[:-1].view(want.shape))


def check_compiles_whole(fn, args, dtype):
    """fn compiles with torch.compile(fullgraph=True) and no graph break, and matches eager."""
    import torch._dynamo

    torch._dynamo.reset()
    explained = torch._dynamo.explain(fn)(*args)
    assert explained.graph_break_count == 0, explained.break_reasons
    compiled = compiled_afresh(fn)
    assert_same_results(compiled(*args), fn(*args), dtype, "compiled against eager")


def as_module(fn):
    """A torch.nn.Module whose forward calls fn (torch.export exports modules)."""
    class Model(torch.nn.Module):
        def forward(self, *inputs):
            return fn(*inputs)

    return Model()


def check_export_keeps(fn, args, op, dtype):
    """torch.export of a module calling fn holds `op` in its graph, and runs like eager."""
    exported = torch.export.export(as_module(fn), tuple(args))
    targets = [node.target for node in exported.graph.nodes if node.op == "call_function"]
    assert op in targets, targets
    assert_same_results(exported.module()(*args), fn(*args), dtype, "exported against eager")


def check_cuda_graph_replay(fn, args, fresh, dtype):
    """fn captured in a CUDA graph (after warm-up calls on a side stream, as PyTorch advises)
    and replayed on `fresh` inputs copied into the captured ones gives eager's result."""
    static = [a.clone() for a in args]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn(*static)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = fn(*static)
    for target, value in zip(static, fresh):
        target.copy_(value)
    graph.replay()
    torch.cuda.synchronize()
    assert_same_results(captured, fn(*fresh), dtype, "CUDA-graph replay against eager")


def taking(fn, given, positions, scalars):
    """`fn` (called with `scalars`) as a function of its arguments at `positions` alone, the others
    those of `given`, returning a tuple: torch.func's transforms take the tensors they
    differentiate alone (a bool mask has no tangent, a frozen weight no gradient)."""
    def call(*chosen):
        args = list(given)
        for i, x in zip(positions, chosen):
            args[i] = x
        return as_tuple(fn(*args, **scalars))
    return call


class AsPyTorchOp:
    """The checks of an op as a PyTorch op, the same for every op: `wrapper` is the generated
    function, `registered` its torch.ops overload, `sample(seed)` gives (inputs, scalars, dtype),
    `reference` the float64 oracle (differentiable: it is PyTorch code), `term_roles` how each
    input lines up with the terms of the op's math (tilegen.testgen.term_role); `records`: some
    float output records a graph (else every one reads the inputs only through detach() or a
    comparison, and no loss on the op has a gradient)."""

    def __init__(self, wrapper, registered, sample, qualname, input_names, reference, term_roles, records=True):
        self.wrapper, self.registered, self.sample = wrapper, registered, sample
        self.qualname, self.input_names, self.reference = qualname, input_names, reference
        self.term_roles, self.records = term_roles, records

    def doubled(self, scalars):
        """The op inside a little model: its result doubled (a torch op after it)."""
        def model(*inputs):
            return tuple(r * 2 for r in as_tuple(self.wrapper(*inputs, **scalars)))
        return model

    def opcheck(self):
        inputs, scalars, key = self.sample()
        args = (*inputs, *scalars.values())
        if not any(t.dtype in FP8_DTYPES for t in inputs):
            opcheck(self.registered, args, key)
            return
        # PyTorch's schema check compares inputs before and after the call with allclose, which
        # has no fp8 kernel; the other checks run, and the inputs' bytes must come back unchanged.
        before = [t.clone() for t in inputs]
        opcheck(self.registered, args, key, test_utils=OPCHECK_UTILS_WITHOUT_SCHEMA)
        for name, old, new in zip(self.input_names, before, inputs):
            assert torch.equal(old.view(torch.uint8), new.view(torch.uint8)), f"{self.qualname} wrote to '{name}'"

    def vmap_matches_each_sample(self, batch=3):
        """torch.vmap of the op against the op called on each sample in turn (what vmap means):
        every input batched (the first along its second axis, the others along their first),
        then the first alone with the others shared by every sample."""
        samples = [self.sample(seed=seed) for seed in range(batch)]
        inputs, scalars, dtype = samples[0]
        stacked = [_stack([sample[0][i] for sample in samples], dim=1 if i == 0 else 0) for i in range(len(inputs))]

        def op(*tensors):
            return self.wrapper(*tensors, **scalars)

        for dims in ((1,) + (0,) * (len(inputs) - 1), (1,) + (None,) * (len(inputs) - 1)):
            args = [batched if dim is not None else shared for batched, shared, dim in zip(stacked, inputs, dims)]
            got = torch.func.vmap(op, in_dims=dims)(*args)
            each = [as_tuple(op(*(a if d is None else a.select(d, i) for a, d in zip(args, dims)))) for i in range(batch)]
            want = tuple(_stack(parts, dim=0) for parts in zip(*each))
            assert_same_results(got, want if len(want) > 1 else want[0], dtype, f"torch.vmap, in_dims={dims}")

    def compiles_whole(self):
        inputs, scalars, dtype = self.sample()
        check_compiles_whole(self.doubled(scalars), inputs, dtype)

    def compiled_out_is_written(self):
        inputs, scalars, dtype = self.sample()
        want = self.wrapper(*inputs, **scalars)
        out = tuple(torch.empty_like(w) for w in as_tuple(want))
        out = out if len(out) > 1 else out[0]

        def write(*inputs):
            return self.wrapper(*inputs, **scalars, out=out)

        got = compiled_afresh(write)(*inputs)
        assert_same_results(got, want, dtype, "out= under torch.compile")
        assert_same_results(out, want, dtype, "out= under torch.compile")

    def export_keeps_the_op(self):
        inputs, scalars, dtype = self.sample()
        check_export_keeps(self.doubled(scalars), inputs, self.registered, dtype)

    def export_dynamic(self, first, second):
        """torch.export with every axis of every input dynamic (Dim.AUTO: export keeps dynamic
        each size the op does not make constant), on a sample of shape `first`: the exported
        module holds the op and serves a sample of shape `second` as eager does (a size the op
        had made constant would fail that call)."""
        if first == second:
            pytest.skip("the spec's axes leave no size free to vary")
        inputs, scalars, dtype = self.sample(shape=first)
        model = self.doubled(scalars)
        auto = torch.export.Dim.AUTO
        dynamic = {"inputs": tuple({axis: auto for axis in range(x.dim())} for x in inputs)}
        exported = torch.export.export(as_module(model), tuple(inputs), dynamic_shapes=dynamic)
        targets = [node.target for node in exported.graph.nodes if node.op == "call_function"]
        assert self.registered in targets, targets
        other, _, _ = self.sample(seed=1, shape=second)
        assert_same_results(exported.module()(*other), model(*other), dtype, "exported, at another size, against eager")

    def compiles_dynamic(self, first, second, backward):
        """torch.compile(dynamic=True, fullgraph=True) of a model calling the op: samples of
        shapes `first` and `second` run on one graph (a recompile fails the test) and give eager's
        results, and with `backward` eager's gradients."""
        import torch._dynamo

        if first == second:
            pytest.skip("the spec's axes leave no size free to vary")
        torch._dynamo.reset()
        compiled = None
        with torch._dynamo.config.patch(error_on_recompile=True):
            for seed, shape in enumerate((first, second)):
                inputs, scalars, dtype = self.sample(seed=seed, shape=shape)
                model = self.doubled(scalars)
                if compiled is None:
                    compiled = torch.compile(model, dynamic=True, fullgraph=True, backend=COMPILE_BACKEND)
                grads = backward and self.records and any(x.is_floating_point() for x in inputs)
                eager_leaves, compiled_leaves = (self.leaves(inputs), self.leaves(inputs)) if grads else (inputs, inputs)
                got, want = compiled(*compiled_leaves), model(*eager_leaves)
                assert_same_results(tuple(g.detach() for g in got), tuple(w.detach() for w in want), dtype,
                                    f"compiled with dynamic shapes at {shape} against eager")
                if grads:
                    sum(r.float().square().sum() for r in got).backward()
                    sum(r.float().square().sum() for r in want).backward()
                    assert_same_gradients([t.grad for t in compiled_leaves if t.is_floating_point()],
                                          [e.grad for e in eager_leaves if e.is_floating_point()], dtype,
                                          f"compiled backward with dynamic shapes at {shape} against eager")

    def cuda_graph_replay(self):
        inputs, scalars, dtype = self.sample()
        fresh, _, _ = self.sample(seed=5)
        check_cuda_graph_replay(self.doubled(scalars), inputs, fresh, dtype)

    # ---- autograd: the backward derived from the spec -------------------------------------------

    def leaves(self, inputs):
        """Copies of `inputs` (same values and layout) that require grad: the float ones."""
        return [x.detach().requires_grad_() if x.is_floating_point() else x for x in inputs]

    def differentiable(self, inputs):
        """Skip the test unless some input holds floats (int and bool inputs carry no gradient)."""
        if not any(x.is_floating_point() for x in inputs):
            pytest.skip("no input holds floats: nothing to differentiate")

    def recording(self, inputs):
        """Skip the test unless some output records a graph: a loss on the op has a gradient."""
        self.differentiable(inputs)
        if not self.records:
            pytest.skip("every float output reads the inputs only through detach() or a comparison: "
                        "no loss on the op has a gradient")

    def requires_grad_follows_the_inputs(self):
        """With one float input at a time requiring grad, each float output requires grad exactly
        where the oracle's does (where it reads that input other than through detach() or a
        comparison)."""
        inputs, scalars, _ = self.sample()
        self.differentiable(inputs)
        for index, name in enumerate(self.input_names):
            if not inputs[index].is_floating_point():
                continue
            given = [x.detach().requires_grad_() if i == index else x for i, x in enumerate(inputs)]
            outs = as_tuple(self.wrapper(*given, **scalars))
            got = [o.requires_grad for o in outs if o.is_floating_point()]
            oracle = [exact(x.detach()).requires_grad_() if i == index else exact(x) for i, x in enumerate(inputs)]
            want = [o.requires_grad for o, mine in zip(as_tuple(self.reference(*oracle, **scalars)), outs)
                    if mine.is_floating_point()]
            assert got == want, (f"{self.qualname}: with '{name}' requiring grad, outputs requiring grad {got}, "
                                 f"the oracle's {want}")

    def gradients_match(self, inputs, scalars, key, seed=0, seed_layout="contiguous", requiring=None,
                        through="autograd"):
        """The op's gradients against PyTorch's autograd of the float64 oracle, for random output
        gradients in `seed_layout` (a loss's incoming gradient is often strided: .sum()'s is
        expanded): every float input (those at the positions `requiring` alone, the others taken
        as constants: a frozen weight), in the inputs' own layouts (non-contiguous, expanded),
        taken `through` torch.autograd, or torch.func ("vjp", "vmapped vjp": transformed). An
        input broadcast in the op's math (a weight over rows, a per-row value along its row, a
        0-d scale) has a gradient that sums many terms, each with its own rounding: each element
        is held to the tolerance of its terms' size (terms_sizes), not of the sum's, which may
        cancel to little. Where PyTorch's own float32 math of the oracle strays further
        (float32_slack), so may the op."""
        self.differentiable(inputs)
        float_positions = [i for i, x in enumerate(inputs) if x.is_floating_point()]
        chosen = [i for i in float_positions if requiring is None or i in requiring]
        leaves = [x.detach().requires_grad_() if i in chosen else x for i, x in enumerate(inputs)]
        got_outs = as_tuple(self.wrapper(*leaves, **scalars))
        seeds = [with_layout(lambda physical, o=o, i=i: random(physical, o.dtype, seed + 100 + i), o.shape, seed_layout)
                 for i, o in enumerate(got_outs)]
        floats = [leaves[i] for i in chosen]
        float_outs = [o for o in got_outs if o.is_floating_point()]
        seeds = [seed for seed, o in zip(seeds, got_outs) if o.is_floating_point()]
        float_outputs = [g.is_floating_point() for g in got_outs]
        exact_seeds = [g.cpu().double() for g in seeds]
        exact_floats, want, recorded = self.oracle_leaf_gradients(inputs, scalars, self.reference, float_outputs,
                                                                  exact_seeds)
        # An output that reads no input but through detach() or a comparison records no graph, as
        # the oracle's does not: it does not require grad, and gets no gradient.
        # (with some inputs constant, an output may record from none that requires grad:
        # requires_grad_follows_the_inputs holds those to the oracle's)
        got_recorded = [o.requires_grad for o in float_outs]
        assert requiring is not None or got_recorded == recorded, \
            f"{self.qualname}: outputs requiring grad {got_recorded}, the oracle's {recorded}"
        if through == "autograd":
            taken = [recorded_gradients(float_outs, floats, seeds)]
        else:
            recording = [o.is_floating_point() and o.requires_grad for o in got_outs]
            taken = self.transformed(leaves, chosen, scalars, recording,
                                     [g for g, o in zip(seeds, float_outs) if o.requires_grad], through)
        sizes = self.terms_sizes(inputs, scalars, self.reference, float_outputs, exact_seeds)
        slack = self.float32_slack(inputs, scalars, self.reference, float_outputs, exact_seeds, want)
        for (i, g) in ((i, g) for got in taken for i, g in zip(chosen, got)):
            name, x = self.input_names[i], inputs[i]
            w, e = want[float_positions.index(i)], exact_floats[float_positions.index(i)]
            if g is None:
                # No gradient reaches it (the oracle's is None, or zeros: x * 0 records a graph).
                assert w is None or not w.any(), f"{self.qualname}: no gradient for '{name}'"
                continue
            assert g.shape == x.shape and g.dtype == x.dtype, (name, g.shape, g.dtype)
            # Relative to the gradient's size: a matmul's gradients sum over a whole axis.
            tolerance = gradient_key(key, x.dtype)  # (before the comparison's upcast to float64)
            assert_same_gradients([g.detach().cpu().double()], [torch.zeros_like(e) if w is None else held_by(w, x.dtype, g)], tolerance,
                                  f"{self.qualname}: gradient of '{name}' ({tolerance})", [sizes.get(name)],
                                  [slack.get(name)])

    def transformed(self, leaves, chosen, scalars, recording, seeds, through):
        """The gradients of the inputs at `chosen` by torch.func.vjp of the op's outputs that
        `recording` marks, for their `seeds`: one list, or with "vmapped vjp" two, from the vjp
        function under torch.vmap (jacrev's way) for the seeds and their negatives (exact, where
        twice them could overflow a half gradient), the second negated back: each sample must get
        its own seeds' gradients."""
        of_chosen = taking(self.wrapper, leaves, chosen, scalars)

        def op(*floats):
            return tuple(o for o, r in zip(of_chosen(*floats), recording) if r)

        if not any(recording):  # (no output depends on an input: no gradient, as the oracle's)
            return [[None] * len(chosen)]
        _, vjp = torch.func.vjp(op, *(leaves[i].detach() for i in chosen))
        if through == "vjp":
            return [vjp(tuple(seeds))]
        both = torch.func.vmap(vjp)(tuple(torch.stack([g, -g]) for g in seeds))
        return [[g[0] for g in both], [-g[1] for g in both]]

    def each_gradient_alone_matches(self, inputs, scalars, key, through="autograd"):
        """With one float input at a time requiring grad (the others constants, as a frozen weight
        is), its gradient against the oracle's (gradients_match, `through` as there): the backward
        computes that one alone (the gradients asked for), never another's in its place."""
        self.differentiable(inputs)
        for index, x in enumerate(inputs):
            if x.is_floating_point():
                self.gradients_match(inputs, scalars, key, requiring=(index,), through=through)

    @staticmethod
    def oracle_leaf_gradients(inputs, scalars, reference, float_outputs, seeds):
        """(the oracle's float inputs, their gradients, which float outputs require grad) for the
        float outputs' incoming `seeds`, computed in the oracle's float dtype (oracle_in)."""
        oracle = [exact(x.detach()).requires_grad_() if x.is_floating_point() else exact(x) for x in inputs]
        outs = [o for o, f in zip(as_tuple(reference(*oracle, **scalars)), float_outputs) if f]
        floats = [e for e in oracle if e.is_floating_point()]
        return floats, recorded_gradients(outs, floats, seeds), [o.requires_grad for o in outs]

    def terms_sizes(self, inputs, scalars, reference, float_outputs, seeds):
        """{input name: the size (norm) of the terms each element of its gradient sums}, for each
        float input broadcast in the op's math: given at the terms' shape (term_roles), the
        oracle's gradient of it is every term apart. A "row" input (one value per row of the
        terms: a matmul's [M], a reduction's per-row value) is given along its row, as the
        oracle's `whole` says; a "fixed" one (a weight PyTorch's reference takes at its shape
        only) is not."""
        roles = self.term_roles
        lined_up = {"a": lambda x: (*x.shape[:-1], 1), "b": lambda x: (*x.shape[:-2], 1, x.shape[-1]),
                    "row": lambda x: (*x.shape, 1), "element": lambda x: tuple(x.shape)}
        full = torch.broadcast_shapes(*(lined_up[role](x) for x, role in zip(inputs, roles) if role in lined_up))
        sizes = {}
        for index, (x, role) in enumerate(zip(inputs, roles)):
            shape = (*full[:-2], *x.shape[-2:]) if role in ("a", "b") else full  # (operands: their batch)
            if role == "fixed" or not x.is_floating_point() or tuple(x.shape) == tuple(shape):
                continue
            terms = [exact(t.detach()) for t in inputs]
            given = terms[index][..., None] if role == "row" else terms[index]
            terms[index] = given.expand(shape).clone().requires_grad_()
            whole = {"whole": (self.input_names[index],)} if role == "row" else {}
            outs = [o for o, f in zip(as_tuple(reference(*terms, **whole, **scalars)), float_outputs) if f]
            if [o.shape for o in outs] != [g.shape for g in seeds]:
                continue  # (a per-row value read per row too, by an output of one value per row: no terms)
            each = recorded_gradients(outs, [terms[index]], seeds)[0]
            if each is not None:
                squares = each.square().sum(-1) if role == "row" else each.square()
                sizes[self.input_names[index]] = squares.sum_to_size(x.shape).sqrt()
        return sizes

    def float32_slack(self, inputs, scalars, reference, float_outputs, seeds, want):
        """{input name: twice the distance of the oracle's gradient computed in float32 from the
        float64 one}, element by element: at an ill-conditioned point (a sum that cancels, a
        divisor near zero: a temperature's gradient sums terms scaled by 1/t^2) any float32
        computation of the op loses digits, PyTorch's own too, and the gradient is held to no more
        than that. For float64 ops, float64_allowances (none where their math is float64 throughout)."""
        names = [n for n, x in zip(self.input_names, inputs) if x.is_floating_point()]
        errors = allowances(
            lambda: self.oracle_leaf_gradients(inputs, scalars, reference, float_outputs, [g.float() for g in seeds])[1],
            want, reference, inputs, scalars)
        return {name: error for name, error in zip(names, errors) if error is not None}

    def second_derivatives_match(self, inputs, scalars, key, frozen=None):
        """Gradients asked for with create_graph=True (a gradient penalty, a Hessian-vector product)
        differentiated again: for random incoming gradients and random directions, the derivative
        of the gradients' product with the directions, by every float input and by the incoming
        gradients, against PyTorch's autograd, twice, of the float64 oracle. `frozen`: the name of
        a float input that requires no grad (a frozen weight: the op may keep its shape alone, or
        another input's), a constant of both."""
        self.recording(inputs)
        outs = as_tuple(self.wrapper(*inputs, **scalars))
        # The op's float outputs, and the oracle's at the same places (its int math may be float64).
        float_outputs = [o.is_floating_point() for o in outs]
        seeds = [random(o.shape, o.dtype, 300 + i) for i, o in enumerate(outs) if o.is_floating_point()]
        asked = [x.is_floating_point() and name != frozen for name, x in zip(self.input_names, inputs)]
        if frozen is not None:
            assert not all(asked) and any(asked), f"{frozen!r} is not one of two float inputs or more"
        # Directions of each input's dtype (its gradient's): the op's product with them is then
        # the oracle's, not one with directions rounded to float16, whose error of 5e-4 each a
        # sum of large terms that cancel magnifies.
        directions = [random(x.shape, x.dtype, 400 + i) for i, (x, a) in enumerate(zip(inputs, asked)) if a]

        def products(fn, given):
            return self._gradient_products(fn, inputs, scalars, float_outputs, seeds, directions, given, asked)

        got = products(self.wrapper, lambda t: t.detach())
        want = products(self.reference, exact)
        # Beyond what float32 math of the same derivatives strays (as float32_slack).
        slack = allowances(lambda: products(self.reference, exact), want, self.reference, inputs, scalars)
        names = [n for n, a in zip(self.input_names, asked) if a]
        names += [f"the incoming gradient of output {i}" for i in range(len(seeds))]
        # (What each derivative comes back as: its input's dtype, its incoming gradient's.)
        dtypes = [x.dtype for x, a in zip(inputs, asked) if a] + [g.dtype for g in seeds]
        for name, g, w, dtype, allowed in zip(names, got, want, dtypes, slack, strict=True):
            w = w if w is None else held_by(w, dtype, g)
            # Held to float32's tolerance at least, and to that of the dtype it comes back in where
            # that is coarser (a float16 input of an op whose first input is a bool).
            tolerance = gradient_key(gradient_key(key, torch.float32), dtype)
            assert_same_gradients([None if g is None else g.detach().cpu().double()], [w], tolerance,
                                  f"{self.qualname}: second derivative through {name}", slack=[allowed])

    def second_derivative_refused(self, inputs, scalars):
        """A backward asked for gradients with create_graph=True raises, naming the op, where its
        gradients are a kernel's alone (they would carry no history)."""
        self.recording(inputs)
        leaves = self.leaves(inputs)
        outs = [o for o in as_tuple(self.wrapper(*leaves, **scalars)) if o.requires_grad]
        op = self.qualname.split("::")[1]
        with pytest.raises(RuntimeError, match=f"{op}: a second derivative is not derived for this op"):
            # (allow_unused: an input read only through detach() has no gradient, which autograd
            # would refuse before the op's backward runs)
            torch.autograd.grad(sum(o.sum() for o in outs), [x for x in leaves if x.requires_grad], create_graph=True,
                                allow_unused=True)

    def tangents_match(self, inputs, scalars, key, seed=0):
        """torch.func.jvp of the op (forward mode: its tangents transpose the derived backward's
        math) against the jvp of the float64 oracle, for random tangents of every float input:
        each float output's tangent, to the gradients' tolerance (relative to its size), beyond
        what float32 math of the same tangents strays (as float32_slack)."""
        self.recording(inputs)
        floats = [i for i, x in enumerate(inputs) if x.is_floating_point()]
        tangents = [random(inputs[i].shape, inputs[i].dtype, seed + 500 + i) for i in floats]

        def of_floats(fn, given):
            of_chosen = taking(fn, given, floats, scalars)
            return lambda *xs: tuple(o for o in of_chosen(*xs) if o.is_floating_point())

        def oracle_tangents():
            oracle = [exact(x) for x in inputs]
            return torch.func.jvp(of_floats(self.reference, oracle), tuple(oracle[i] for i in floats),
                                  tuple(exact(t) for t in tangents))[1]

        _, got = torch.func.jvp(of_floats(self.wrapper, inputs), tuple(inputs[i] for i in floats), tuple(tangents))
        want = oracle_tangents()
        slack = allowances(oracle_tangents, want, self.reference, inputs, scalars)
        for index, (g, w, allowed) in enumerate(zip(got, want, slack, strict=True)):
            tolerance = gradient_key(key, g.dtype)
            assert_same_gradients([g.cpu().double()], [held_by(w, g.dtype, g)], tolerance,
                                  f"{self.qualname}: the tangent of float output {index} ({tolerance})", slack=[allowed])

    def transformed_gradients_refused(self, inputs, scalars):
        """torch.func.vjp's gradients and jvp's tangents raise, naming the op, where its backward
        has no math in PyTorch's ops (what it runs under torch.func's transforms)."""
        self.recording(inputs)
        op = self.qualname.split("::")[1]
        outs = as_tuple(self.wrapper(*self.leaves(inputs), **scalars))
        recording = [o.requires_grad for o in outs]
        chosen = [i for i, x in enumerate(inputs) if x.is_floating_point()]
        seeds = [torch.ones_like(o) for o, r in zip(outs, recording) if r]
        with pytest.raises(RuntimeError, match=f"{op}: torch.func's grad, vjp and jacrev are not derived for this op"):
            self.transformed(inputs, chosen, scalars, recording, seeds, "vjp")
        with pytest.raises(RuntimeError, match=f"{op}: forward mode .* is not derived for this op"):
            torch.func.jvp(taking(self.wrapper, inputs, chosen, scalars), tuple(inputs[i] for i in chosen),
                           tuple(torch.zeros_like(inputs[i]) for i in chosen))

    @staticmethod
    def _gradient_products(fn, inputs, scalars, float_outputs, seeds, directions, given, asked):
        """The derivatives of sum(gradient * direction) over `fn`'s float inputs that `asked` marks
        (their gradients taken with create_graph=True for the incoming `seeds` of the outputs
        `float_outputs` marks), by those inputs and by the seeds, each as `given` makes it (the
        op's own, or the oracle's exact); zeros where none depends on one."""
        leaves = [given(x).requires_grad_(a) for x, a in zip(inputs, asked)]
        floats = [x for x in leaves if x.requires_grad]
        seeds = [given(g).requires_grad_() for g in seeds]
        outs = [o for o, f in zip(as_tuple(fn(*leaves, **scalars)), float_outputs) if f]
        pairs = [(o, g) for o, g in zip(outs, seeds) if o.requires_grad]  # (none: every output reads frozen inputs)
        grads = torch.autograd.grad([o for o, _ in pairs], floats, [g for _, g in pairs], create_graph=True,
                                    allow_unused=True) if pairs else [None] * len(floats)
        total = sum((g * d.to(g.dtype).to(g.device)).sum() for g, d in zip(grads, directions) if g is not None)
        wrt = floats + seeds
        products = (torch.autograd.grad(total, wrt, allow_unused=True) if isinstance(total, torch.Tensor)
                    and total.requires_grad else [None] * len(wrt))
        return [torch.zeros(x.shape, dtype=torch.float64) if p is None else p.detach().cpu().double()
                for p, x in zip(products, wrt)]

    def gradcheck(self, inputs, scalars):
        """torch.autograd.gradcheck in float64: the derived backward against finite differences."""
        # Only float64 inputs are perturbed: finite differences of a float32 one (an input whose
        # spec allows float32 alone) would measure its rounding; its gradient is checked against
        # the oracle's by gradients_match.
        leaves = [x.detach().requires_grad_() if x.dtype == torch.float64 else x for x in inputs]

        def float64_outputs(*xs):
            # gradcheck compares in float64 (a saved statistic may be float32), and pairs its finite
            # differences of every output it is given with the analytical gradients of those that
            # require grad: an output that records no graph (`where(m, lo, hi)`, `detach(x) * 2`)
            # ahead of one that does would pair the wrong two.
            # An element that is not finite (a masked log-softmax's -inf) stays so under the
            # perturbations, and its finite differences would be inf - inf: it is held at 0, and
            # its gradient checked where it is finite.
            return tuple(r.masked_fill(~torch.isfinite(r.detach()), 0.0) for r in as_tuple(self.wrapper(*xs, **scalars))
                         if r.dtype == torch.float64 and r.requires_grad)

        assert torch.autograd.gradcheck(float64_outputs, leaves, fast_mode=True)

    def opcheck_with_grad(self):
        """opcheck on inputs that require grad, so that its autograd checks run."""
        inputs, scalars, key = self.sample()
        args = (*self.leaves(inputs), *scalars.values())
        if all(o.is_floating_point() for o in as_tuple(self.wrapper(*inputs, **scalars))):
            opcheck(self.registered, args, key)
        else:
            opcheck(self.registered, args, key, test_utils=OPCHECK_UTILS_WITHOUT_AOT)
        training = self.training()
        if training is not None:
            opcheck(training, (*self.leaves(inputs), *scalars.values()), key)

    def training(self):
        """The op's training variant (a matmul whose epilogue's gradient reads the accumulator:
        it also returns the accumulator, kept for the backward), or None."""
        namespace, name = self.qualname.split("::")
        variant = getattr(getattr(torch.ops, namespace), f"{name}_training", None)
        return None if variant is None else variant.default

    def backward_compiles_whole(self):
        """A model calling the op, compiled with fullgraph=True: its backward (compiled by AOT
        autograd) gives eager's gradients."""
        inputs, scalars, dtype = self.sample()
        self.recording(inputs)
        model = self.doubled(scalars)
        eager_leaves, compiled_leaves = self.leaves(inputs), self.leaves(inputs)
        compiled = compiled_afresh(model)
        sum(r.float().square().sum() for r in compiled(*compiled_leaves)).backward()
        sum(r.float().square().sum() for r in model(*eager_leaves)).backward()
        assert_same_gradients([t.grad for t in compiled_leaves], [e.grad for e in eager_leaves], dtype,
                              "compiled backward against eager")

    def each_backward_alone_compiles_whole(self):
        """backward_compiles_whole with one float input at a time requiring grad (the others
        frozen): what the traced formula keeps for the call (an input only some gradients read
        kept as its shape alone) and the gradients it computes, against eager's."""
        inputs, scalars, dtype = self.sample()
        self.recording(inputs)
        model = self.doubled(scalars)
        for index, name in enumerate(self.input_names):
            if not inputs[index].is_floating_point():
                continue
            eager_leaves, compiled_leaves = ([x.detach().requires_grad_() if i == index else x for i, x in enumerate(inputs)]
                                             for _ in range(2))
            eager = [r for r in model(*eager_leaves) if r.requires_grad]
            if not eager:
                continue  # (no output records a graph from this input: requires_grad_follows_the_inputs)
            compiled = compiled_afresh(model)
            sum(r.float().square().sum() for r in compiled(*compiled_leaves) if r.requires_grad).backward()
            sum(r.float().square().sum() for r in eager).backward()
            assert_same_gradients([compiled_leaves[index].grad], [eager_leaves[index].grad], dtype,
                                  f"compiled backward against eager, '{name}' alone requiring grad")

    def export_backward(self):
        """torch.export of a model calling the op (inputs that require grad): the exported module
        holds the op, and its backward gives eager's gradients."""
        inputs, scalars, dtype = self.sample()
        self.recording(inputs)
        model = self.doubled(scalars)
        exported = torch.export.export(as_module(model), tuple(self.leaves(inputs)))
        targets = [node.target for node in exported.graph.nodes if node.op == "call_function"]
        # Recorded for autograd, a matmul whose epilogue's gradient reads the accumulator is its
        # training variant (which keeps the accumulator for the backward).
        accepted = [self.registered, self.training()]
        assert any(op in targets for op in accepted), targets
        eager_leaves, exported_leaves = self.leaves(inputs), self.leaves(inputs)
        sum(r.float().sum() for r in exported.module()(*exported_leaves)).backward()
        sum(r.float().sum() for r in model(*eager_leaves)).backward()
        assert_same_gradients([t.grad for t in exported_leaves], [e.grad for e in eager_leaves], dtype,
                              "exported backward against eager")

    def out_is_refused_with_grad(self):
        inputs, scalars, dtype = self.sample()
        self.differentiable(inputs)
        leaves = self.leaves(inputs)
        with torch.no_grad():
            want = self.wrapper(*inputs, **scalars)
        out = tuple(torch.empty_like(w) for w in as_tuple(want))
        op = self.qualname.split("::")[1]
        with pytest.raises(RuntimeError, match=f"{op}: out= does not support automatic differentiation"):
            self.wrapper(*leaves, **scalars, out=out if len(out) > 1 else out[0])
        with torch.no_grad():  # no graph to record: out= is fine
            self.wrapper(*leaves, **scalars, out=out if len(out) > 1 else out[0])
            assert_same_results(out if len(out) > 1 else out[0], want, dtype, "out= under no_grad")
