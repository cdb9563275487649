"""Batched matmul: batch axes that broadcast as torch.matmul's (runtime/batch.py), and a variant
spec whose epilogue inputs lie along the batch ([..., M, N]) or along M only ([M]), which keeps a
batch from folding into M."""

from __future__ import annotations

import re

import pytest
import torch

from tilegen.runtime.batch import batch_shape, batch_stride, folded, matrices
from tests.conftest import assert_generated_tests_pass, built_package

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def test_batch_axes_broadcast_as_torch_matmul_and_errors_name_the_argument():
    a, b = torch.empty(2, 1, 5, 4), torch.empty(3, 4, 6)
    assert batch_shape("op", (("a", a), ("b", b)), (2, 2)) == (2, 3)
    assert batch_shape("op", (("a", torch.empty(5, 4)), ("b", b)), (2, 2)) == (3,)
    assert batch_shape("op", (("a", torch.empty(5, 4)), ("b", torch.empty(4, 6))), (2, 2)) == ()
    with pytest.raises(ValueError, match=r"op: argument 'b' has batch axes \(3,\), which do not broadcast with "
                                         r"\(2,\) \(the batch axes of 'a'; batch axes broadcast as in torch.matmul\)"):
        batch_shape("op", (("a", torch.empty(2, 5, 4)), ("b", b)), (2, 2))


@pytest.mark.parametrize("make, batch, want", [
    (lambda: torch.empty(6, 5, 4), (6,), 20),                              # contiguous
    (lambda: torch.empty(2, 3, 5, 4), (2, 3), 20),                         # two axes that merge
    (lambda: torch.empty(5, 4), (2, 3), 0),                                # no batch axes: broadcast
    (lambda: torch.empty(1, 5, 4).expand(6, 5, 4), (6,), 0),               # expanded: stride 0
    (lambda: torch.empty(5, 6, 4).transpose(0, 1), (6,), 4),               # batch between rows
    (lambda: torch.empty(3, 5, 4), (2, 3), None),                          # broadcast along the first of two
    (lambda: torch.empty(3, 2, 5, 4).transpose(0, 1), (2, 3), None),       # axes in the other order
])
def test_a_batch_flattens_into_one_stride_where_the_layout_allows(make, batch, want):
    tensor = make()
    assert batch_stride(tensor, batch, 2) == want
    view, copied = matrices(tensor, batch, 2)
    assert copied == (want is None)
    count = 1
    for size in batch:
        count *= size
    assert view.shape == (count, 5, 4)
    torch.testing.assert_close(view, tensor.expand(*batch, 5, 4).reshape(count, 5, 4), rtol=0, atol=0, equal_nan=True)


def test_a_batch_folds_into_rows_only_where_every_tensor_agrees():
    a = torch.arange(3 * 5 * 4.0).view(3, 5, 4)
    b = torch.arange(4 * 6.0).view(1, 4, 6).expand(3, 4, 6)
    c = torch.empty(3, 5, 6)
    views = folded([a, b, c], 5, (True, False, True))
    assert [tuple(v.shape) for v in views] == [(15, 4), (4, 6), (15, 6)]
    torch.testing.assert_close(views[0], a.reshape(15, 4))
    assert folded([a, torch.empty(3, 4, 6), c], 5, (True, False, True)) is None  # b varies along the batch
    assert folded([a.transpose(0, 1).contiguous().transpose(0, 1), b, c], 5, (True, False, True)) is None


BATCHED_RESIDUAL = """\
op: bmm_residual
kind: matmul
inputs:
  x: {shape: [..., M, K], dtype: [float32]}
  w: {shape: [..., K, N], dtype: x}
  residual: {shape: [..., M, N], dtype: x}
  row_scale: {shape: [M], dtype: x}
outputs:
  y: {shape: [..., M, N], dtype: x}
  h: {shape: [..., M, N], dtype: x}
scalars:
  alpha: {type: float, default: 0.5}
tiles:
  M: {block: BM, sizes: [16, 32]}
  N: {block: BN, sizes: [16, 32]}
  K: {block: BK, sizes: [16]}
epilogue:
  h: tanh(acc) * row_scale
  y: residual + alpha * tanh(acc) * row_scale
"""


@pytest.fixture(scope="module")
def variant(tmp_path_factory):
    with built_package(tmp_path_factory.mktemp("batched"), "batched_ops", {"bmm_residual.yaml": BATCHED_RESIDUAL}) as module:
        yield module


def _oracle(x, w, residual, row_scale, alpha=0.5):
    h = torch.tanh(x @ w) * row_scale.reshape(-1, 1)  # [M] (or one value for every row) as a column
    return residual + alpha * h, h


@pytest.mark.parametrize("x_batch, w_batch, r_batch", [
    ((3,), (3,), (3,)),        # every tensor batched
    ((3,), (), (3,)),          # one w for every matrix
    ((2, 1), (1, 3), (3,)),    # operands broadcast each other; the residual along the last axis
    ((4,), (4,), ()),          # one residual for every matrix
], ids=str)
def test_epilogue_inputs_along_the_batch_or_along_m_compute_and_differentiate(variant, x_batch, w_batch, r_batch):
    generator = torch.Generator().manual_seed(0)
    M, N, K = 37, 21, 19

    def make(*shape):
        return torch.randn(shape, generator=generator).to(DEVICE).requires_grad_()

    x, w, r, s = make(*x_batch, M, K), make(*w_batch, K, N), make(*r_batch, M, N), make(M)
    y, h = variant.bmm_residual(x, w, r, s, alpha=0.25)
    want_y, want_h = _oracle(*(t.detach().double().requires_grad_() for t in (x, w, r, s)), alpha=0.25)
    torch.testing.assert_close(y.double(), want_y, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(h.double(), want_h, atol=1e-4, rtol=1e-4)
    seeds = (torch.randn(y.shape, generator=generator).to(DEVICE), torch.randn(h.shape, generator=generator).to(DEVICE))
    got = torch.autograd.grad((y, h), (x, w, r, s), seeds)
    leaves = [t.detach().double().requires_grad_() for t in (x, w, r, s)]
    want = torch.autograd.grad(_oracle(*leaves, alpha=0.25), leaves, [g.double() for g in seeds])
    for name, g, e, t in zip("xwrs", got, want, (x, w, r, s)):
        assert g.shape == t.shape, name
        torch.testing.assert_close(g.double(), e, atol=2e-4, rtol=2e-4, msg=lambda m: f"gradient of {name}: {m}")


@pytest.mark.parametrize("r_shape", [(21,), (1, 21), (37, 1), (3, 1, 21), (2, 1, 37, 1), ()], ids=str)
def test_a_batched_epilogue_input_broadcasts_on_its_matrix_axes_too(variant, r_shape):
    # residual [..., M, N] given as a row [N], a column [M, 1], a row per matrix [B, 1, N] or one
    # value, as PyTorch broadcasts `residual + ...`: read through a stride-0 view, its batch axes
    # broadcast with the operands', its gradient summed back to the shape it came in.
    generator = torch.Generator().manual_seed(3)
    M, N, K = 37, 21, 19

    def make(*shape):
        return torch.randn(shape, generator=generator).to(DEVICE).requires_grad_()

    x, w, r, s = make(3, M, K), make(K, N), make(*r_shape), make(M)
    y, h = variant.bmm_residual(x, w, r, s)
    leaves = [t.detach().double().requires_grad_() for t in (x, w, r, s)]
    want_y, want_h = _oracle(*leaves)
    want_h = want_h.expand(want_y.shape)  # (every output has the batch of all the inputs, as y's)
    assert y.shape == h.shape == want_y.shape
    torch.testing.assert_close(y.double(), want_y, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(h.double(), want_h, atol=1e-4, rtol=1e-4)
    seeds = (torch.randn(y.shape, generator=generator).to(DEVICE), torch.randn(h.shape, generator=generator).to(DEVICE))
    got = torch.autograd.grad((y, h), (x, w, r, s), seeds)
    want = torch.autograd.grad((want_y, want_h), leaves, [g.double() for g in seeds])
    for name, g, e, t in zip("xwrs", got, want, (x, w, r, s)):
        assert g.shape == t.shape, name
        torch.testing.assert_close(g.double(), e, atol=2e-4, rtol=2e-4, msg=lambda m: f"gradient of {name}: {m}")


@pytest.mark.parametrize("r_shape", [(37, 2), (3, 36, 21), (5,)], ids=str)
def test_a_batched_epilogue_input_whose_matrix_axes_do_not_broadcast_is_named(variant, r_shape):
    x, w, s = torch.ones(3, 37, 19, device=DEVICE), torch.ones(19, 21, device=DEVICE), torch.ones(37, device=DEVICE)
    with pytest.raises(ValueError, match=rf"bmm_residual: argument 'residual' has shape {re.escape(str(r_shape))}, "
                                         r"which does not broadcast to \[\.\.\., M, N\] = \(\.\.\., 37, 21\)"):
        variant.bmm_residual(x, w, torch.ones(r_shape, device=DEVICE), s)
    # (batch axes that do not broadcast are named as the operands' are)
    with pytest.raises(ValueError, match=r"bmm_residual: .*'residual'.*batch axes"):
        variant.bmm_residual(x, w, torch.ones(2, 37, 21, device=DEVICE), s)


@pytest.mark.parametrize("scale_shape", [(), (1,)], ids=str)
def test_an_m_input_given_as_one_value_broadcasts_and_its_gradient_sums_back(variant, scale_shape):
    # A per-tensor scale where the spec declares [M]: read through a stride-0 view of its one
    # value (its own batch-free launch as well as inside a batch), its gradient summed to its shape.
    generator = torch.Generator().manual_seed(2)
    M, N, K = 37, 21, 19

    def make(*shape):
        return torch.randn(shape, generator=generator).to(DEVICE).requires_grad_()

    for x_batch in [(), (3,)]:
        x, w, r, s = make(*x_batch, M, K), make(K, N), make(*x_batch, M, N), make(*scale_shape)
        y, h = variant.bmm_residual(x, w, r, s)
        leaves = [t.detach().double().requires_grad_() for t in (x, w, r, s)]
        want_y, want_h = _oracle(*leaves)
        torch.testing.assert_close(y.double(), want_y, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(h.double(), want_h, atol=1e-4, rtol=1e-4)
        got = torch.autograd.grad((y.sum() + h.sum()), (x, w, r, s))
        want = torch.autograd.grad(want_y.sum() + want_h.sum(), leaves)
        for name, g, e, t in zip("xwrs", got, want, (x, w, r, s)):
            assert g.shape == t.shape, name
            torch.testing.assert_close(g.double(), e, atol=2e-4, rtol=2e-4, msg=lambda m: f"gradient of {name}: {m}")
    with pytest.raises(ValueError, match=r"bmm_residual: argument 'row_scale' has shape \(2,\), which does not "
                                         r"broadcast to \[M\] = \(37,\)"):
        variant.bmm_residual(x, w, r, torch.ones(2, device=DEVICE))


def test_the_generated_oracle_and_benchmark_read_an_m_input_as_a_column(variant):
    # [M] epilogue inputs hold one value per output row: PyTorch's broadcasting would line them up
    # with N, so the generated oracle and eager baseline make them columns first.
    import importlib

    oracle = importlib.import_module("batched_ops.tests.test_bmm_residual").reference
    bench = importlib.import_module("batched_ops.bench.bench_bmm_residual").run_torch
    generator = torch.Generator().manual_seed(1)
    x, w, r, s = (torch.randn(shape, generator=generator, dtype=torch.float64)
                  for shape in ((2, 6, 5), (5, 7), (2, 6, 7), (6,)))
    want_y, want_h = _oracle(x, w, r, s, alpha=0.5)
    for got in (oracle(x, w, r, s), bench([x, w, r, s])):
        torch.testing.assert_close(got[0].double(), want_y.double())
        torch.testing.assert_close(got[1].double(), want_h.double())


def test_a_backward_product_folds_whatever_the_epilogue_inputs(variant):
    # The op's own launches keep a batch apart where an [M] input repeats along it; its backward's
    # products read no epilogue input, so [B, M, K] @ [K, N] runs there as one [B*M, K] product.
    import importlib

    op = importlib.import_module("batched_ops.bmm_residual")._OP
    generator = torch.Generator().manual_seed(2)
    x = torch.randn(3, 37, 19, generator=generator).to(DEVICE)
    w = torch.randn(19, 21, generator=generator).to(DEVICE)
    with op.products.recording() as chosen:
        got = op.product(x, w)
    assert [len(key) for key, _ in chosen] == [4]
    torch.testing.assert_close(got, x @ w, atol=1e-4, rtol=1e-4)
    r, s = torch.zeros(37, 21, device=DEVICE), torch.ones(37, device=DEVICE)
    with op.configs.recording() as chosen:
        variant.bmm_residual(x, w, r, s)
    assert [len(key) for key, _ in chosen] == [5]  # the [M] input keeps the forward's batch apart


@pytest.mark.parametrize("a_major", ["rows", "columns"])
@pytest.mark.parametrize("b_major", ["rows", "columns"])
def test_a_batch_loads_through_3d_descriptors_a_matrix_a_box(launches, a_major, b_major):
    # Descriptor configs read a batch that does not fold through [matrices, rows, cols]
    # descriptors, in either orientation of each operand, with edges on M, N and K; a matrix
    # broadcast over the batch (stride 0, no such descriptor) keeps its launch on pointers.
    import importlib

    from tilegen.runtime.layout import TensorDescriptor

    if TensorDescriptor is None or (DEVICE == "cuda" and torch.cuda.get_device_capability()[0] < 9):
        pytest.skip("needs tensor descriptors (Triton 3.4 or later; a GPU of compute capability 9)")
    module = importlib.import_module("generated.bmm")
    generator = torch.Generator().manual_seed(4)

    def operand(batch, rows, cols, major):
        t = torch.randn(*batch, rows, cols, generator=generator).to(DEVICE)
        return t if major == "rows" else t.transpose(-2, -1).contiguous().transpose(-2, -1)

    x, w = operand((3,), 40, 24, a_major), operand((3,), 24, 36, b_major)
    config = dict(BM=32, BN=32, BK=16, SPLIT_K=1, num_warps=4, num_stages=2, TMA=1)
    with module._OP.configs.forcing(config):
        torch.testing.assert_close(module.bmm(x, w), x @ w, atol=1e-4, rtol=1e-4)
        args, constexprs = launches[-1]
        assert constexprs["USE_TMA"] and constexprs["BATCHED"]
        assert (constexprs["TRANS_A"], constexprs["TRANS_B"]) == (a_major == "columns", b_major == "columns")
        assert [len(arg.shape) for arg in args if isinstance(arg, TensorDescriptor)] == [3, 3]
        shared = operand((), 40, 24, a_major)  # one A for every matrix of the batch: stride 0
        torch.testing.assert_close(module.bmm(shared, w), shared @ w, atol=1e-4, rtol=1e-4)
        assert launches[-1].constexprs["BATCHED"] and not launches[-1].constexprs["USE_TMA"]
    # TMA_STORE: the output goes out through a 3-D descriptor too, which drops what lies past
    # each matrix's edges (40 x 36 in 32 x 32 tiles).
    with module._OP.configs.forcing(dict(config, TMA_STORE=1)):
        torch.testing.assert_close(module.bmm(x, w), x @ w, atol=1e-4, rtol=1e-4)
        args, constexprs = launches[-1]
        assert constexprs["USE_TMA_STORE"] and constexprs["BATCHED"]
        assert [len(arg.shape) for arg in args if isinstance(arg, TensorDescriptor)] == [3, 3, 3]


SHARED_WEIGHT = """
op: bmm_resid
kind: matmul
inputs:
  a: {shape: [..., M, K], dtype: [float16, float32]}
  w: {shape: [K, N], dtype: a}
  r: {shape: [..., M, N], dtype: a}
scalars:
  alpha: {type: float, default: 0.5}
outputs:
  c: {shape: [..., M, N], dtype: a}
tiles:
  M: {block: BM, sizes: [32]}
  N: {block: BN, sizes: [32]}
  K: {block: BK, sizes: [32]}
epilogue:
  c: acc + r * alpha
"""


SHARED_LEFT = """
op: left_bmm
kind: matmul
inputs:
  a: {shape: [M, K], dtype: [float16, float32]}
  b: {shape: [..., K, N], dtype: a}
outputs:
  c: {shape: [..., M, N], dtype: a}
tiles:
  M: {block: BM, sizes: [32]}
  N: {block: BN, sizes: [32]}
  K: {block: BK, sizes: [32]}
"""


@pytest.mark.parametrize("op, text", [("bmm_resid", SHARED_WEIGHT), ("left_bmm", SHARED_LEFT)], ids=["b_shared", "a_shared"])
def test_the_generated_tests_of_a_batch_times_one_shared_matrix_pass(tmp_path, op, text):
    # B declared [K, N] (one weight for every matrix of A), or A declared [M, K]: their generated
    # tests gave the shared operand batch axes (29 and 26 failed: the op refuses a 3-D one, as it
    # should) and expected a batch-axes error where the op says it must be 2-D. Each now batches
    # the other operand alone, and its batched launches step through a batch that does not fold.
    # (r [..., M, N] given as one value, as PyTorch broadcasts it: broadcast_to_their_axes.)
    assert_generated_tests_pass(tmp_path, {f"{op}.yaml": text}, [op],
                                "bad_arguments or batched or empty_batch or folds or opcheck or broadcast_to_their_axes")


SCALED_ROWS = """
op: mm_scale_bias
kind: matmul
inputs:
  a: {shape: [M, K], dtype: [float16, float32]}
  b: {shape: [K, N], dtype: a}
  s: {shape: [M], dtype: a}
  bias: {shape: [N], dtype: a}
  r: {shape: [M, N], dtype: a}
outputs:
  c: {shape: [M, N], dtype: a}
tiles:
  M: {block: BM, sizes: [32, 64]}
  N: {block: BN, sizes: [32, 64]}
  K: {block: BK, sizes: [32]}
epilogue:
  c: silu(acc * s + bias) + r
"""


def test_a_row_scale_given_as_one_value_gets_its_gradient_to_its_terms_tolerance(tmp_path):
    # s [M] given as one value: its gradient sums 127 x 65 terms g * silu'(z) * acc, each from the
    # half accumulator the backward reads (as eager's from its half product). Their rounding adds up
    # to about 1e-3 of the terms' norm (0.038 here, eager's 0.001 to 0.044 over eight seeds) while the
    # sum came to -3.67: the generated test held it to 1e-3 of -3.67 and failed a correct op. It
    # is now held to 1e-3 of the terms' norm; the terms in float32 are summed in float32 too.
    assert_generated_tests_pass(tmp_path, {"mm_scale_bias.yaml": SCALED_ROWS}, ["mm_scale_bias"],
                                "broadcast_to_their_axes")


ROW_SCALE_PER_MATRIX = """
op: bmm_scale_rows
kind: matmul
inputs:
  a: {shape: [..., M, K], dtype: [float16, float32]}
  b: {shape: [..., K, N], dtype: a}
  s: {shape: [M], dtype: a}
  t: {shape: [..., M, N], dtype: a}
outputs:
  c: {shape: [..., M, N], dtype: a}
  d: {shape: [..., M, N], dtype: a}
tiles:
  M: {block: BM, sizes: [32]}
  N: {block: BN, sizes: [32]}
  K: {block: BK, sizes: [32]}
epilogue:
  c: acc * s
  d: where(acc * s > t, acc, t)
"""


def test_the_generated_tests_of_a_batch_with_one_row_scale_for_every_matrix_pass(tmp_path):
    # s [M], the same for every matrix: a batch of A cannot fold into M (its rows would need s three
    # times over), where the generated test expected a fold; and d reads s only in its condition,
    # which the terms' tolerance of s's gradient (given as one value) did not allow for.
    assert_generated_tests_pass(tmp_path, {"bmm_scale_rows.yaml": ROW_SCALE_PER_MATRIX}, ["bmm_scale_rows"],
                                "broadcast_to_their_axes or folds_into")
