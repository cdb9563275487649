"""fp8 matmul operands: what runs where, and what is refused (the kernels themselves run in the
generated tests, on a GPU with fp8 tensor cores: Triton's interpreter has no fp8 dot)."""

from __future__ import annotations

import pytest
import torch
import triton.language as tl

import tilegen.runtime as rt
from tilegen.dtypes import DTYPES, FP8_DTYPES

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _inputs(m=32, n=48, k=64):
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(m, k, generator=generator).to(torch.float8_e4m3fn).to(DEVICE)
    b = torch.randn(n, k, generator=generator).to(torch.float8_e4m3fn).to(DEVICE).t()  # K-major, as fp8 weights
    return [a, b, torch.rand(m, device=DEVICE) + 0.5, torch.rand(n, device=DEVICE) + 0.5]


def test_fp8_dtypes_name_triton_and_pytorch_types():
    for name in FP8_DTYPES:
        assert isinstance(getattr(tl, DTYPES[name].triton[3:]), tl.dtype)
        assert getattr(torch, DTYPES[name].torch[6:]).itemsize == DTYPES[name].itemsize == 1


@pytest.mark.skipif(not rt.INTERPRET, reason="checks the interpreter's refusal")
def test_the_interpreter_refuses_fp8_rather_than_multiplying_wrong():
    from generated import fp8_scaled_mm

    with pytest.raises(TypeError, match="fp8_scaled_mm: argument 'a' is float8_e4m3fn, which Triton's interpreter "
                                        "cannot multiply"):
        fp8_scaled_mm(*_inputs())


def test_an_fp8_matmul_refuses_inputs_that_require_grad():
    from generated import fp8_scaled_mm

    inputs = _inputs()
    inputs[2].requires_grad_()
    with pytest.raises(RuntimeError, match="fp8_scaled_mm: argument 'a_scale' requires grad, but an fp8 matmul has "
                                           "no backward: its operands are 8-bit floats"):
        fp8_scaled_mm(*inputs)


FP8_DOTS = rt.checks.fp8_dots()


@pytest.mark.skipif(not FP8_DOTS, reason="needs fp8 tensor cores")
def test_row_wise_and_per_tensor_scales_match_torch_scaled_mm():
    # torch._scaled_mm's row-wise scaling, and its per-tensor one (0-d scales, broadcast to M and N),
    # both accumulating as the spec asks (fast_accum). Two fast accumulations of K = 384 products,
    # in different orders, then rounded to bfloat16: 0.026 apart at most in the runs so far.
    from generated import fp8_scaled_mm

    a, b, row, col = _inputs(256, 512, 384)
    want = torch._scaled_mm(a, b, scale_a=row[:, None], scale_b=col[None, :], out_dtype=torch.bfloat16,
                            use_fast_accum=True)
    torch.testing.assert_close(fp8_scaled_mm(a, b, row, col), want, atol=5e-2, rtol=2e-2)
    one_a, one_b = torch.tensor(0.75, device=DEVICE), torch.tensor(1.5, device=DEVICE)
    want = torch._scaled_mm(a, b, scale_a=one_a, scale_b=one_b, out_dtype=torch.bfloat16, use_fast_accum=True)
    got = fp8_scaled_mm(a, b, one_a, one_b)
    torch.testing.assert_close(got, want, atol=5e-2, rtol=2e-2)


@pytest.fixture(scope="module")
def precise_package(tmp_path_factory):
    """fp8_scaled_mm with the default precision (ieee): each K step added into float32."""
    from tests.conftest import REPO, built_package

    text = (REPO / "specs" / "fp8_scaled_mm.yaml").read_text()
    assert "  precision: fast_accum\n" in text
    text = text.replace("  precision: fast_accum\n", "").replace("op: fp8_scaled_mm", "op: fp8_precise_mm")
    with built_package(tmp_path_factory.mktemp("fp8"), "fp8_precise", {"fp8_precise_mm.yaml": text}) as package:
        yield package


def test_an_fp8_dot_adds_each_k_step_into_float32_unless_the_spec_says_fast_accum(precise_package):
    import importlib
    import inspect

    precise = inspect.getsource(importlib.import_module("fp8_precise.fp8_precise_mm"))
    fast = inspect.getsource(importlib.import_module("generated.fp8_scaled_mm"))
    assert "max_num_imprecise_acc=BK" in precise and "max_num_imprecise_acc" not in fast
    if not FP8_DOTS:
        return
    # Precise accumulation against the float64 product of the same 8-bit values: within a
    # bfloat16 rounding of the largest result.
    a, b, row, col = _inputs(128, 256, 4096)
    exact = (a.double() @ b.double()) * row.double()[:, None] * col.double()[None, :]
    error = (precise_package.fp8_precise_mm(a, b, row, col).double() - exact).abs().max().item()
    assert error <= 1e-2 * exact.abs().max().item(), error


def test_fp8_operands_take_descriptors_only_where_both_tiles_are_k_major():
    # The tensor cores' 8-bit path reads A and B K-major: A row-major and B column-major
    # (torch._scaled_mm's layout) load through descriptors; any other fp8 layout, through pointers.
    from tilegen.runtime.layout import TensorDescriptor, tma_loads_fit

    if TensorDescriptor is None or not (rt.INTERPRET or torch.cuda.get_device_capability()[0] >= 9):
        pytest.skip("needs tensor descriptors (Triton 3.4 or later; a GPU of compute capability 9)")
    a, b = _inputs()[:2]
    assert tma_loads_fit(a, b)
    assert not tma_loads_fit(a, b.contiguous())  # B row-major: N-major tiles
    assert not tma_loads_fit(a.t().contiguous().t(), b)  # A column-major: M-major tiles
    assert tma_loads_fit(a.to(torch.float16), b.contiguous().to(torch.float16))  # 16-bit: either way


@pytest.mark.skipif(not FP8_DOTS, reason="needs fp8 tensor cores")
@pytest.mark.parametrize("persistent", [0, 1])
def test_fp8_through_descriptors_matches_torch_scaled_mm(launches, persistent):
    # Tiled and persistent launches of a descriptor config, edges on every axis; column-major B is
    # fp8's own layout, so the config's launch stands (no persistent rule for transposed operands).
    from generated import fp8_scaled_mm
    from generated.fp8_scaled_mm import _OP

    a, b, row, col = _inputs(200, 304, 400)
    want = torch._scaled_mm(a, b, scale_a=row[:, None], scale_b=col[None, :], out_dtype=torch.bfloat16,
                            use_fast_accum=True)
    config = dict(BM=128, BN=128, BK=128, SPLIT_K=1, num_warps=8, num_stages=3, TMA=1, PERSISTENT=persistent)
    with _OP.configs.forcing(config):
        got = fp8_scaled_mm(a, b, row, col)
    constexprs = launches[-1].constexprs
    assert constexprs["USE_TMA"] and constexprs["TRANS_B"] and not constexprs["TRANS_A"]
    assert constexprs["PERSISTENT"] == bool(persistent)
    torch.testing.assert_close(got, want, atol=5e-2, rtol=2e-2)
