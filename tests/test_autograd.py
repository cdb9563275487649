"""Derived backwards of ops that specs/ does not hold, built and run in the interpreter: epilogue
inputs of every shape ([M, N], [M], [N]), a gradient shared by two inputs, an input whose
gradient is the incoming one, and several outputs."""

from __future__ import annotations

import importlib
import os
import re

import pytest
import torch

from tests.conftest import REPO, assert_generated_tests_pass, built_package, run_in_threads

pytestmark = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET", "0") in ("", "0") and not torch.cuda.is_available(),
    reason="needs a CUDA GPU, or TRITON_INTERPRET=1")

MATMUL = """
op: mm_mix
kind: matmul
doc: C = gelu(A @ B + r) * s + bias, and D = A @ B + r
inputs:
  a: {shape: [M, K], dtype: [float32]}
  b: {shape: [K, N], dtype: a}
  r: {shape: [M, N], dtype: a}
  s: {shape: [M], dtype: a}
  bias: {shape: [N], dtype: a}
outputs:
  c: {shape: [M, N], dtype: a}
  d: {shape: [M, N], dtype: a}
dtypes: {precision: ieee}
tiles:
  M: {block: BM, sizes: [32, 64]}
  N: {block: BN, sizes: [32, 64]}
  K: {block: BK, sizes: [32]}
masks: {M: always, N: always, K: auto}
epilogue:
  c: gelu(acc + r) * s + bias
  d: acc + r
"""

ELEMENTWISE = """
op: ew_mix
kind: elementwise
doc: y = a + b * exp(a), z = a - c
inputs:
  a: {dtype: [float32, float64]}
  b: {dtype: a}
  c: {dtype: a}
outputs:
  y: {dtype: a}
  z: {dtype: a}
compute:
  y: a + b * exp(a)
  z: a - c
tiles:
  N: {block: BLOCK, sizes: [256]}
masks:
  N: auto
"""


FLAGGED = """
op: ew_flag
kind: elementwise
doc: y = x * x, and where x is positive (a bool output)
inputs:
  x: {dtype: [float32, float64]}
outputs:
  y: {dtype: x}
  positive: {dtype: [bool]}
compute:
  y: x * x
  positive: x > 0
tiles:
  N: {block: BLOCK, sizes: [256]}
masks:
  N: auto
"""


PLAIN = """
op: ew_plain
kind: elementwise
doc: y = x * w, with two float outputs that read x only through a comparison or detach()
inputs:
  x: {dtype: [float32, float64]}
  w: {dtype: x}
outputs:
  y: {dtype: x}
  step: {dtype: x}
  frozen: {dtype: x}
compute:
  y: x * w
  step: where(x > 0, 1.0, 0.0)
  frozen: detach(x) * 2.0 + w * 0.0
tiles:
  N: {block: BLOCK, sizes: [256]}
masks:
  N: auto
"""


GATED = """
op: mm_gate
kind: matmul
doc: C = r * bias where A @ B > 0, else 0 (the product decides; no gradient flows through it)
inputs:
  a: {shape: [M, K], dtype: [float32]}
  b: {shape: [K, N], dtype: a}
  bias: {shape: [N], dtype: a}
  r: {shape: [M, N], dtype: a}
outputs:
  c: {shape: [M, N], dtype: a}
tiles:
  M: {block: BM, sizes: [32]}
  N: {block: BN, sizes: [32]}
  K: {block: BK, sizes: [32]}
epilogue:
  c: where(acc > 0, r * bias, 0.0)
"""


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    specs = {"mm_mix.yaml": MATMUL, "ew_mix.yaml": ELEMENTWISE, "ew_flag.yaml": FLAGGED, "ew_plain.yaml": PLAIN,
             "mm_gate.yaml": GATED}
    with built_package(tmp_path_factory.mktemp("autograd"), "autograd_ops", specs) as module:
        yield module


def _device():
    return "cuda" if torch.cuda.is_available() else "cpu"


def _gradients(fn, inputs, seeds):
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    outputs = fn(*leaves)
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    return torch.autograd.grad(outputs, leaves, seeds)


def test_matmul_epilogue_inputs_of_every_shape_get_their_gradients(package):
    g = torch.Generator().manual_seed(0)
    M, N, K = 37, 29, 45
    inputs = [torch.randn(*shape, generator=g, dtype=torch.float64).to(_device(), torch.float32)
              for shape in [(M, K), (K, N), (M, N), (M,), (N,)]]
    seeds = [torch.randn(M, N, generator=g).to(_device()) for _ in range(2)]

    def oracle(a, b, r, s, bias):
        acc = a.double() @ b.double()
        return (torch.nn.functional.gelu(acc + r.double()) * s.double()[:, None] + bias.double(),
                acc + r.double())

    got = _gradients(package.mm_mix, inputs, seeds)
    want = _gradients(oracle, inputs, [t.double() for t in seeds])
    for name, x, y in zip("a b r s bias".split(), got, want):
        torch.testing.assert_close(x.double(), y.double(), rtol=1e-4, atol=1e-4, msg=lambda m: f"d/d{name}: {m}")
    torch.library.opcheck(torch.ops.autograd_ops.mm_mix.default, [t.requires_grad_() for t in inputs])


def test_elementwise_outputs_add_their_gradients_and_pass_the_incoming_one(package):
    g = torch.Generator().manual_seed(1)
    inputs = [torch.randn(7, 11, generator=g, dtype=torch.float64).to(_device()) for _ in range(3)]
    assert torch.autograd.gradcheck(package.ew_mix, [t.clone().requires_grad_() for t in inputs])
    source = open(importlib.import_module("autograd_ops.ew_mix").__file__).read()
    # d/da sums both outputs' shares; d/dc of z = a - c is minus the incoming gradient: computed too.
    assert "_d_a = " in source and "_d_c = -_g_z" in source


@pytest.mark.parametrize("used", [0, 1])
@pytest.mark.parametrize("op", ["ew_mix", "mm_mix"])
def test_a_loss_through_one_output_of_several_gets_the_others_as_zeros(package, op, used):
    # The output no loss reads gets no gradient: autograd makes it zeros where every output is a
    # result (ew_mix), the formula makes it where the op also keeps an accumulator for the
    # backward (mm_mix, in its training variant). Either way the gradients are those of the loss.
    g = torch.Generator().manual_seed(2)
    shapes = [(7, 11)] * 3 if op == "ew_mix" else [(37, 45), (45, 29), (37, 29), (37,), (29,)]
    inputs = [torch.randn(*shape, generator=g, dtype=torch.float64).to(_device(), torch.float32) for shape in shapes]
    fn = getattr(package, op)
    leaves = [t.clone().requires_grad_() for t in inputs]
    seed = torch.randn(shapes[2] if op == "mm_mix" else shapes[0], generator=g).to(_device())
    got = torch.autograd.grad(fn(*leaves)[used], leaves, seed, allow_unused=True)
    zero = torch.zeros_like(seed)
    want = _gradients(fn, inputs, [seed, zero] if used == 0 else [zero, seed])
    for x, y in zip(got, want):
        if x is None:  # (an input the used output does not depend on)
            assert not y.any()
            continue
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-5)


@pytest.fixture(params=["node", "function"])
def through(request, monkeypatch):
    """Eager training calls record the C++ node, then torch.autograd.Function's node."""
    _use_node(monkeypatch, _built_node() if request.param == "node" else None)
    return request.param


# Float64 inputs beside a float32 output: `w`'s incoming gradient is the bias's as it is, and `h`'s
# is x's, summed over the rows they were broadcast along. A sum in the gradient's float32 lost
# float64's digits (1e-6 off).
NARROWER_OUTPUTS = {"narrower_sum.yaml": """
op: narrower_sum
kind: elementwise
doc: y = exp(x), and w = x + bias in float32
inputs:
  x: {dtype: [float32, float64], shape: [..., N]}
  bias: {dtype: x, shape: [N]}
outputs:
  y: {dtype: x}
  w: {dtype: [float32]}
compute:
  y: exp(x)
  w: x + bias
tiles:
  N: {block: BLOCK, sizes: [256]}
""", "narrower_rows.yaml": """
op: narrower_rows
kind: reduction
doc: h = x + r in float32, and y = r * rsqrt(mean(r * r) + 1e-6)
inputs:
  x: {dtype: [float32, float64], shape: [..., N]}
  r: {dtype: x, shape: [..., N]}
outputs:
  h: {dtype: [float32], shape: [..., N]}
  y: {dtype: x, shape: [..., N]}
steps:
  v: mean(r * r)
compute:
  h: x + r
  y: r * rsqrt(v + 1.0e-6)
tiles:
  N: {block: BLOCK_N, sizes: [64]}
"""}


def test_a_broadcast_inputs_gradient_is_summed_in_its_own_precision(tmp_path, through):
    with built_package(tmp_path, "narrower_ops", NARROWER_OUTPUTS) as package:
        x, bias = _leaves((300, 100), (100,))
        seed = torch.randn(300, 100, generator=torch.Generator().manual_seed(5)).to(_device())  # (float32)
        _, w = package.narrower_sum(x, bias)
        (got,) = torch.autograd.grad(w, bias, seed)
        torch.testing.assert_close(got, seed.double().sum(0), rtol=1e-12, atol=1e-12)
        row, r = _leaves((1, 100), (300, 100))
        h, _ = package.narrower_rows(row, r)
        (got,) = torch.autograd.grad(h, row, seed)
        torch.testing.assert_close(got, seed.double().sum(0, keepdim=True), rtol=1e-12, atol=1e-12)


def test_an_eager_matmul_backward_frees_the_kept_accumulator_before_its_products(through, monkeypatch):
    # matmul_bias_gelu's gelu needs the accumulator: its training variant keeps it. An eager
    # backward runs in two phases (rt.Gradients.phases) and drops the kept accumulator after the
    # first, so the products (dA, dB) allocate theirs without it, as eager PyTorch frees a
    # pre-activation once its activation's backward ran. The gradients are those of the one-call
    # backward, which a traced graph runs.
    import weakref

    from generated import matmul_bias_gelu
    from tilegen.runtime.library import formula_of

    module = importlib.import_module("generated.matmul_bias_gelu")
    formula = formula_of(module._matmul_bias_gelu_training)
    first, rest = formula.phases
    seen = {}

    def watched_first(*args):
        seen["acc"] = weakref.ref(args[len(formula.saved)])  # the saved inputs, then the accumulator
        return first(*args)

    def watched_rest(*args):
        seen["alive"] = seen["acc"]() is not None
        return rest(*args)

    g = torch.Generator().manual_seed(1)
    M, N, K = 37, 29, 45
    inputs = [torch.randn(*shape, generator=g).to(_device()) for shape in [(M, K), (K, N), (N,)]]
    seeds = [torch.randn(M, N, generator=g).to(_device())]
    monkeypatch.setattr(formula, "phases", None)
    want = _gradients(matmul_bias_gelu, inputs, seeds)
    monkeypatch.setattr(formula, "phases", (watched_first, watched_rest))
    got = _gradients(matmul_bias_gelu, inputs, seeds)
    assert seen["alive"] is False
    assert ("_EagerAutograd" in type(matmul_bias_gelu(*[t.requires_grad_() for t in inputs]).grad_fn).__name__) == (
        through == "function")
    for x, y in zip(got, want):
        torch.testing.assert_close(x, y)


def test_a_matmul_backward_that_frees_its_accumulator_runs_again_with_retain_graph(through):
    # The kept accumulator is dropped midway through a backward, unless the graph is kept for
    # another: the second backward then finds it again, and gives the same gradients.
    module = importlib.import_module("generated.matmul_bias_gelu")
    a, b, bias = _leaves((16, 32), (32, 24), (24,), dtype=torch.float32)
    y = module.matmul_bias_gelu(a, b, bias)
    first = torch.autograd.grad(y.sum(), (a, b, bias), retain_graph=True)
    second = torch.autograd.grad(y.sum(), (a, b, bias))
    for p, q in zip(first, second):
        torch.testing.assert_close(p, q)


def test_a_matmul_backward_sums_broadcast_gradients_before_its_products(through, monkeypatch):
    # A bias [N]'s gradient is a column sum of dZ, whose reduction may take a workspace as large
    # as dZ (PyTorch's does, in float32): run before the products, it comes and goes before dA
    # and dB exist, and the step's peak stays at eager autograd's, which sums first too.
    from generated import matmul_bias_gelu

    module = importlib.import_module("generated.matmul_bias_gelu")
    order = []
    product, summed = module._OP.product, torch.Tensor.sum

    def watched_product(*args):
        order.append("product")
        return product(*args)

    def watched_sum(self, *args, **kwargs):
        order.append("sum")
        return summed(self, *args, **kwargs)

    monkeypatch.setattr(module._OP, "product", watched_product)
    monkeypatch.setattr(torch.Tensor, "sum", watched_sum)
    g = torch.Generator().manual_seed(2)
    inputs = [torch.randn(*shape, generator=g).to(_device()) for shape in [(33, 21), (21, 17), (17,)]]
    _gradients(matmul_bias_gelu, inputs, [torch.randn(33, 17, generator=g).to(_device())])
    assert order == ["sum", "product", "product"]


@pytest.mark.parametrize("needs", [(False, True, True), (True, False, False), (False, False, True)])
def test_a_matmul_backward_runs_only_the_products_of_gradients_asked_for(through, monkeypatch, needs):
    # The first layer's input, a frozen weight: no product for a gradient no input needs (eager
    # PyTorch's mm backward skips those too: a whole matmul a step), the others as when all are.
    from generated import matmul_bias_gelu

    module = importlib.import_module("generated.matmul_bias_gelu")
    products, product = [], module._OP.product

    def watched(x, y, *args, **kwargs):
        products.append((tuple(x.shape), tuple(y.shape)))
        return product(x, y, *args, **kwargs)

    g = torch.Generator().manual_seed(3)
    M, N, K = 33, 17, 21
    inputs = [torch.randn(*shape, generator=g).to(_device()) for shape in [(M, K), (K, N), (N,)]]
    seed = torch.randn(M, N, generator=g).to(_device())
    every = [t.clone().requires_grad_() for t in inputs]
    want = torch.autograd.grad(matmul_bias_gelu(*every), every, seed)
    monkeypatch.setattr(module._OP, "product", watched)
    asked = [t.clone().requires_grad_(need) for t, need in zip(inputs, needs)]
    got = torch.autograd.grad(matmul_bias_gelu(*asked), [t for t in asked if t.requires_grad], seed)
    assert products == [((M, N), (N, K))] * needs[0] + [((K, M), (M, N))] * needs[1]
    for mine, theirs in zip(got, [w for w, need in zip(want, needs) if need]):
        torch.testing.assert_close(mine, theirs)


def _holders(t):
    """(references to t's TensorImpl, to its storage): what keeps its memory."""
    return t._use_count(), torch._C._storage_Use_Count(t.untyped_storage()._cdata)


@pytest.mark.parametrize("op, shapes, needs", [
    ("matmul_bias_gelu", [(33, 21), (21, 17), (17,)], (True, False, True)),  # a frozen weight: A not kept
    ("matmul_bias_gelu", [(33, 21), (21, 17), (17,)], (False, True, False)),  # a frozen input: B not kept
    ("matmul_bias_gelu", [(33, 21), (21, 17), (17,)], (True, True, True)),
    ("matmul", [(33, 21), (21, 17)], (True, False)),
    ("bmm", [(3, 9, 21), (21, 17)], (True, False)),  # B broadcast over A's batch
    ("bmm", [(3, 9, 21), (3, 21, 17)], (False, True)),
])
@pytest.mark.parametrize("through", ["node", "function", "registered op"])
def test_a_matmul_keeps_an_operand_only_where_the_other_needs_its_gradient(node, through, monkeypatch, op, shapes,
                                                                            needs):
    # dA = dZ @ B^T reads B, dB = A^T @ dZ reads A: with the other operand frozen, eager PyTorch's
    # mm keeps no `self` (or `mat2`), and an activation feeding a frozen weight is freed with its
    # last other reference. The backward still reads its shape; the gradients are as when all are.
    if through == "function":
        _use_node(monkeypatch, None)
    module = importlib.import_module(f"generated.{op}")
    called = getattr(torch.ops.generated, op).default if through == "registered op" else getattr(module, op)
    g = torch.Generator().manual_seed(5)
    inputs = [torch.randn(*shape, generator=g, dtype=torch.float32).to(_device()) for shape in shapes]
    every = [t.clone().requires_grad_() for t in inputs]
    y = called(*every)
    seed = torch.randn(y.shape, generator=g).to(_device())
    want = torch.autograd.grad(y, every, seed)
    leaves = [t.clone().requires_grad_(need) for t, need in zip(inputs, needs)]
    asked = [t * 1.0 for t in leaves]  # (not leaves: a leaf's gradient accumulator holds it too)
    before = [_holders(t) for t in asked[:2]]
    y = called(*asked)
    kept = [_holders(t) != held for t, held in zip(asked[:2], before)]
    # The registered op itself (a traced graph's) recomputes an accumulator gelu reads from both.
    recomputes = through == "registered op" and op == "matmul_bias_gelu"
    assert kept == ([True, True] if recomputes else [needs[1], needs[0]])
    got = torch.autograd.grad(y, [t for t in leaves if t.requires_grad], seed)
    for mine, theirs in zip(got, [w for w, need in zip(want, needs) if need]):
        torch.testing.assert_close(mine, theirs)


@pytest.mark.parametrize("frozen", [None, "a", "b"])
def test_a_matmul_whose_epilogue_gives_the_accumulator_no_gradient_keeps_no_operand(through, package, frozen):
    # Its training variant keeps the accumulator, and the gradients (bias's and r's) read it alone:
    # neither operand's values are kept, whichever of them requires grad. Their gradients in
    # PyTorch's ops (create_graph=True) read the kept accumulator with no history: none flows
    # through a decision, so none is asked of an operand (Function's node keeps none to give).
    g = torch.Generator().manual_seed(3)
    a, b, bias, r = (torch.randn(*shape, generator=g).to(_device()) for shape in ((9, 21), (21, 17), (17,), (9, 17)))
    operands = [a.clone().requires_grad_(frozen != "a"), b.clone().requires_grad_(frozen != "b")]
    bias, r = bias.clone().requires_grad_(), r.clone().requires_grad_()
    asked = [t * 1.0 for t in operands]  # (not leaves: a leaf's gradient accumulator holds it too)
    before = [_holders(t) for t in asked]
    c = package.mm_gate(*asked, bias, r)
    assert [_holders(t) == held for t, held in zip(asked, before)] == [True, True]
    seed = torch.randn(c.shape, generator=g).to(_device())
    d_bias, d_r = torch.autograd.grad(c, (bias, r), seed, create_graph=True)
    got = torch.autograd.grad(d_bias.square().sum() + (d_r * r).sum(), (bias, r))
    bias0, r0 = (t.detach().double().requires_grad_() for t in (bias, r))
    c0 = torch.where(a @ b > 0, r0 * bias0, 0.0)  # (the kernel's decision: |A @ B| is far from 0 here)
    d_bias0, d_r0 = torch.autograd.grad(c0, (bias0, r0), seed.double(), create_graph=True)
    want = torch.autograd.grad(d_bias0.square().sum() + (d_r0 * r0).sum(), (bias0, r0))
    for mine, theirs in zip((d_bias, d_r, *got), (d_bias0, d_r0, *want)):
        torch.testing.assert_close(mine.double(), theirs, rtol=1e-5, atol=1e-5)


def test_the_accumulators_history_holds_no_value_of_a_stand_in_or_an_overflowed_product():
    # The accumulator of a matmul's differentiable backward has the kept values and its operands'
    # history. That history added as `x - x.detach()` is NaN where x is not finite: a stand-in's
    # one element (any bits: never read) or a float16 product past 65504 where the float32 kept
    # accumulator is finite.
    from tilegen.runtime.autograd import accumulator_with_history

    element = torch.full((), float("nan"), requires_grad=True)
    stand_in, frozen = element.expand(8, 16), torch.randn(16, 8)
    kept = torch.randn(8, 8)
    acc = accumulator_with_history("op", kept, stand_in, frozen, True, False, "a", "b")
    assert torch.equal(acc, kept)
    (got,) = torch.autograd.grad(acc.sum(), element)
    torch.testing.assert_close(got, frozen.sum() * 8)
    a = torch.full((4, 4), 300.0, dtype=torch.float16, requires_grad=True)
    b = torch.full((4, 4), 300.0, dtype=torch.float16, requires_grad=True)
    acc = accumulator_with_history("op", (a.float() @ b.float()).detach(), a, b, True, True, "a", "b")
    assert torch.equal(acc, torch.full((4, 4), 360000.0))
    (d_a,) = torch.autograd.grad((acc * 1e-3).sum(), a)
    torch.testing.assert_close(d_a, torch.full((4, 4), 1.2, dtype=torch.float16))
    assert torch.func.vmap(lambda t: accumulator_with_history("op", t @ t, t, t, True, True, "a", "b"))(
        torch.ones(3, 2, 2)).eq(2.0).all()


@pytest.mark.parametrize("op, needs, kept", [
    ("ew_plain", (True, False), (False, True)),  # y = x * w: dx reads w alone, dw reads x alone
    ("ew_plain", (False, True), (True, False)),
    ("ew_plain", (True, True), (True, True)),
    ("ew_mix", (False, True, False), (True, False, False)),  # da reads a and b, db a; c none
    ("ew_mix", (False, False, True), (False, False, False)),  # dc is -dz itself: nothing kept
    ("ew_mix", (True, False, False), (True, True, False)),
    ("scaled_silu_mul", (False, True), (True, False)),  # a frozen: b, read by da alone, not kept
])
@pytest.mark.parametrize("through", ["node", "function", "registered op"])
def test_an_elementwise_op_keeps_an_input_only_where_a_gradient_asked_for_reads_it(node, through, monkeypatch, package,
                                                                                   op, needs, kept):
    # As eager's mul keeps `self` only for `other`'s gradient: an input no gradient asked for
    # reads is kept as its shape alone, and the backward kernel never loads it (its contiguous
    # kernel still serves the others); the gradients are as when every input asks for one.
    if through == "function":
        _use_node(monkeypatch, None)
    module = importlib.import_module("generated.scaled_silu_mul") if op == "scaled_silu_mul" else package
    namespace = torch.ops.generated if op == "scaled_silu_mul" else torch.ops.autograd_ops
    called = getattr(namespace, op).default if through == "registered op" else getattr(module, op)
    ops = importlib.import_module(module.__name__ + "." + op) if module is package else module
    launched, launch = [], ops._BACKWARD._launch

    def watched(tensors, scalars, numel, layout, config, stores=None):
        launched.append(layout is None)
        return launch(tensors, scalars, numel, layout, config, stores)

    monkeypatch.setattr(ops._BACKWARD, "_launch", watched)
    ops._BACKWARD.call_path.forget()  # (a call learned earlier would be served without _launch)
    g = torch.Generator().manual_seed(7)
    inputs = [torch.randn(4, 300, generator=g, dtype=torch.float32).to(_device()) for _ in needs]
    every = [t.clone().requires_grad_() for t in inputs]

    def grad(outputs, wrt):  # (of the outputs that record a graph in the call: ew_plain's step records none)
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        recorded, given = zip(*[(o, s) for o, s in zip(outputs, seeds) if o.requires_grad])
        return torch.autograd.grad(recorded, wrt, given)

    first = called(*every)
    seeds = [torch.randn(o.shape, generator=g).to(_device()) for o in (first if isinstance(first, tuple) else (first,))]
    want = grad(first, every)
    leaves = [t.clone().requires_grad_(need) for t, need in zip(inputs, needs)]
    asked = [t * 1.0 for t in leaves]  # (not leaves: a leaf's gradient accumulator holds it too)
    before = [_holders(t) for t in asked]
    out = called(*asked)
    assert [_holders(t) != held for t, held in zip(asked, before)] == list(kept)
    got = grad(out, [t for t in leaves if t.requires_grad])
    for mine, theirs in zip(got, [w for w, need in zip(want, needs) if need]):
        torch.testing.assert_close(mine, theirs)
    assert all(launched)  # every backward launch took the contiguous kernel, stand-ins or not


@pytest.mark.parametrize("op, shapes, needs", [
    ("layer_norm", [(6, 40), (40,), (40,)], (True, False, False)),  # frozen weight and bias
    ("layer_norm", [(5, 3000), (3000,), (3000,)], (True, False, True)),  # long rows, a frozen weight
    ("layer_norm", [(6, 40), (40,), (40,)], (False, True, False)),  # the weight alone
    ("rms_norm", [(5, 3000), (3000,)], (True, False)),
    ("rms_norm", [(6, 40), (40,)], (False, True)),
    ("bias_gelu", [(6, 40), (40,)], (True, False)),
    ("bias_gelu", [(6, 40), (40,)], (False, True)),  # bias's gradient is x's, summed over the rows
])
def test_a_fused_backward_computes_only_the_gradients_asked_for(through, monkeypatch, op, shapes, needs):
    # A frozen norm weight or bias: its columns are not summed (a pass over the rows, or a finish
    # after a grid-wide wait) and no gradient is stored for it; those asked for are as when all are.
    module = importlib.import_module(f"generated.{op}")
    stored, run = [], module._BACKWARD.run

    def watched(inputs, outputs, *args, stores=None, **kwargs):
        stored.append((stores, tuple(o.numel() > 0 for o in outputs)))
        return run(inputs, outputs, *args, stores=stores, **kwargs)

    g = torch.Generator().manual_seed(5)
    inputs = [torch.randn(*shape, generator=g).to(_device()) for shape in shapes]
    every = [t.clone().requires_grad_() for t in inputs]
    first = module.__dict__[op](*every)
    first = first[0] if isinstance(first, tuple) else first
    seed = torch.randn(first.shape, generator=g).to(_device())
    want = torch.autograd.grad(first, every, seed)
    monkeypatch.setattr(module._BACKWARD, "run", watched)
    module._BACKWARD.call_path.forget()  # (a call learned earlier in this worker would be served without run)
    asked = [t.clone().requires_grad_(need) for t, need in zip(inputs, needs)]
    out = module.__dict__[op](*asked)
    got = torch.autograd.grad(out[0] if isinstance(out, tuple) else out, [t for t in asked if t.requires_grad], seed)
    # One gradient result per input (the norms), or one that both inputs' gradients are (bias_gelu).
    expected = needs if len(stored[0][0]) == len(needs) else (any(needs),)
    assert stored == [(expected, expected)]
    for mine, theirs in zip(got, [w for w, need in zip(want, needs) if need]):
        torch.testing.assert_close(mine, theirs)


# The autograd node in C++ (csrc/autograd_node.cpp), which eager training calls record (the
# default); here built and put in place, over the interpreter's CPU tensors.
@pytest.fixture
def node(monkeypatch):
    module = _built_node()
    _use_node(monkeypatch, module)
    return module


def _built_node():
    from tilegen.runtime import native

    try:
        return native.load("autograd_node")
    except native.BuildError as exc:
        pytest.skip(f"the native module cannot be built here: {exc}")


def _use_node(monkeypatch, module):
    """Calls from here on record the node of `module` (None: torch.autograd.Function's node). On a
    GPU the compiled call paths' tables already made took their formula's node when made: they
    take this one's."""
    from tilegen.runtime import autograd, ops

    monkeypatch.setattr(autograd, "native_module", lambda wait=False: module)
    for op in ops._REGISTRY.values():
        for path in op.paths():
            if path.table is not None:
                monkeypatch.setattr(path.table, "formula", None if path.formula is None else path.formula.node_formula())


def _leaves(*shapes, seed=3, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=g, dtype=dtype).to(_device()).requires_grad_() for shape in shapes]


def test_the_node_records_eager_calls_and_its_gradients_pass_gradcheck(package, node):
    a, b, c = _leaves((7, 11), (7, 11), (7, 11))
    y, _ = package.ew_mix(a, b, c)
    assert y.grad_fn.name() == "ew_mixBackward"
    assert torch.autograd.gradcheck(package.ew_mix, [a, b, c])


@pytest.mark.parametrize("op, shapes", [("softmax", [(5, 33)]), ("log_softmax", [(5, 33)]), ("rms_norm", [(5, 33), (33,)]),
                                        ("layer_norm", [(5, 33), (33,), (33,)]), ("add_rms_norm", [(5, 33), (5, 33), (33,)]),
                                        ("add", [(5, 33), (33,)]), ("scaled_silu_mul", [(5, 33), (5, 33)])])
def test_generated_ops_through_the_node_match_their_python_autograd(node, op, shapes, monkeypatch):
    # The same gradients as the torch.autograd.Function path (whose gradients the generated tests
    # check against PyTorch): broadcast inputs summed, several outputs, saved inputs and outputs.

    fn = getattr(importlib.import_module("generated"), op)
    leaves = _leaves(*shapes, dtype=torch.float32)
    outputs = fn(*leaves)
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    assert all(o.grad_fn is not None and o.grad_fn.name() == f"{op}Backward" for o in outputs if o.requires_grad)
    seeds = [torch.randn_like(o) for o in outputs]
    got = torch.autograd.grad(outputs, leaves, seeds, allow_unused=True)
    _use_node(monkeypatch, None)
    again = [t.detach().clone().requires_grad_() for t in leaves]
    outputs = fn(*again)
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    assert all("_EagerAutograd" in type(o.grad_fn).__name__ for o in outputs if o.requires_grad)
    want = torch.autograd.grad(outputs, again, seeds, allow_unused=True)
    for x, y in zip(got, want):
        assert (x is None) == (y is None)
        if x is not None:
            assert x.shape == y.shape
            torch.testing.assert_close(x, y, rtol=1e-6, atol=1e-6)


def test_a_table_made_without_the_node_takes_it_at_the_next_training_call(node, monkeypatch):
    # A compiled call path's table takes its op's node when made. One made while the node was not
    # to be had (turned off, its build not loaded yet) takes it once a training call on the Python
    # path finds it, so that its repeat training calls are served with it from then on (a table
    # kept None served no training call for the process's life: found on an H100).
    from types import SimpleNamespace

    from tilegen.runtime import autograd

    module = importlib.import_module("generated.rms_norm")
    path = module._OP.call_path
    table = SimpleNamespace(formula=None, learn=lambda *args: False)  # made without the node
    monkeypatch.setattr(path, "table", table)
    monkeypatch.setattr(path, "call", lambda *args: None)  # every call on the Python path
    x, w = _leaves((5, 33), (33,), dtype=torch.float32)
    monkeypatch.setattr(autograd, "native_module", lambda wait=False: None)
    y, _ = module.rms_norm(x, w)
    assert table.formula is None and "_EagerAutograd" in type(y.grad_fn).__name__  # no node to take yet
    monkeypatch.setattr(autograd, "native_module", lambda wait=False: node)
    y, _ = module.rms_norm(x, w)
    assert y.grad_fn.name() == "rms_normBackward"
    assert table.formula is not None and table.formula is path.formula.node_formula()


def test_the_node_refuses_what_autograd_refuses(package, node):
    from generated import rms_norm as normed

    def rms_norm(x, w):
        return normed(x, w)[0]  # (y; the saved rstd follows)

    x, w = _leaves((4, 16), (16,))
    # A saved tensor changed in place after the call.
    y = rms_norm(x, w)
    with torch.no_grad():
        w.add_(1.0)
    with pytest.raises(RuntimeError, match="rms_norm: one of the tensors its backward needs was modified by an in-place"):
        y.sum().backward()
    # A second backward through a freed graph; with retain_graph=True it runs again, the same.
    y = rms_norm(x, w)
    first = torch.autograd.grad(y.sum(), (x, w), retain_graph=True)
    second = torch.autograd.grad(y.sum(), (x, w))
    for p, q in zip(first, second):
        torch.testing.assert_close(p, q)
    with pytest.raises(RuntimeError, match="rms_norm: trying to backward through the graph a second time"):
        torch.autograd.grad(y.sum(), (x, w))
    # Gradients to differentiate again (create_graph=True, a gradient penalty) are computed from
    # the kept tensors' history, an input's as passed and an output's through this node: a saved
    # tensor changed in place is refused there too.
    y = rms_norm(x, w)
    with torch.no_grad():
        w.mul_(1.0)
    with pytest.raises(RuntimeError, match="rms_norm: one of the tensors its backward needs was modified by an in-place"):
        torch.autograd.grad(y.sum(), x, create_graph=True)


def test_two_threads_backward_through_one_node_at_once_one_runs_and_one_is_refused(node):
    # Two backward calls that share a node's graph run it from two threads, each without
    # retain_graph: the first hands its kept tensors over to its backward, the other must be
    # refused as a second backward is, never run on what is left (PyTorch's nodes lock, see its
    # Note [Thread Safety on Autograd Node]).
    import threading

    from generated import rms_norm

    x, w = _leaves((64, 256), (256,))
    want = torch.autograd.grad(rms_norm(x, w)[0].sum(), (x, w))
    for _ in range(20):
        y = rms_norm(x, w)[0]
        start, outcomes = threading.Barrier(2), []

        def backward():
            loss = y.sum()
            start.wait()
            try:
                outcomes.append(torch.autograd.grad(loss, (x, w)))
            except RuntimeError as error:
                outcomes.append(error)

        run_in_threads(backward, 2)
        ran = [o for o in outcomes if isinstance(o, tuple)]
        refused = [o for o in outcomes if not isinstance(o, tuple)]
        assert len(ran) == 1 and len(refused) == 1, outcomes
        assert "rms_norm: trying to backward through the graph a second time" in str(refused[0])
        for got, expected in zip(ran[0], want):
            torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("recorded", ["node", "function"])
def test_gradients_asked_for_with_create_graph_differentiate_again(monkeypatch, recorded):
    from generated import matmul_relu, rms_norm, softmax

    _use_node(monkeypatch, _built_node() if recorded == "node" else None)

    x, w = _leaves((4, 16), (16,))
    # A gradient penalty: the norm of the input's gradient, differentiated by the weight. Softmax
    # keeps its output (y's history is its own node), rms_norm its inputs.
    y = softmax(rms_norm(x, w)[0])
    (dx,) = torch.autograd.grad((y * torch.arange(16.0, device=x.device)).sum(), x, create_graph=True)
    (dw,) = torch.autograd.grad(dx.square().sum(), w)
    x0, w0 = (t.detach().double().requires_grad_() for t in (x, w))
    y0 = torch.softmax(torch.nn.functional.rms_norm(x0, (16,), w0, 1e-6), -1)
    (dx0,) = torch.autograd.grad((y0 * torch.arange(16.0, dtype=torch.float64, device=x.device)).sum(), x0,
                                 create_graph=True)
    (dw0,) = torch.autograd.grad(dx0.square().sum(), w0)
    torch.testing.assert_close(dx.double(), dx0, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(dw.double(), dw0, rtol=1e-4, atol=1e-5)
    # A matmul's: the epilogue's gradient in PyTorch's ops, the products by torch.matmul, the
    # accumulator (where the gradient reads it) the kept one's values with the product's history.
    # A frozen weight (no gradient asked for) is a constant of the penalty.
    from generated import matmul_bias_gelu

    a, b, bias = _leaves((8, 16), (16, 8), (8,), dtype=torch.float32)
    frozen = b.detach()
    gelu = torch.nn.functional.gelu
    for name, weight in (("matmul_relu", b), ("matmul_bias_gelu", b), ("matmul_relu", frozen)):
        out = matmul_relu(a, weight) if name == "matmul_relu" else matmul_bias_gelu(a, weight, bias)
        assert type(out.grad_fn).__name__ == ("CppFunction" if recorded == "node" else "_EagerAutogradBackward")
        (da,) = torch.autograd.grad(out.square().sum(), a, create_graph=True)
        leaves = [t for t in (a, weight, bias) if t.requires_grad]
        got = torch.autograd.grad(da.square().sum(), leaves, allow_unused=True)
        a0, w0 = (t.detach().double().requires_grad_(t.requires_grad) for t in (a, weight))
        bias0 = bias.detach().double().requires_grad_()
        out0 = torch.relu(a0 @ w0) if name == "matmul_relu" else gelu(a0 @ w0 + bias0)
        (da0,) = torch.autograd.grad(out0.square().sum(), a0, create_graph=True)
        want = torch.autograd.grad(da0.square().sum(), [t for t in (a0, w0, bias0) if t.requires_grad], allow_unused=True)
        for g, w, leaf in zip(got, want, leaves):
            zero = torch.zeros(leaf.shape, dtype=torch.float64, device=leaf.device)
            torch.testing.assert_close(zero if g is None else g.double(), zero if w is None else w, rtol=1e-4, atol=1e-4)
    # Where the forward kept the accumulator and one operand needs no gradient, the other's values
    # were not kept (only the frozen one's gradient reads them): the node gives the stand-in its
    # input's history (the accumulator's dependence on it); torch.autograd.Function's node keeps
    # none, and that is refused by name.
    out = matmul_bias_gelu(a, frozen, bias)
    if recorded == "node":
        (da,) = torch.autograd.grad(out.square().sum(), a, create_graph=True)
        got = torch.autograd.grad(da.square().sum(), (a, bias))
        a0, bias0 = (t.detach().double().requires_grad_() for t in (a, bias))
        (da0,) = torch.autograd.grad(gelu(a0 @ frozen.double() + bias0).square().sum(), a0, create_graph=True)
        for g, w in zip(got, torch.autograd.grad(da0.square().sum(), (a0, bias0))):
            torch.testing.assert_close(g.double(), w, rtol=1e-4, atol=1e-4)
    else:
        with pytest.raises(RuntimeError, match=r"matmul_bias_gelu: a second derivative through the accumulator A @ B "
                                               r"needs 'a''s history, but its values were not kept \('b' does not"):
            torch.autograd.grad(out.sum(), a, create_graph=True)


def test_an_input_used_twice_and_a_non_leaf_input_get_their_gradients(package, node):
    a, b = _leaves((6, 9), (6, 9))
    mid = a * 3.0  # a non-leaf input: its gradient flows on to a
    y, z = package.ew_mix(mid, mid, b)
    (y.sum() + z.sum()).backward()
    a2, b2 = (t.detach().clone().requires_grad_() for t in (a, b))
    m2 = a2 * 3.0
    ((m2 + m2 * torch.exp(m2)).sum() + (m2 - b2).sum()).backward()
    torch.testing.assert_close(a.grad, a2.grad)
    torch.testing.assert_close(b.grad, b2.grad)


def test_an_input_that_needs_no_gradient_gets_none_through_the_node(package, node):
    # add's gradients are the incoming one (passed on in C++); ew_mix's come from its backward.
    from generated import add

    x, = _leaves((4, 6), dtype=torch.float32)
    bias = torch.randn(6).to(_device())  # needs no gradient, broadcast
    (gx,) = torch.autograd.grad(add(x, bias).sum(), (x,))
    torch.testing.assert_close(gx, torch.ones_like(x))
    b, = _leaves((4, 6), dtype=torch.float32)
    y, z = package.ew_mix(x.detach(), b, torch.zeros_like(b))
    (gb,) = torch.autograd.grad(y.sum() + z.sum(), (b,))
    torch.testing.assert_close(gb, torch.exp(x.detach()))


@pytest.mark.parametrize("through", ["node", "function"])
def test_a_bool_output_beside_a_differentiable_one_stays_plain(package, node, through, monkeypatch):

    if through == "function":
        _use_node(monkeypatch, None)
    x, = _leaves((5, 8))
    y, positive = package.ew_flag(x)
    assert y.requires_grad and not positive.requires_grad and positive.dtype == torch.bool
    assert ("_EagerAutograd" in type(y.grad_fn).__name__) == (through == "function")
    (gx,) = torch.autograd.grad(y.sum(), x)
    torch.testing.assert_close(gx, 2 * x.detach())


@pytest.mark.parametrize("through", ["node", "function", "registered op"])
def test_float_outputs_that_read_no_input_are_plain_as_pytorchs_are(package, node, through, monkeypatch):
    # where(x > 0, 1.0, 0.0) and detach(x) * 2.0 record no graph in PyTorch: they do not require
    # grad, and a loss on them alone raises rather than giving a gradient of zeros. (w * 0.0
    # does record one, whose gradient is zero.)
    if through == "function":
        _use_node(monkeypatch, None)
    op = torch.ops.autograd_ops.ew_plain.default if through == "registered op" else package.ew_plain
    x, w = _leaves((5, 8), (5, 8))
    y, step, frozen = op(x, w)
    composed = (x * w, torch.where(x > 0, 1.0, 0.0), x.detach() * 2.0 + w * 0.0)
    assert [t.requires_grad for t in (y, step, frozen)] == [t.requires_grad for t in composed] == [True, False, True]
    step_only = package.ew_plain(x, w.detach())[2]  # frozen, with w needing no gradient: plain
    assert not step_only.requires_grad
    with pytest.raises(RuntimeError, match="does not require grad"):
        torch.autograd.grad(step.sum(), x)
    gx, gw = torch.autograd.grad(y.sum() + step.sum() + frozen.sum(), (x, w))
    torch.testing.assert_close(gx, w.detach())
    torch.testing.assert_close(gw, x.detach())


@pytest.mark.parametrize("through", ["node", "function"])
def test_a_statistic_of_inputs_that_need_no_gradient_is_plain(node, through, monkeypatch):
    # rms_norm's rstd reads x alone: with only the weight requiring grad it records no graph,
    # as PyTorch's composition's does not; y reads both.
    from generated import rms_norm

    if through == "function":
        _use_node(monkeypatch, None)
    x, = _leaves((4, 16))
    w, = _leaves((16,), seed=4)
    y, rstd = rms_norm(x.detach(), w)
    assert y.requires_grad and not rstd.requires_grad
    y, rstd = rms_norm(x, w.detach())
    assert y.requires_grad and rstd.requires_grad
    (gx,) = torch.autograd.grad(rstd.sum(), x)
    x64 = x.detach().clone().requires_grad_()
    (want,) = torch.autograd.grad(torch.rsqrt(x64.square().mean(-1) + 1e-6).sum(), x64)
    torch.testing.assert_close(gx, want)


def test_calls_made_while_compiled_autograd_runs_record_the_function_it_can_trace(node):
    # Compiled autograd traces each node of the graph; the C++ node has no trace. Calls made while
    # it runs (torch.compile's frame with torch._dynamo.config.compiled_autograd, graph breaks'
    # eager calls included; or its engine enabled by hand) record torch.autograd.Function's node,
    # whose backward it traces; a node recorded outside it that it meets says what to do.
    from torch._dynamo import compiled_autograd

    from generated import rms_norm

    x, w = _leaves((8, 16), (16,), dtype=torch.float32)
    want = torch.autograd.grad(rms_norm(x, w)[0].sum(), (x, w))
    before = rms_norm(x, w)[0]
    assert before.grad_fn.name() == "rms_normBackward"
    with compiled_autograd._enable(torch.compile(backend="eager")):
        y = rms_norm(x, w)[0]
        assert "_EagerAutograd" in type(y.grad_fn).__name__
        got = torch.autograd.grad(y.sum(), (x, w))
        with pytest.raises(RuntimeError, match=r"rms_norm: compiled autograd cannot trace tilegen's autograd node.*"
                                               r"TILEGEN_AUTOGRAD_NODE=0"):
            torch.autograd.grad(before.sum(), (x, w))
    for p, q in zip(got, want):
        torch.testing.assert_close(p, q)


def test_saved_tensor_hooks_take_the_python_node(package, node):
    # Checkpointing and offloading reach saved tensors through these hooks, which the C++ node's
    # kept tensors would skip: under them the call records torch.autograd.Function's node.
    a, b, c = _leaves((5, 7), (5, 7), (5, 7))
    packed = []

    def pack(t):
        packed.append(t.shape)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y, _ = package.ew_mix(a, b, c)
    assert "_EagerAutograd" in type(y.grad_fn).__name__ and packed
    y.sum().backward()
    torch.testing.assert_close(c.grad, torch.zeros_like(c))


def test_an_error_in_the_backward_reaches_the_caller(package, node, monkeypatch):
    from tilegen.runtime import autograd

    a, b, c = _leaves((3, 4), (3, 4), (3, 4))
    y, _ = package.ew_mix(a, b, c)

    def broken(self, *args):
        raise ValueError("a broken backward")
    monkeypatch.setattr(autograd.Gradients, "gradients", broken)
    with pytest.raises(ValueError, match="a broken backward"):
        y.sum().backward()


def test_a_gradient_that_does_not_sum_to_its_input_is_an_error_not_a_hang(package, through, monkeypatch):
    # The node sums a broadcast input's gradient in C++ while it holds the GIL: an ATen error
    # there once left the GIL taken, and backward() waited for it forever.
    from tilegen.runtime import autograd

    # On a GPU the node's error crashed the process (autograd's device thread, SIGSEGV in the
    # stream c10::str formats sizes with); it formats them itself now (size_text).
    a, b, c = _leaves((3, 4), (3, 4), (3, 4))
    y, _ = package.ew_mix(a, b, c)

    def misshapen(self, saved, grads, needed, scalars):
        return tuple(torch.ones(5, 7) if wanted else None for wanted in needed)
    monkeypatch.setattr(autograd.Gradients, "gradients", misshapen)
    with pytest.raises(RuntimeError, match="ew_mix: the gradient of its input 0: "):
        y.sum().backward()


def test_the_node_builds_without_warnings(tmp_path, monkeypatch):
    from tilegen.runtime import native

    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    monkeypatch.setenv("TILEGEN_CACHE_DIR", str(cache))
    try:
        path, warnings = native.build("autograd_node")
    except native.BuildError as exc:
        pytest.skip(f"the native module cannot be built here: {exc}")
    assert warnings == "", warnings
    assert os.path.basename(path).startswith("autograd_node-")


def test_the_node_is_built_in_the_background_unless_turned_off_and_a_failed_build_says_so_once(monkeypatch):
    import threading
    import warnings

    from tilegen.runtime import autograd, native

    monkeypatch.setattr(autograd, "_NODE", {})
    monkeypatch.setenv("TILEGEN_AUTOGRAD_NODE", "0")
    assert autograd.native_module(wait=True) is None and autograd._NODE == {}  # nothing started
    monkeypatch.delenv("TILEGEN_AUTOGRAD_NODE")
    release = threading.Event()

    def fail(name):
        release.wait(timeout=30)
        raise native.BuildError("no C++ compiler (c++, g++ or clang++) on PATH")
    monkeypatch.setattr(native, "load", fail)
    assert autograd.native_module() is None  # building: calls record Function's node meanwhile
    assert autograd._NODE["loader"][0].is_alive()
    release.set()
    with pytest.warns(RuntimeWarning, match=r"the autograd node is not available \(no C\+\+ compiler"):
        assert autograd.native_module(wait=True) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert autograd.native_module() is None


def test_the_node_launches_a_backward_its_call_path_serves_and_else_calls_python(node):
    # A backward op served whole by its compiled call path (elementwise and reduction ops) is
    # called from C++ with the arguments the Python function would give it: the saved inputs, the
    # saved outputs (None for one recomputed), the incoming gradients, the scalars.
    from types import SimpleNamespace

    calls, python = [], []

    def serve(*args):
        calls.append(args)
        return None if len(calls) == 2 else (args[3] * args[4] * 7.0,)  # d/dx of y = 7 s x: g * s * 7

    def gradients(saved, grads, needed, scalars):
        python.append(len(saved))
        return (grads[0] * scalars[0] * 7.0,)

    path = SimpleNamespace(call=serve)
    # c = x * s * 7 with an extra output kept for the backward; its accumulator recomputed (-1).
    formula = node.Formula("seven", gradients, 1, (0,), (-1, 1), 1, (-2,), path)
    for served in (True, False):
        x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
        y, kept = x.detach() * 14.0, torch.ones(3, 4, dtype=torch.float64)
        assert formula.attach((x, 2.0), (y, kept))
        seed = torch.randn(3, 4, dtype=torch.float64)
        (gx,) = torch.autograd.grad(y, x, seed)
        torch.testing.assert_close(gx, seed * 14.0)
        args = calls[-1]
        assert len(args) == 5 and args[0] is not x and torch.equal(args[0], x.detach()) and args[1] is None
        assert torch.equal(args[2], kept) and torch.equal(args[3], seed) and args[4] == 2.0
        assert python == ([] if served else [2])

    path.call = lambda *args: ("not a tensor",)
    x = torch.randn(3, dtype=torch.float64, requires_grad=True)
    y = x.detach() * 14.0
    formula.attach((x, 2.0), (y, torch.ones(3, dtype=torch.float64)))
    with pytest.raises(RuntimeError, match="seven: its backward's call path returned .*without a tensor as result 0"):
        y.sum().backward()


# The generated test files that hold gradient tests, in parts, so that a parallel run spreads
# them (whole, one run took 386 s of the GPU matrix's 518 on an H100: its tail).
GRADIENT_TEST_FILES = sorted(path.name for path in (REPO / "generated" / "tests").glob("test_*.py")
                             if re.search(r"def test_\w*(gradients|gradcheck)", path.read_text()))
GRADIENT_TEST_PARTS = 4


@pytest.mark.parametrize("part", range(GRADIENT_TEST_PARTS))
def test_every_generated_ops_gradient_tests_pass_through_the_other_node(part):
    # The generated tests check each op's gradients against PyTorch autograd and gradcheck,
    # through the node this run's setting picks (by default the C++ node: their support module
    # builds it before the first test). Here they run again through the other one: with
    # TILEGEN_AUTOGRAD_NODE=0 the Function's node (what calls under torch.func transforms or
    # saved-tensor hooks record, and where the node cannot be built), or, in a run with the
    # node switched off, the C++ node.
    import subprocess
    import sys

    files = [f"generated/tests/{name}" for name in GRADIENT_TEST_FILES[part::GRADIENT_TEST_PARTS]]
    assert files, "no generated gradient tests in this part"
    other = "1" if os.environ.get("TILEGEN_AUTOGRAD_NODE", "1") == "0" else "0"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *files,
                           "-k", "gradients or gradcheck"], cwd=REPO, env={**os.environ, "TILEGEN_AUTOGRAD_NODE": other},
                          capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout.splitlines()[-1] and " failed" not in done.stdout.splitlines()[-1]


def test_a_formula_whose_saved_output_is_missing_is_refused_before_anything_is_attached(node):
    formula = node.Formula("bad", lambda *args: (None,), 1, (), (3,), 1, (-2,))
    x = torch.randn(3, requires_grad=True)
    y = x.detach() * 2
    with pytest.raises(ValueError, match="bad: saved output 3 is not among the 1 outputs"):
        formula.attach((x,), (y,))
    assert not y.requires_grad and y.grad_fn is None


def test_a_formula_whose_masks_miscount_is_refused_with_their_counts(node):
    # (The node's message reads the counts before the formula is freed.)
    from tilegen import runtime as rt

    with pytest.raises(ValueError, match=r"read_by names 1 saved inputs, saved has 2, each read by some inputs' "
                                         r"gradients, by none \(its shape alone\), or always \(None\)"):
        rt.Gradients(None, tensors=2, saved=(0, 1), sources=(None, None), read_by=((1,),))
    with pytest.raises(ValueError, match="Formula: 1 readers for 2 saved inputs"):
        node.Formula("bad", lambda *args: (None,), 2, (0, 1), (), 1, (-2, -2), None, None, False, (2,))
    with pytest.raises(ValueError, match="Formula: 2 records for 1 results"):
        node.Formula("bad", lambda *args: (None,), 2, (0, 1), (), 1, (-2, -2), None, (1, 2))


# Outputs whose dtypes are not the inputs': a bool output first, a float32 one from half inputs.
OWN_DTYPES = {
    "ew_own.yaml": """
op: ew_own
kind: elementwise
inputs:
  x: {dtype: [float16, float32]}
  y: {dtype: x}
outputs:
  bigger: {dtype: [bool]}
  diff: {dtype: [float32]}
  z: {dtype: x}
compute:
  bigger: x > y
  diff: x - y
  z: where(x > y, x, y) * 2.0
tiles:
  N: {block: BLOCK, sizes: [256]}
""",
    "mm_own.yaml": """
op: mm_own
kind: matmul
inputs:
  a: {shape: [M, K], dtype: [float16, float32]}
  b: {shape: [K, N], dtype: a}
outputs:
  c: {shape: [M, N], dtype: [float32]}
  d: {shape: [M, N], dtype: [float32]}
tiles:
  M: {block: BM, sizes: [32]}
  N: {block: BN, sizes: [32]}
  K: {block: BK, sizes: [32]}
epilogue:
  c: acc
  d: relu(acc)
""",
}


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("through", ["node", "function"])
def test_outputs_of_their_own_dtypes_give_the_inputs_gradients(tmp_path, node, through, dtype, monkeypatch):
    """An int or bool output's incoming gradient sets no dtype of the backward's (it made the
    gradients bool: wrong values), and a matmul's float32 output from half operands has its
    gradient cast to theirs before the products (the products refused the mix)."""
    if through == "function":
        _use_node(monkeypatch, None)
    with built_package(tmp_path, "own_dtype_ops", OWN_DTYPES) as package:
        generator = torch.Generator().manual_seed(0)
        x, y = (torch.randn(6, 40, generator=generator).to(_device(), dtype).requires_grad_() for _ in range(2))
        bigger, diff, z = package.ew_own(x, y)
        assert bigger.dtype == torch.bool and diff.dtype == torch.float32 and z.dtype == dtype
        g_diff = torch.randn(6, 40, generator=generator).to(_device())
        g_z = torch.randn(6, 40, generator=generator).to(_device(), dtype)
        gx, gy = torch.autograd.grad((diff, z), (x, y), (g_diff, g_z))
        up = (x > y).float()
        torch.testing.assert_close(gx.float(), (g_diff + 2 * g_z.float() * up).to(dtype).float())
        torch.testing.assert_close(gy.float(), (-g_diff + 2 * g_z.float() * (1 - up)).to(dtype).float())

        _mm_own_gradients_match(package, dtype, generator)


def _mm_own_gradients_match(package, dtype, generator):
    """mm_own's float32 outputs (acc, relu(acc)) from `dtype` operands: its inputs' gradients, in
    their dtype, against autograd of the product in float64."""
    a, b = (torch.randn(*shape, generator=generator).to(_device(), dtype).requires_grad_()
            for shape in ((40, 24), (24, 33)))
    c, d = package.mm_own(a, b)
    assert c.dtype == d.dtype == torch.float32
    seeds = [torch.randn(40, 33, generator=generator).to(_device()) for _ in range(2)]
    got = torch.autograd.grad((c, d), (a, b), seeds)
    exact = [t.detach().double().requires_grad_() for t in (a, b)]
    product = exact[0] @ exact[1]
    want = torch.autograd.grad((product, torch.relu(product)), exact, [s.double() for s in seeds])
    for g, w in zip(got, want):
        assert g.dtype == dtype
        torch.testing.assert_close(g.double(), w, atol=2e-2 if dtype == torch.float16 else 1e-4, rtol=1e-2)


def test_a_repeat_backward_call_keys_on_the_operands_dtype_its_gradient_takes(tmp_path):
    """mm_own's float32 outputs come from half or float32 operands, and the gradient at the
    accumulator takes the operands' dtype: its pass's incoming tensors are float32 either way, so
    the compiled call path, which tells calls apart by their arguments, must see A too. Without
    it, on a GPU, a float32 call after a half one got a half gradient (the products refused it)."""
    with built_package(tmp_path, "own_key_ops", {"mm_own.yaml": OWN_DTYPES["mm_own.yaml"]}) as package:
        source = (tmp_path / "own_key_ops" / "mm_own.py").read_text()
        assert "_EPILOGUE_BACKWARD.fast(d, _g_c, _g_d, a)" in source
        generator = torch.Generator().manual_seed(0)
        for dtype in (torch.float16, torch.float32, torch.float16, torch.float32):
            _mm_own_gradients_match(package, dtype, generator)


def test_the_generated_opcheck_of_an_op_whose_first_output_is_bool_passes(tmp_path):
    """opcheck's AOT autograd check sums every output into one tensor of the first one's dtype:
    the generated test leaves that check out for such an op (its gradient tests cover it)."""
    assert_generated_tests_pass(tmp_path, {"ew_own.yaml": OWN_DTYPES["ew_own.yaml"]}, ["ew_own"], "opcheck or gradients")


MIXED_PRECISION = """
op: scale_mixed
kind: elementwise
inputs:
  x: {dtype: [float16]}
  w: {dtype: [float32]}
outputs:
  y: {dtype: x}
compute:
  y: x * w
tiles:
  N: {block: BLOCK, sizes: [256]}
"""


def test_a_float32_input_beside_a_half_one_gets_a_float32_precise_gradient(tmp_path, node):
    """w's gradient (the half incoming gradient times the half x) is made in float32, as
    PyTorch's autograd makes it, not rounded to half on the way."""
    with built_package(tmp_path, "mixed_precision_ops", {"scale_mixed.yaml": MIXED_PRECISION}) as package:
        generator = torch.Generator().manual_seed(1)
        x = torch.randn(8, 64, generator=generator).to(_device(), torch.float16).requires_grad_()
        w = (torch.randn(8, 64, generator=generator) / 3).to(_device()).requires_grad_()
        y = package.scale_mixed(x, w)
        g = torch.randn(8, 64, generator=generator).to(_device(), torch.float16)
        gx, gw = torch.autograd.grad(y, (x, w), g)
        assert gx.dtype == torch.float16 and gw.dtype == torch.float32
        torch.testing.assert_close(gw, g.float() * x.detach().float(), atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(gx, (g.float() * w.detach()).half())


def _dtype_sources_outside_the_key(source: str) -> list[str]:
    """In each function of a generated module that asks the compiled call path first, the
    tensors whose dtype a fresh tensor takes but which the call path's key leaves out."""
    problems = []
    for function in re.split(r"\n(?=def |@)", source):
        asked = re.search(r"\.fast\(([^)]*)\)", function)
        if asked is None:
            continue
        keyed = {name.strip() for name in asked.group(1).split(",")}
        for name in re.findall(r"torch\.empty\([^\n]*dtype=(?:torch\.promote_types\()?(\w+)\.dtype", function):
            if name not in keyed:
                problems.append(f"{function.splitlines()[0][:60]}: {name}")
    return problems


def test_every_fresh_tensor_takes_its_dtype_from_a_tensor_the_call_path_keys_on(tmp_path):
    """The compiled call path serves a repeat call with the outputs it learned, in their dtypes:
    a wrapper that made one like a tensor the call did not pass would hand a later call of
    another such dtype the first call's (mm_own's gradient at the accumulator took A's dtype,
    and A was not passed: a float32 call after a half one got half gradients on the GPU)."""
    for path in sorted((REPO / "generated").glob("*.py")):
        assert _dtype_sources_outside_the_key(path.read_text()) == [], path.name
    with built_package(tmp_path, "keyed_ops", {**OWN_DTYPES, "scale_mixed.yaml": MIXED_PRECISION}):
        for name in ("ew_own", "mm_own", "scale_mixed"):
            assert _dtype_sources_outside_the_key((tmp_path / "keyed_ops" / f"{name}.py").read_text()) == [], name
    # (It finds what it is for: the dZ pass as it was.)
    before = "_computed = _EPILOGUE_BACKWARD.fast(d, _g_c, _g_d)\n    _d_acc = torch.empty((M, N), dtype=a.dtype, device=d.device)"
    assert _dtype_sources_outside_the_key("def _mm_backward():\n    " + before) == ["def _mm_backward():: a"]


STOPPED = """
op: stopped
kind: elementwise
inputs:
  x: {dtype: [float32, float64]}
outputs:
  z: {dtype: x}
compute:
  z: detach(x) * x
tiles:
  N: {block: BLOCK, sizes: [256]}
"""


def test_an_op_that_stops_a_gradient_passes_its_generated_gradient_tests(tmp_path):
    """detach(x) * x has gradient x, where finite differences measure 2x: its generated tests
    compare against autograd of the oracle (which detaches too) and leave gradcheck out; an op
    whose oracle detaches nothing (softmax's reference) keeps it."""
    assert_generated_tests_pass(tmp_path, {"stopped.yaml": STOPPED}, ["stopped"], "gradcheck or gradients")
    generated = (tmp_path / "generated" / "tests" / "test_stopped.py").read_text()
    assert "@pytest.mark.skip(reason=\"the op's math stops a gradient" in generated
    assert "stops a gradient" not in (REPO / "generated" / "tests" / "test_softmax.py").read_text()


KINKED_EPILOGUE = """
op: mm_kinks
kind: matmul
inputs:
  a: {shape: [M, K], dtype: [float16, float32]}
  b: {shape: [K, N], dtype: a}
  bias: {shape: [N], dtype: a}
outputs:
  c: {shape: [M, N], dtype: a}
tiles:
  M: {block: BM, sizes: [32]}
  N: {block: BN, sizes: [32]}
  K: {block: BK, sizes: [32]}
epilogue:
  c: maximum(acc + bias, 0.0) - minimum(acc, bias)
"""

# The spec language's own example: its backward reads its output (relu's kink is its sign).
BIAS_RELU = KINKED_EPILOGUE.replace("mm_kinks", "mm_bias_relu").replace(
    "maximum(acc + bias, 0.0) - minimum(acc, bias)", "relu(acc + bias)")

# A threshold on a value that is also an output: the rounded output h may lie on the other side.
THRESHOLD_AND_SUM = """
op: mm_threshold
kind: matmul
inputs:
  a: {shape: [M, K], dtype: [float16, float32]}
  b: {shape: [K, N], dtype: a}
  bias: {shape: [N], dtype: a}
scalars:
  t: {type: float, default: 0.5}
outputs:
  c: {shape: [M, N], dtype: a}
  h: {shape: [M, N], dtype: a}
tiles:
  M: {block: BM, sizes: [32]}
  N: {block: BN, sizes: [32]}
  K: {block: BK, sizes: [32]}
epilogue:
  c: where(acc + bias > t, acc + bias, 0)
  h: acc + bias
"""


def test_a_backward_decides_each_kink_as_the_forward_did(tmp_path):
    """The forward decides an epilogue's kinks (maximum's, relu's, a where's threshold) on the
    float32 accumulator. A backward deciding them on a half-precision copy (the accumulator kept
    in the operands' dtype, or an output read in its place) took the other branch where the value
    lay within its rounding of the kink: a whole incoming gradient off at that element, and along
    its row of dA (2.3% of dA's elements for mm_kinks; the spec language's own `relu(acc + bias)`
    and a threshold on an output failed their generated gradient tests). The backward now keeps
    the accumulator in float32 where a decision reads more of it than its sign, reads an output
    only where a decision reads its sign alone, and the tests check against the exact oracle."""
    specs = {"mm_kinks.yaml": KINKED_EPILOGUE, "mm_bias_relu.yaml": BIAS_RELU, "mm_threshold.yaml": THRESHOLD_AND_SUM}
    ops = ["mm_kinks", "mm_bias_relu", "mm_threshold"]
    assert_generated_tests_pass(tmp_path, specs, ops, "gradients_match or training_variant")
    code = {op: (tmp_path / "generated" / f"{op}.py").read_text() for op in ops}
    for op in ("mm_kinks", "mm_threshold"):  # decided on acc + bias: kept and recomputed in float32
        assert "dtype=torch.float32, device=a.device) if keep_acc" in code[op]
        assert "_OP.product(a, b, exact=True)" in code[op]
    # relu's kink read from the output c (its sign is the forward's): nothing kept.
    assert "keep_acc" not in code["mm_bias_relu"] and "_backward_math(c, _g_c, MATH_64)" in code["mm_bias_relu"]


# The accumulator itself, where its threshold lets it through: c = acc wherever t is -inf.
TIE_AT_THRESHOLD = """
op: mm_tie
kind: matmul
inputs:
  a: {shape: [M, K], dtype: [float32]}
  b: {shape: [K, N], dtype: a}
  t: {shape: [M, N], dtype: a}
outputs:
  c: {shape: [M, N], dtype: a}
tiles:
  M: {block: BM, sizes: [32]}
  N: {block: BN, sizes: [32]}
  K: {block: BK, sizes: [32]}
configs:
  mode: autotune
  key: [M]
epilogue:
  c: where(acc > t, acc, t)
"""


def test_a_recomputed_accumulator_adds_up_as_the_forwards_did(tmp_path):
    """A backward that recomputes the float32 accumulator (the registered op's, which torch.compile
    and export trace: no training call kept it) decides its kinks on it. Recomputed with the
    backward products' own config, its K steps added up in another order (a split of K where the
    forward, keyed by M alone, reused an unsplit config): 226 of 1024 ties at the threshold went the
    other way, so t's gradient and every element of a's and b's differed from the kept
    accumulator's backward. It now takes the forward's chooser: the same sums, bit for bit."""
    device = _device()
    with built_package(tmp_path, "tie_ops", {"mm_tie.yaml": TIE_AT_THRESHOLD}) as package:
        module = importlib.import_module(f"{package.__name__}.mm_tie")
        gen = torch.Generator().manual_seed(0)
        m, k = 32, 256
        # The first call at M = 32 picks the config of every later call at M = 32 (configs.key:
        # [M]): wide, so unsplit; a later narrow product on its own would split K.
        wide = [torch.randn(*shape, generator=gen).to(device) for shape in ((m, k), (k, 8192))]
        module.mm_tie(*wide, torch.full((m, 8192), -float("inf"), device=device))
        a, b = (torch.randn(*shape, generator=gen).to(device) for shape in ((m, k), (k, 32)))
        acc = module.mm_tie(a, b, torch.full((m, 32), -float("inf"), device=device))  # the forward's sums
        # Every element at its threshold: the forward's own sums let no gradient through acc.
        g = torch.ones(m, 32, device=device)
        kept = module._mm_tie_backward(a, b, acc.clone(), acc, g, [True] * 3)
        recomputed = module._mm_tie_backward(a, b, acc.clone(), None, g, [True] * 3)
        assert not kept[0].any() and not kept[1].any() and torch.equal(kept[2], g)
        for name, mine, theirs in zip("abt", recomputed, kept):
            assert torch.equal(mine, theirs), f"{name}: {(mine != theirs).sum().item()} elements differ"
