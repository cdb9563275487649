"""A reduction's backward decides each kink on the sums the forward decided it on: the forward's
kernel stores the sums a decision reads, and the backward runs it again on the saved inputs (the
same config, the same order of addition) instead of summing with its own. Summed in another order,
the mean of a row of equal values comes out a rounding apart, and `where(x > mean(x), ...)` sent
every element's gradient down the other branch from the one the forward took."""

from __future__ import annotations

import ast
import os

import pytest
import torch

from tests.conftest import REPO, assert_generated_tests_pass, built_package
from tilegen.build import load_specs
from tilegen.decisions import contractible, decides_on_fused_math
from tilegen.derivatives import normal_form
from tilegen.expressions import expression_of
from tilegen.reduction_lowering import forward_program, kept_statistics
from tilegen.rows import ELEMENT, ROW, UNIFORM, KeptValues, RowProgram

ABOVE_MEAN = """
op: above_mean
kind: reduction
doc: y = x - mean(x) where x is above its row's mean, else 0.
inputs:
  x: {dtype: [float32, float64], shape: [..., N]}
outputs:
  y: {dtype: x, shape: [..., N]}
steps:
  mu: mean(x)
compute:
  y: where(x > mu, x - mu, 0.0)
tiles:
  N: {block: BLOCK_N, sizes: [1024, 2048]}
"""

# A max of values centred on a weighted mean: the mean is decided on (the max's backward finds
# the elements equal to it), the variance is not. `x * w - mu` is a product and a subtraction,
# which a compiler fuses into one FMA in some kernels and not others: on the H200 a float16
# backward looping on one warp lost the max's gradient at one element so, until every kernel of
# such an op was compiled without FP fusion (tilegen.decisions).
CENTRED_RANGE = """
op: centred_range
kind: reduction
doc: y = d * rsqrt(mean(d * d) + eps) * s * k + max(d), d = x * w - mean(x * w); its variance and range.
inputs:
  x: {dtype: [float16, float32, float64], shape: [..., N]}
  w: {dtype: x, shape: [N]}
  s: {dtype: [float32], shape: [...]}
scalars:
  eps: {type: float, default: 1.0e-5}
  k: {type: int, default: 3}
outputs:
  y: {dtype: x, shape: [..., N]}
  var: {dtype: [float32], shape: [...]}
  rng: {dtype: [float32], shape: [...]}
steps:
  mu: mean(x * w)
  d: x * w - mu
  v: mean(d * d)
  hi: max(d)
  lo: min(d)
  t: s * k
compute:
  y: d * rsqrt(v + eps) * t + hi
  var: v
  rng: hi - lo
tiles:
  N: {block: BLOCK_N, sizes: [64, 256]}
"""


def _program(values: dict[str, str], levels: dict[str, int], kept=None) -> RowProgram:
    # (As a backward's values are made: trees of tilegen's own, with names of its own.)
    return RowProgram([(name, expression_of(ast.parse(text, mode="eval").body)) for name, text in values.items()],
                      levels, kept=kept)


def _sums(program):
    return [ast.unparse(r.argument.tree.body) for r in program.decided_sums()]


def test_the_sums_a_decision_reads_are_found_through_the_values_between():
    levels = {"x": ELEMENT, "w": ELEMENT, "eps": UNIFORM}
    assert _sums(_program({"mu": "mean(x)", "y": "where(x > mu, x - mu, 0.0)"}, levels)) == ["x"]
    # Through a value along the row, a max's argument, relu's and maximum's.
    assert _sums(_program({"d": "x - mean(x)", "y": "d / max(d)"}, levels)) == ["x"]
    assert _sums(_program({"y": "relu(x - sum(x * w))"}, levels)) == ["x * w"]
    assert _sums(_program({"r": "maximum(mean(x * x), eps)", "y": "x * r"}, levels)) == ["x * x"]
    # No decision, or one on values no sum reaches: nothing kept (LayerNorm, softmax).
    assert _sums(_program({"mu": "mean(x)", "d": "x - mu", "y": "d * rsqrt(mean(d * d) + eps)"}, levels)) == []
    assert _sums(_program({"m": "max(x)", "e": "exp(x - m)", "y": "e / sum(e)"}, levels)) == []
    assert _sums(_program({"y": "where(x > 0, x, 0.0) * rsqrt(mean(x * x) + eps)"}, levels)) == []


def test_a_program_reads_a_kept_sum_by_its_value_whatever_its_parts_are_named():
    levels = {"x": ELEMENT, "w": ELEMENT, "_kept": ROW}
    forward = _program({"mu": "mean(x * w)", "d": "x * w - mu", "y": "where(d > 0, d, 0.0)"}, levels)
    key = normal_form(forward.canonical(ast.Name(forward.decided_sums()[0].name, ast.Load())))
    kept = KeptValues({key: "_kept"}, normal_form)
    # The same sum written another way (a backward's temporaries), and one nested in another sum.
    backward = _program({"_s0": "x * w", "_s1": "_s0 - sum(_s0) / 4.0", "z": "sum(_s1 * (x * w - mean(x * w)))"},
                        levels, kept)
    assert kept.used == {key}
    assert [ast.unparse(r.argument.tree.body) for r in backward.reductions] == ["_s1 * (x * w - _kept / _n)"]


def test_the_reduction_ops_in_specs_keep_nothing():
    # None decides on a sum: softmax's max is the same in any order, LayerNorm decides nothing.
    for source in load_specs([REPO / "specs"], REPO):
        if source.spec.kind == "reduction":
            assert kept_statistics(forward_program(source.spec), source.spec.number_kinds()) is None, source.spec.op


# A decision on a sum that reads the row's length made float (`1.0 * N`): the key of the forward's
# sum and the backward's lookup of it simplify `1.0 * N` as N is an int. The builders knew the ints
# of the last op differentiated: lowered after an op without ints, the sum was not found, its
# module took the backward in PyTorch's ops while its tests (lowered after it) expected it refused.
DECIDED_ON_LENGTH = """
op: decided_on_length
kind: reduction
doc: y = x * maximum(0.5, 8 + 2 m), m = sum(w / N) / tanh(min(1, N)) (w detached).
inputs:
  x: {dtype: [float32], shape: [..., N]}
  w: {dtype: x, shape: [N]}
outputs:
  y: {dtype: x, shape: [..., N]}
steps:
  m: sum(detach(w / N) / tanh(minimum(1.0, 1.0 * N)))
compute:
  y: x * maximum(0.5, 8.0 + (m + m))
tiles:
  N: {block: BLOCK_N, sizes: [64]}
"""


def test_which_sums_an_op_keeps_does_not_depend_on_the_ops_lowered_before_it(tmp_path):
    from tests.conftest import validated
    from tilegen.reduction_lowering import differentiates_twice

    spec, errors = validated(tmp_path, DECIDED_ON_LENGTH)
    assert not errors
    kept = kept_statistics(forward_program(spec), spec.number_kinds())
    assert kept is not None and len(kept.names) == 1
    for source in load_specs([REPO / "specs"], REPO):  # (ops of other kinds of numbers, lowered between)
        assert differentiates_twice(spec) is False, source.spec.op
        if source.spec.kind == "reduction":
            differentiates_twice(source.spec)
    assert_generated_tests_pass(tmp_path / "built", {"decided_on_length.yaml": DECIDED_ON_LENGTH}, ["decided_on_length"],
                                "refused_by_name or gradients_match")


needs_backend = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET", "0") in ("", "0") and not torch.cuda.is_available(),
    reason="needs a CUDA GPU, or TRITON_INTERPRET=1")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.parametrize("text, fused", [
    ("x * w - mu", True), ("-(a * b) + c", True), ("silu(x) + b", True), ("c - a / b", True),
    ("x - mu", False), ("a * b", False), ("(a + b) * c", False), ("detach(x) + maximum(a, b)", False)])
def test_a_value_is_contractible_where_it_adds_or_subtracts_a_product(text, fused):
    assert contractible(ast.parse(text, mode="eval").body) is fused


def test_ops_whose_decisions_read_fused_math_are_compiled_without_fp_fusion():
    def fused(values):
        return decides_on_fused_math([(n, ast.parse(t, mode="eval").body) for n, t in values.items()])

    # Through a step, a max's argument, relu's and maximum's.
    assert fused({"mu": "mean(x * w)", "d": "x * w - mu", "y": "d * max(d)"})
    assert fused({"y": "relu(a * b + c)"})
    assert fused({"y": "minimum(maximum(a * b + c, lo), hi)"})
    # Decisions on inputs, on a quotient alone, on a sum of inputs: nothing to fuse.
    assert not fused({"mu": "mean(x)", "y": "where(x > mu, x - mu, 0.0)"})
    assert not fused({"m": "max(x)", "e": "exp(x - m)", "y": "e / sum(e)"})
    assert not fused({"y": "where(a + b > 0, a * b + c, 0.0)"})
    ops = {source.spec.op for source in load_specs([REPO / "specs"], REPO)
           if decides_on_fused_math([(n, e.tree.body) for n, e in [*source.spec.steps, *source.spec.body]])}
    assert ops == {"fma_clamp"}


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    with built_package(tmp_path_factory.mktemp("decided"), "decided_ops",
                       {"above_mean.yaml": ABOVE_MEAN, "centred_range.yaml": CENTRED_RANGE}) as module:
        yield module


@needs_backend
@pytest.mark.parametrize("value", [1 / 3, 0.7, 0.9, 2.3])
def test_a_row_of_equal_values_gets_the_gradient_of_the_branch_its_forward_took(package, value):
    # 10000 copies of each value: its mean, summed in the backward's own order, was a rounding
    # from the forward's, and every element's gradient went down the other branch.
    x = torch.full((2, 10000), value, dtype=torch.float32, device=DEVICE, requires_grad=True)
    y = package.above_mean(x)
    seed = torch.linspace(0.5, 1.5, 10000, device=DEVICE).expand(2, 10000)
    (got,) = torch.autograd.grad(y, x, seed)
    # PyTorch's autograd of the same math in float64, each element's branch the one the op took.
    taken = y.detach() != 0
    x64 = x.detach().double().requires_grad_()
    (want,) = torch.autograd.grad(torch.where(taken, x64 - x64.mean(-1, keepdim=True), 0.0), x64, seed.double())
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-6)


@needs_backend
@pytest.mark.parametrize("warps", [1, 2])
def test_a_max_of_fused_math_gets_its_gradient_in_a_looping_half_precision_backward(package, warps):
    # The config that lost it (on the H200, compiled): 64-element blocks along rows of 300.
    from decided_ops.centred_range import _BACKWARD

    generator = torch.Generator().manual_seed(4)
    x, w = (torch.randn(shape, generator=generator, dtype=torch.float64).half() for shape in ((8, 300), (300,)))
    s = torch.rand(8, generator=generator, dtype=torch.float64).float() + 0.5
    seeds = [torch.randn(shape, generator=generator, dtype=torch.float64) for shape in ((8, 300), (8,), (8,))]
    leaves = [t.to(DEVICE).requires_grad_() for t in (x, w, s)]
    with _BACKWARD.configs.forcing({"BLOCK_N": 64, "ROWS": 1, "num_warps": warps, "UNROLL": 0}):
        outs = package.centred_range(*leaves, k=3)
        got = torch.autograd.grad(outs, leaves, [g.to(o.dtype).to(DEVICE) for g, o in zip(seeds, outs)])
    x64, w64, s64 = (t.double().requires_grad_() for t in (x, w, s))
    d = x64 * w64 - (x64 * w64).mean(-1, keepdim=True)
    v, hi, lo = (d * d).mean(-1, keepdim=True), d.amax(-1, keepdim=True), d.amin(-1, keepdim=True)
    wants = [(d * (v + 1e-5).rsqrt() * s64[:, None] * 3 + hi), v[:, 0], (hi - lo)[:, 0]]
    want = torch.autograd.grad(wants, (x64, w64, s64), seeds)
    top = d.detach().topk(2, -1).values
    assert ((top[:, 0] - top[:, 1]) > 1e-3).all()  # no near tie for the max to split
    for g, expected in zip(got, want):
        torch.testing.assert_close(g.double().cpu(), expected, rtol=0, atol=2e-2 * expected.abs().max().item())


@needs_backend
def test_the_kernels_of_an_op_that_decides_on_fused_math_are_compiled_without_it(package):
    from decided_ops.above_mean import _BACKWARD as plain_backward
    from decided_ops.above_mean import _OP as plain
    from decided_ops.centred_range import _BACKWARD, _OP

    assert not _OP.kernel.fp_fusion and not _BACKWARD.kernel.fp_fusion
    assert plain.kernel.fp_fusion and plain_backward.kernel.fp_fusion


@needs_backend
def test_the_generated_tests_of_ops_that_keep_sums_pass(tmp_path):
    # Their gradcheck, their gradients against PyTorch's autograd of the oracle (with another
    # axis reduced too), opcheck, and on a GPU the compiled and exported backward.
    assert_generated_tests_pass(tmp_path, {"above_mean.yaml": ABOVE_MEAN, "centred_range.yaml": CENTRED_RANGE},
                                ["above_mean", "centred_range"], "")
