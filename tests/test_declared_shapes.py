"""Elementwise shapes declared in the spec (x [M, N] beside a row [N]): the test and benchmark
shapes made valid for them, and an op built from such a spec, run against PyTorch."""

from __future__ import annotations

import os

import pytest
import torch

from tests.conftest import built_package

SPEC = """
op: row_scale
kind: elementwise
inputs:
  x: {dtype: [float32, float64], shape: [M, N]}
  w: {dtype: x, shape: [N]}
outputs:
  y: {dtype: x, shape: [M, N]}
compute:
  y: x * w + sigmoid(w)
tiles:
  N: {block: BLOCK, sizes: [128]}
"""


@pytest.fixture(scope="module")
def spec_and_package(tmp_path_factory):
    from tilegen.build import load_specs

    root = tmp_path_factory.mktemp("declared")
    with built_package(root, "declared_ops", {"row_scale.yaml": SPEC}) as module:
        yield load_specs([root / "specs"], root)[0].spec, module


def test_shapes_are_fitted_to_the_declared_rank(spec_and_package):
    spec, _ = spec_and_package
    assert spec.broadcast_axes() == ("M", "N")
    assert spec.fit_rank((1000,)) == (1, 1000)
    assert spec.fit_rank((3, 5, 7, 11)) == (105, 11)
    assert spec.fit_rank((0,)) == (1, 0)
    assert [eval(e, {"shape": (6, 9)}) for e in spec.input_shape_exprs()] == [(6, 9), (9,)]


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET", "0") in ("", "0") and not torch.cuda.is_available(),
                    reason="needs a CUDA GPU, or TRITON_INTERPRET=1")
def test_an_op_with_declared_shapes_computes_checks_and_differentiates(spec_and_package):
    _, package = spec_and_package
    device = "cuda" if torch.cuda.is_available() else "cpu"
    x = torch.randn(7, 33, dtype=torch.float64, device=device, requires_grad=True)
    w = torch.randn(33, dtype=torch.float64, device=device, requires_grad=True)
    got = package.row_scale(x, w)
    want = x * w + torch.sigmoid(w)
    torch.testing.assert_close(got, want)
    for g, e in zip(torch.autograd.grad(got.sum(), (x, w)), torch.autograd.grad(want.sum(), (x, w))):
        torch.testing.assert_close(g, e)
    with pytest.raises(ValueError, match="row_scale: argument 'w' has size 32 on axis N, but 'x' has 33"):
        package.row_scale(x.detach(), w.detach()[:32])
    with pytest.raises(ValueError, match=r"row_scale: argument 'x' has shape \(2, 7, 33\), but the spec declares "
                                         r"\[M, N\] \(2-D\)"):
        package.row_scale(x.detach().expand(2, 7, 33), w.detach())
