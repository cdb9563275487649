"""Value names taken from the generated code's own identifiers: every name the validator accepts
builds an op that computes the right numbers, keeps the spec's names as its keywords and in its
errors, and differentiates (built and run in the interpreter, or on a GPU)."""

from __future__ import annotations

import itertools
import os

import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tilegen.dtypes import DTYPES
from tilegen.naming import RESERVED, identifiers
from tests.conftest import built_package

needs_backend = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET", "0") in ("", "0") and not torch.cuda.is_available(),
    reason="needs a CUDA GPU, or TRITON_INTERPRET=1")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

# Names the templates use (kernel locals, wrapper locals, modules, builtins), and names derived
# from other values' (pointers, strides, out= tensors).
HOSTILE = sorted(RESERVED - {"acc", "out"}) + ["a_ptr", "x_out", "stride_x_0", "x_offsets", "k_ptr", "plan", "launch"]


def test_plain_names_are_kept():
    assert identifiers(["a", "b", "alpha", "c"]) == {"a": "a", "b": "b", "alpha": "alpha", "c": "c"}


@pytest.mark.parametrize("names", [
    ["rest", "i_0", "len"], ["a", "a_ptr"], ["a_ptr", "a"], ["x", "stride_x_0"], ["x_out", "x"],
    ["rest", "rest_", "rest__ptr"], ["torch", "torch_", "torch__"],
    ["workspace", "count", "partial", "saved"],  # whose pointers the kernels' own parameters are named
])
def test_identifiers_never_collide(names):
    ident = identifiers(names, op="op")
    values = list(ident.values())
    assert len(set(values)) == len(values)
    derived = {value: {f"{value}_{s}" for s in ("ptr", "ptrs", "offsets", "out", "view")} |
               {f"stride_{value}_{d}" for d in [*range(4), "batch"]} for value in values}
    for value in values:
        assert value not in RESERVED and value != "op"
        assert not derived[value] & RESERVED, (value, derived[value] & RESERVED)
        for other in values:
            assert value not in derived[other]


def test_the_op_name_is_never_a_value_identifier():
    assert identifiers(["scale", "x"], op="scale")["scale"] == "scale_"


def _elementwise(op, x, y, out, alpha, beta):
    return f"""
op: {op}
kind: elementwise
inputs:
  {x}: {{dtype: [float32, float64]}}
  {y}: {{dtype: {x}}}
outputs:
  {out}: {{dtype: {x}}}
scalars:
  {alpha}: {{type: float, default: 2.0}}
  {beta}: {{type: float}}
compute:
  {out}: {alpha} * tanh({x}) * sigmoid({y}) + {beta} * {x}
tiles:
  N: {{block: BLOCK, sizes: [128]}}
"""


def _matmul(op, a, b, bias, out, alpha):
    return f"""
op: {op}
kind: matmul
inputs:
  {a}: {{shape: [M, K], dtype: [float32]}}
  {b}: {{shape: [K, N], dtype: {a}}}
  {bias}: {{shape: [N], dtype: {a}}}
outputs:
  {out}: {{shape: [M, N], dtype: {a}}}
scalars:
  {alpha}: {{type: float, default: 0.5}}
dtypes: {{precision: ieee}}
tiles:
  M: {{block: BM, sizes: [32]}}
  N: {{block: BN, sizes: [32]}}
  K: {{block: BK, sizes: [32]}}
epilogue:
  {out}: relu(acc * {alpha} + {bias})
"""


_builds = itertools.count()


def _build(tmp_path, specs: dict[str, str]):
    """Build `specs` (op -> YAML) into a fresh package and import it."""
    package = f"named_ops_{next(_builds)}"
    with built_package(tmp_path / package, package, {f"{op}.yaml": text for op, text in specs.items()}) as module:
        return module


def _check_elementwise(module, op, x, y, alpha, beta):
    function = getattr(module, op)
    xs = torch.randn(3, 50, dtype=torch.float64, device=DEVICE, requires_grad=True)
    ys = torch.randn(50, dtype=torch.float64, device=DEVICE, requires_grad=True)  # broadcast
    got = function(xs, ys, **{beta: 0.25})  # alpha from its default
    want = 2.0 * torch.tanh(xs) * torch.sigmoid(ys) + 0.25 * xs
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(function(xs.detach(), ys.detach(), **{alpha: -1.0, beta: 3.0}),
                               -torch.tanh(xs) * torch.sigmoid(ys) + 3.0 * xs)
    grads = torch.autograd.grad(got.sum(), (xs, ys))
    wants = torch.autograd.grad(want.sum(), (xs, ys))
    for g, w in zip(grads, wants):
        torch.testing.assert_close(g, w)
    # Errors name the arguments as the spec does.
    with pytest.raises(TypeError, match=f"{op}: argument '{y}' must be a torch.Tensor"):
        function(xs.detach(), 1.0, **{beta: 0.0})
    with pytest.raises(TypeError, match=f"{op}: argument '{beta}' must be a Python float"):
        function(xs.detach(), ys.detach(), **{beta: "1"})
    out = torch.empty(3, 50, dtype=torch.float64, device=DEVICE)
    assert function(xs.detach(), ys.detach(), **{beta: 0.25}, out=out) is out
    torch.testing.assert_close(out, want.detach())


def _check_matmul(module, op, a, bias, alpha):
    function = getattr(module, op)
    x = torch.randn(40, 24, device=DEVICE, requires_grad=True)
    w = torch.randn(24, 36, device=DEVICE, requires_grad=True)
    b = torch.randn(36, device=DEVICE, requires_grad=True)
    got = function(x, w, b, **{alpha: 0.75})
    want = torch.relu((x.double() @ w.double()) * 0.75 + b.double())
    torch.testing.assert_close(got.double(), want, atol=1e-4, rtol=1e-4)
    grads = torch.autograd.grad(got.sum(), (x, w, b))
    wants = torch.autograd.grad(want.sum(), (x, w, b))
    for g, w_ in zip(grads, wants):
        torch.testing.assert_close(g.double(), w_.double(), atol=1e-3, rtol=1e-3)
    with pytest.raises(ValueError, match=f"{op}: argument '{bias}' has shape \\(35,\\), which does not broadcast"):
        function(x.detach(), w.detach(), b.detach()[:-1])


@needs_backend
@pytest.mark.parametrize("ew, mm", [
    (("rt", "len", "result", "rest", "i_0"), ("torch", "tl", "group_id", "type", "k_first")),
    (("type", "torch", "plan", "i_1", "size_1"), ("rt", "len", "k_first", "launch", "group_id")),
    (("x", "x_ptr", "layout", "numel", "offsets"), ("a", "stride_a_0", "a_out", "c", "k")),
])
def test_names_the_templates_use_compute_right(tmp_path, ew, mm):
    """The names the validator used to refuse or that broke calls: kernel locals as scalars
    (rest, i_0, k_first, group_id, k), modules and builtins as inputs (rt, torch, len, type),
    wrapper locals as outputs (result, plan, launch, layout), another value's derived names."""
    module = _build(tmp_path, {"named_ew": _elementwise("named_ew", *ew), "named_mm": _matmul("named_mm", *mm)})
    _check_elementwise(module, "named_ew", ew[0], ew[1], ew[3], ew[4])
    _check_matmul(module, "named_mm", mm[0], mm[2], mm[4])


@needs_backend
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(names=st.lists(st.sampled_from(HOSTILE), min_size=9, max_size=9, unique=True))
def test_any_accepted_names_compute_right(tmp_path, names):
    """Random names from the templates' own identifiers, for every value of an elementwise and a
    matmul op, checked against the oracle."""
    x, y, out, alpha, beta, a, b, bias, mm_out = names
    # The specs write `dtype: <x>` and `dtype: <a>` for "the same dtype as that input": where that
    # name is also a dtype (bool, int32, int64 are accepted as names), `dtype:` means the dtype.
    assume(x not in DTYPES and a not in DTYPES)
    module = _build(tmp_path, {
        "hostile_ew": _elementwise("hostile_ew", x, y, out, alpha, beta),
        "hostile_mm": _matmul("hostile_mm", a, b, bias, mm_out, alpha),
    })
    _check_elementwise(module, "hostile_ew", x, y, alpha, beta)
    _check_matmul(module, "hostile_mm", a, bias, alpha)
