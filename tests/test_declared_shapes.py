"""Elementwise shapes declared in the spec (x [M, N] beside a row [N]): the test and benchmark
shapes made valid for them, and an op built from such a spec, run against PyTorch."""

from __future__ import annotations

import os

import pytest
import torch

from tests.conftest import REPO, built_package, generated_tests_run, validated

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


# A per-row scale [M, 1] and a per-column bias [N] beside x [..., M, N], as PyTorch broadcasts them.
SIZE_ONE_SPEC = """
op: row_gate
kind: elementwise
inputs:
  x: {dtype: [float32, float64], shape: [..., M, N]}
  s: {dtype: x, shape: [M, 1]}
  bias: {dtype: x, shape: [N]}
outputs:
  y: {dtype: x}
compute:
  y: tanh(x * s) + bias
tiles:
  N: {block: BLOCK, sizes: [128]}
"""


def test_an_axis_of_size_1_broadcasts_as_in_pytorch(tmp_path):
    from tilegen.build import load_specs

    with built_package(tmp_path, "ones_ops", {"row_gate.yaml": SIZE_ONE_SPEC}) as package:
        spec = load_specs([tmp_path / "specs"], tmp_path)[0].spec
        assert spec.broadcast_axes() == ("...", "M", "N")
        assert [eval(e, {"shape": (2, 6, 9)}) for e in spec.input_shape_exprs()] == [(2, 6, 9), (6, 1), (9,)]
        if os.environ.get("TRITON_INTERPRET", "0") in ("", "0") and not torch.cuda.is_available():
            pytest.skip("the op's call needs a CUDA GPU, or TRITON_INTERPRET=1")
        device = "cuda" if torch.cuda.is_available() else "cpu"
        x = torch.randn(3, 7, 33, dtype=torch.float64, device=device, requires_grad=True)
        s = torch.randn(7, 1, dtype=torch.float64, device=device, requires_grad=True)
        bias = torch.randn(33, dtype=torch.float64, device=device, requires_grad=True)
        got = package.row_gate(x, s, bias)
        want = torch.tanh(x * s) + bias
        torch.testing.assert_close(got, want)
        for g, e in zip(torch.autograd.grad(got.sum(), (x, s, bias)), torch.autograd.grad(want.sum(), (x, s, bias))):
            assert g.shape == e.shape
            torch.testing.assert_close(g, e)
        with pytest.raises(ValueError, match=r"row_gate: argument 's' has size 33 on dim -1, but the spec declares "
                                             r"\[M, 1\] \(size 1 there\)"):
            package.row_gate(x.detach(), s.detach().expand(7, 33), bias.detach())
        with pytest.raises(ValueError, match="row_gate: argument 's' has size 6 on axis M, but 'x' has 7"):
            package.row_gate(x.detach(), s.detach()[:6], bias.detach())


def test_the_ops_generated_tests_pass_with_an_axis_of_size_1(tmp_path):
    result = generated_tests_run(tmp_path, {"row_gate.yaml": SIZE_ONE_SPEC}, ["row_gate"],
                                 "matches_reference or bad_arguments or gradient")
    assert result.returncode == 0, result.stdout[-3000:]


@pytest.mark.parametrize("shapes, message", [
    ("x: {dtype: [float32], shape: [M, N]}\n  s: {dtype: x, shape: [N, 1]}",
     "inputs.s.shape: axes ['N', '1'] do not line up with ['M', 'N']"),
    ("x: {dtype: [float32], shape: [M, N]}\n  s: {dtype: x, shape: [M, true]}",
     "inputs.s.shape.1: True is not an axis symbol"),
])
def test_a_misplaced_axis_of_size_1_is_a_spec_error(tmp_path, cli, monkeypatch, shapes, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "bad.yaml").write_text(
        "op: bad\nkind: elementwise\ndoc: bad.\ninputs:\n  " + shapes + "\noutputs:\n  y: {dtype: x}\n"
        "compute:\n  y: x * s\ntiles:\n  N: {block: BLOCK, sizes: [128]}\n")
    result = cli("check", "specs")
    assert result.exit_code == 2 and message in result.output, result.output


def test_an_axis_of_size_1_is_for_elementwise_shapes(tmp_path, cli, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "specs").mkdir()
    text = (REPO / "specs" / "rms_norm.yaml").read_text().replace("w: {dtype: x, shape: [N]}", "w: {dtype: x, shape: [1, N]}")
    (tmp_path / "specs" / "rms_norm.yaml").write_text(text)
    result = cli("check", "specs")
    assert result.exit_code == 2 and "inputs.w.shape.0: 1 is not an axis symbol" in result.output, result.output
    assert "axis of size 1" not in result.output


# The axis of size 1 on the first input ([M, 1] + [1, N]: an outer sum), and an input of one element
# beside rows no other input names.
OUTER_SPECS = {
    "outer_add.yaml": """
op: outer_add
kind: elementwise
inputs:
  u: {dtype: [float32], shape: [M, 1]}
  v: {dtype: u, shape: [1, N]}
  w: {dtype: u, shape: [M, N]}
outputs:
  y: {dtype: u, shape: [M, N]}
compute:
  y: (u + v) * w
tiles:
  N: {block: BLOCK, sizes: [128]}
""",
    "ones_only.yaml": """
op: ones_only
kind: elementwise
inputs:
  k: {dtype: [float32], shape: [1]}
  x: {dtype: k, shape: [..., N]}
outputs:
  y: {dtype: k}
compute:
  y: x * k + k
tiles:
  N: {block: BLOCK, sizes: [128]}
""",
}


def test_the_generated_tests_pass_for_outer_sums_and_one_element_inputs(tmp_path):
    result = generated_tests_run(tmp_path, OUTER_SPECS, ["outer_add", "ones_only"],
                                 "matches_reference or bad_arguments or gradient")
    assert result.returncode == 0, result.stdout[-3000:]


def _pair_spec(first, second, op="pair"):
    return (f"op: {op}\nkind: elementwise\ndoc: d.\ninputs:\n  x: {{dtype: [float32], shape: {first}}}\n"
            f"  y: {{dtype: x, shape: {second}}}\noutputs:\n  z: {{dtype: x}}\ncompute:\n  z: x * y + x\n"
            "tiles:\n  N: {block: BLOCK, sizes: [128]}\n")


@pytest.mark.parametrize("first, second, broadcast, fitted", [
    ("[M, 1]", "[M, 1]", ("M", "1"), {(65536,): (65536, 1), (127, 65): (8255, 1), (0,): (0, 1)}),
    ("[1, 1]", "[N]", ("1", "N"), {(65536,): (1, 65536), (127, 65): (1, 8255), (3, 5, 7): (1, 105)}),
    ("[..., 1]", "[1]", ("...", "1"), {(65536,): (65536, 1), (127, 65): (8255, 1), (3, 5, 7): (105, 1)}),
    ("[..., 1]", "[1, N]", ("...", "1", "N"), {(127, 65): (1, 8255), (3, 5, 7): (3, 1, 35)}),
])
def test_test_shapes_keep_their_elements_on_the_named_axes(tmp_path, first, second, broadcast, fitted):
    """An output axis of size 1 (every input has 1 there) takes size 1 in test and benchmark shapes;
    its elements move to the last named axis, or to the leading ones."""
    spec, problems = validated(tmp_path, _pair_spec(first, second))
    assert spec is not None, problems
    assert spec.broadcast_axes() == broadcast
    assert {shape: spec.fit_rank(shape) for shape in fitted} == fitted


def test_shapes_of_ones_alone_are_a_spec_error(tmp_path):
    spec, problems = validated(tmp_path, _pair_spec("[1]", "[1, 1]"))
    assert spec is None and problems == [
        "specs/spec.yaml:5: inputs.x.shape: every declared axis is 1 (['1', '1']): the op would compute one element "
        "(name an axis, or lead with ... (any leading axes))"], problems


def test_the_generated_tests_pass_where_the_output_has_an_axis_of_size_1(tmp_path):
    specs = {"col_pair.yaml": _pair_spec("[M, 1]", "[M, 1]", "col_pair"),
             "lead_pair.yaml": _pair_spec("[..., 1]", "[1, N]", "lead_pair"),
             "row_pair.yaml": _pair_spec("[1, 1]", "[N]", "row_pair")}
    result = generated_tests_run(tmp_path, specs, ["col_pair", "lead_pair", "row_pair"], "not cuda_graph")
    assert result.returncode == 0, result.stdout[-3000:]
