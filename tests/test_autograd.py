"""Derived backwards of ops that specs/ does not hold, built and run in the interpreter: epilogue
inputs of every shape ([M, N], [M], [N]), a gradient shared by two inputs, an input whose
gradient is the incoming one, and several outputs."""

from __future__ import annotations

import importlib
import os

import pytest
import torch

from tests.conftest import built_package

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


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    specs = {"mm_mix.yaml": MATMUL, "ew_mix.yaml": ELEMENTWISE}
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


def test_an_eager_matmul_backward_frees_the_kept_accumulator_before_its_products(monkeypatch):
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
    for x, y in zip(got, want):
        torch.testing.assert_close(x, y)


def test_a_matmul_backward_sums_broadcast_gradients_before_its_products(monkeypatch):
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
