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


@pytest.mark.skipif(rt.INTERPRET or not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 9),
                    reason="needs fp8 tensor cores")
def test_row_wise_and_per_tensor_scales_match_torch_scaled_mm():
    # torch._scaled_mm's row-wise scaling, and its per-tensor one (a scale expanded along M and N).
    from generated import fp8_scaled_mm

    a, b, row, col = _inputs(256, 512, 384)
    want = torch._scaled_mm(a, b, scale_a=row[:, None], scale_b=col[None, :], out_dtype=torch.bfloat16)
    torch.testing.assert_close(fp8_scaled_mm(a, b, row, col), want, atol=2e-2, rtol=1.6e-2)
    one_a, one_b = torch.tensor(0.75, device=DEVICE), torch.tensor(1.5, device=DEVICE)
    want = torch._scaled_mm(a, b, scale_a=one_a, scale_b=one_b, out_dtype=torch.bfloat16)
    got = fp8_scaled_mm(a, b, one_a.expand(256), one_b.expand(512))
    torch.testing.assert_close(got, want, atol=2e-2, rtol=1.6e-2)
