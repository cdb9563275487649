"""A reduction over another axis than the last (`dim=`): values, gradients, out=, errors, and the
call traced by torch.compile and export, against PyTorch's own ops."""

from __future__ import annotations

import importlib
import inspect

import pytest
import torch

from tests.conftest import built_package
# A per-row input ([...]) and a per-row output beside the rows: a temperature for each row, and
# each row's log-sum-exp.
from tests.test_reductions import TEMPERED

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# Inductor compiles Triton kernels on a GPU only; in the interpreter AOT autograd's eager backend
# runs the same trace.
BACKEND = "inductor" if DEVICE == "cuda" else "aot_eager"

# A spec whose scalar is named `dim` keeps it: the op then reduces the last axis only.
NAMED_DIM = """\
op: weighted_softmax
kind: reduction
inputs:
  x: {dtype: [float32, float64], shape: [..., N]}
scalars:
  dim: {type: float, default: 1.0}
outputs:
  y: {dtype: x, shape: [..., N]}
steps:
  e: exp(x - max(x))
compute:
  y: dim * e / sum(e)
tiles:
  N: {block: BLOCK_N, sizes: [64]}
"""


@pytest.fixture(scope="module")
def ops(tmp_path_factory):
    root = tmp_path_factory.mktemp("reduced_axis")
    with built_package(root, "reduced_axis_ops", {"tempered_softmax.yaml": TEMPERED,
                                                  "weighted_softmax.yaml": NAMED_DIM}) as module:
        yield module


def random(*shape, seed=0, positive=False):
    t = torch.randn(shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    return (t.abs() + 0.5 if positive else t).to(DEVICE)


def tempered(x, t, dim):
    """The oracle: PyTorch's softmax and logsumexp of x / t over `dim`."""
    scaled = x / t.unsqueeze(dim)
    return torch.softmax(scaled, dim), torch.logsumexp(scaled, dim)


@pytest.mark.parametrize("dim", [0, 1, -2, 2, -1])
def test_any_axis_is_reduced_with_per_row_values_and_gradients(ops, dim):
    x = random(5, 70, 3, seed=1).requires_grad_()
    rows = list(x.shape)
    del rows[dim]
    t = random(*rows, seed=2, positive=True).requires_grad_()  # one value per row: the shape less the axis
    y, lse = ops.tempered_softmax(x, t, dim=dim)
    want = tempered(x, t, dim)
    assert y.shape == x.shape and lse.shape == tuple(rows)
    torch.testing.assert_close(y, want[0])
    torch.testing.assert_close(lse, want[1])
    seeds = (random(*y.shape, seed=3), random(*lse.shape, seed=4))
    for got, expected in zip(torch.autograd.grad((y, lse), (x, t), seeds), torch.autograd.grad(want, (x, t), seeds)):
        torch.testing.assert_close(got, expected)


def test_a_per_row_input_of_lower_rank_broadcasts_over_the_rows(ops):
    x = random(4, 30, 3, seed=5)
    t = random(3, seed=6, positive=True)  # the rows are [4, 3]: t broadcasts over the first
    y, lse = ops.tempered_softmax(x, t, dim=1)
    want = tempered(x, t.expand(4, 3), 1)
    torch.testing.assert_close(y, want[0])
    torch.testing.assert_close(lse, want[1])


def test_non_contiguous_inputs_and_out_are_read_and_written(ops):
    x = random(70, 6, seed=7).t()  # [6, 70] whose axis 1 is strided: reduced along dim 1
    t = random(6, seed=8, positive=True)
    want = tempered(x, t, 1)
    torch.testing.assert_close(ops.tempered_softmax(x, t, dim=1)[0], want[0])
    y = torch.full((6, 70), float("nan"), dtype=torch.float64, device=DEVICE)
    lse = torch.full((6,), float("nan"), dtype=torch.float64, device=DEVICE)
    got = ops.tempered_softmax(x, t, dim=1, out=(y, lse))
    assert got[0] is y and got[1] is lse
    torch.testing.assert_close(y, want[0])
    torch.testing.assert_close(lse, want[1])
    # dim=0 of [70, 6]: out= laid out as the input, written through the moved view.
    y0 = torch.full((70, 6), float("nan"), dtype=torch.float64, device=DEVICE)
    lse0 = torch.full((6,), float("nan"), dtype=torch.float64, device=DEVICE)
    ops.tempered_softmax(x.t(), t, dim=0, out=[y0, lse0])
    torch.testing.assert_close(y0, want[0].t())
    torch.testing.assert_close(lse0, want[1])


def test_a_bad_dim_is_refused_naming_the_op_and_the_argument(ops):
    x, t = random(4, 30, 3), random(4, 3, positive=True)
    with pytest.raises(IndexError, match=r"tempered_softmax: argument 'dim' is 3, out of range for rows of rank 3 "
                                         r"\(from -3 to 2\)"):
        ops.tempered_softmax(x, t, dim=3)
    with pytest.raises(IndexError, match="argument 'dim' is -4"):
        ops.tempered_softmax(x, t, dim=-4)
    for bad, kind in ((True, "bool"), (1.0, "float"), (torch.tensor([1, 2]), "Tensor"), (None, "NoneType")):
        with pytest.raises(TypeError, match=f"tempered_softmax: argument 'dim' must be an int, got {kind}"):
            ops.tempered_softmax(x, t, dim=bad)
    # A per-row value must have the rows' shape without the reduced axis.
    with pytest.raises(ValueError, match="tempered_softmax: argument 't'"):
        ops.tempered_softmax(x, random(4, 30, positive=True), dim=1)


def test_an_input_along_the_rows_without_the_axis_is_refused():
    from generated import add_rms_norm

    x, w = random(4, 5, 33).float(), random(5).float()
    with pytest.raises(ValueError, match=r"add_rms_norm: argument 'residual' has shape \(33,\): no axis at dim 1"):
        add_rms_norm(x, random(33).float(), w, dim=1)
    h, y = add_rms_norm(x, random(5, 33, seed=1).float(), w, dim=1)  # [5, 33] has it: broadcasts over the first
    s = x + random(5, 33, seed=1).float()
    torch.testing.assert_close(h, s)
    torch.testing.assert_close(y, torch.nn.functional.rms_norm(s.movedim(1, -1), (5,), w, 1e-6).movedim(-1, 1))


def test_the_keyword_defaults_to_the_last_axis_and_a_spec_that_names_a_value_dim_keeps_it(ops):
    params = inspect.signature(ops.tempered_softmax).parameters
    assert params["dim"].default == -1 and params["dim"].kind is inspect.Parameter.KEYWORD_ONLY
    params = inspect.signature(ops.weighted_softmax).parameters
    assert params["dim"].default == 1.0  # the spec's scalar, not an axis
    x = random(3, 40, seed=9)
    torch.testing.assert_close(ops.weighted_softmax(x, dim=2.0), 2.0 * torch.softmax(x, -1))


def test_torch_compile_and_export_trace_the_moved_views_around_the_op():
    from generated import layer_norm

    x, w, b = random(3, 64, 5).float(), random(64, seed=1).float(), random(64, seed=2).float()

    def normalize(x, w, b):
        y, mean, rstd = layer_norm(x, w, b, dim=1)
        return y * 2, mean, rstd

    want = torch.nn.functional.layer_norm(x.movedim(1, -1), (64,), w, b, 1e-5).movedim(-1, 1)
    compiled = torch.compile(normalize, fullgraph=True, backend=BACKEND)
    got = compiled(x, w, b)
    torch.testing.assert_close(got[0], want * 2)
    torch.testing.assert_close(got[1], x.mean(1))
    leaf = x.clone().requires_grad_()
    grad = torch.autograd.grad(compiled(leaf, w, b)[0].sum(), leaf)[0]
    exact = x.clone().requires_grad_()
    want_grad = torch.autograd.grad(
        (torch.nn.functional.layer_norm(exact.movedim(1, -1), (64,), w, b, 1e-5) * 2).sum(), exact)[0]
    torch.testing.assert_close(grad, want_grad)

    class Model(torch.nn.Module):
        def forward(self, x, w, b):
            return normalize(x, w, b)

    exported = torch.export.export(Model(), (x, w, b))
    assert "generated.layer_norm" in str(exported.graph)
    torch.testing.assert_close(exported.module()(x, w, b)[0], want * 2)


def test_rows_one_element_apart_take_a_tile_across_the_rows(monkeypatch):
    # dim=0 of a matrix: the moved view's rows are one element apart, read in place (no copy) by
    # a tile of many rows and short blocks along them, the longer row looping; forward and backward.
    import generated
    from tilegen.runtime import ops

    launched = []
    monkeypatch.setattr(ops, "across_rows_config", lambda block, n: launched.append(n) or
                        {block: 16, "ROWS": 64, "num_warps": 4, "UNROLL": 0})
    x, r = random(150, 97, seed=11).float(), random(150, 97, seed=12).float()
    w, b = random(150, seed=13).float(), random(150, seed=14).float()

    def norm(t, *params):  # PyTorch's over axis 0
        return torch.nn.functional.layer_norm(t.t(), (150,), *params).t()

    cases = {
        "softmax": (lambda x, w, b: generated.softmax(x, dim=0), lambda x, w, b: torch.softmax(x, 0)),
        "log_softmax": (lambda x, w, b: generated.log_softmax(x, dim=0), lambda x, w, b: torch.log_softmax(x, 0)),
        "layer_norm": (lambda x, w, b: generated.layer_norm(x, w, b, dim=0)[0], lambda x, w, b: norm(x, w, b)),
        "rms_norm": (lambda x, w, b: generated.rms_norm(x, w, dim=0)[0],
                     lambda x, w, b: torch.nn.functional.rms_norm(x.t(), (150,), w, 1e-6).t()),
        "add_rms_norm": (lambda x, w, b: generated.add_rms_norm(x, r, w, dim=0)[1],
                         lambda x, w, b: torch.nn.functional.rms_norm((x + r).t(), (150,), w, 1e-6).t()),
    }
    for name, (op, oracle) in cases.items():
        launched.clear()
        leaves = [t.clone().requires_grad_() for t in (x, w, b)]
        exact = [t.double().requires_grad_() for t in (x, w, b)]
        got, want = op(*leaves), oracle(*exact)
        assert launched, f"{name}: rows one element apart did not take the tile across them"
        torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-5)
        seed = random(*want.shape, seed=15)
        for g, e in zip(torch.autograd.grad(got, leaves, seed.float(), allow_unused=True),
                        torch.autograd.grad(want, exact, seed, allow_unused=True)):
            assert (g is None) == (e is None), name
            if e is not None:
                torch.testing.assert_close(g.double(), e, atol=1e-4, rtol=1e-4)


def test_an_out_that_shares_memory_with_an_input_is_refused_as_on_the_last_axis(ops):
    # The op reads a copy of x there (its channels are strided), which would hide the overlap.
    x, t = random(4, 30, 3), random(4, 3, positive=True)
    with pytest.raises(ValueError, match=r"tempered_softmax: argument 'out\[0\]' shares memory with input 'x'"):
        ops.tempered_softmax(x, t, dim=1, out=(x, torch.empty(4, 3, dtype=x.dtype, device=DEVICE)))
    with pytest.raises(ValueError, match=r"argument 'out\[1\]' shares memory with input 't'"):
        ops.tempered_softmax(x, t, dim=1, out=(torch.empty_like(x), t))


def test_channels_of_a_batch_are_copied_with_the_axis_outermost_and_read_across_the_rows(monkeypatch):
    # [B, C, HW] over C: the rows (B, HW) do not merge into one stride; the copy puts C outermost,
    # which leaves them one element apart for the tile across the rows. Too few rows: row-major.
    import generated
    from tilegen.runtime import ops

    launched = []
    monkeypatch.setattr(ops, "across_rows_config", lambda block, n: launched.append(n) or
                        {block: 16, "ROWS": 16, "num_warps": 4, "UNROLL": 0})
    x, w, b = random(3, 40, 12, seed=21).float(), random(40, seed=22).float(), random(40, seed=23).float()
    leaves = [t.clone().requires_grad_() for t in (x, w, b)]
    y, mean, rstd = generated.layer_norm(*leaves, dim=1)
    exact = [t.double().requires_grad_() for t in (x, w, b)]
    want = torch.nn.functional.layer_norm(exact[0].movedim(1, -1), (40,), *exact[1:]).movedim(-1, 1)
    assert launched == [40], launched
    torch.testing.assert_close(y.double(), want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(mean.double(), x.double().mean(1), atol=1e-5, rtol=1e-5)
    seed = random(*y.shape, seed=24)
    for got, expected in zip(torch.autograd.grad(y, leaves, seed.float()), torch.autograd.grad(want, exact, seed)):
        torch.testing.assert_close(got.double(), expected, atol=1e-4, rtol=1e-4)
    launched.clear()
    torch.testing.assert_close(generated.softmax(x[:, :, :4], dim=1), torch.softmax(x[:, :, :4], 1))
    assert launched == []  # 12 rows: fewer than the tile holds


def test_a_backward_that_sums_columns_reads_rows_one_element_apart_from_row_major_copies(monkeypatch):
    # Its configs go a few rows a step along the rows; the forward takes the tile across them.
    import generated
    from tilegen.runtime import ops

    seen = {}
    launch = ops.ReductionOp._launch

    def recording(self, views, *args, **kwargs):
        seen[self.name] = [(role, v.stride()) for v, role in zip(views, self.roles) if role == "element"]
        return launch(self, views, *args, **kwargs)

    monkeypatch.setattr(ops.ReductionOp, "_launch", recording)
    module = importlib.import_module("generated.layer_norm")
    for op in (module._OP, module._BACKWARD):  # (on a GPU an earlier call of these shapes was learned)
        op.call_path.forget()
    x = random(150, 97, seed=31).float().requires_grad_()
    w, b = random(150, seed=32).float().requires_grad_(), random(150, seed=33).float().requires_grad_()
    y = generated.layer_norm(x, w, b, dim=0)[0]
    torch.autograd.grad(y.sum(), (x, w, b))
    assert seen["layer_norm"][0] == ("element", (1, 97))  # x, read in place
    # (the loss's gradient, from .sum(), is broadcast: stride 0)
    assert all(stride[1] == 1 or stride == (0, 0) for _, stride in seen["layer_norm_backward"]), seen["layer_norm_backward"]


def test_export_with_dims_over_the_other_axes():
    # LayerNorm over the channels of [B, C, HW] exported with B and HW dynamic: one graph serves
    # other batch and spatial sizes (the axis moves, the rows are copied or read across, as the
    # sizes the trace stands for allow, with no guard on them).
    import generated

    def model(x, w, b):
        return generated.layer_norm(x, w, b, dim=1)[0] * 2

    class Model(torch.nn.Module):
        def forward(self, x, w, b):
            return model(x, w, b)

    w, b = random(6, seed=31), random(6, seed=32)
    batch, spatial = torch.export.Dim("batch", min=2, max=64), torch.export.Dim("spatial", min=2, max=4096)
    exported = torch.export.export(Model(), (random(4, 6, 5, seed=33), w, b),
                                   dynamic_shapes=({0: batch, 2: spatial}, None, None))
    for shape in [(7, 6, 9), (2, 6, 300)]:
        x = random(*shape, seed=34)
        torch.testing.assert_close(exported.module()(x, w, b), model(x, w, b))
