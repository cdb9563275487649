"""tilegen.runtime.kernel_math: the language's functions Triton has no accurate portable form of,
held to float64 PyTorch in ulps of each dtype (run in the interpreter, or compiled on a GPU), and
reached through a spec where their old forms went wrong."""

from __future__ import annotations

import math
import os

import pytest
import torch
import triton
import triton.language as tl

from tests.conftest import built_package
from tilegen.runtime.kernel_math import precise_tanh

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
needs_backend = pytest.mark.skipif(not INTERPRET and not torch.cuda.is_available(),
                                   reason="needs a CUDA GPU, or TRITON_INTERPRET=1")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@triton.jit
def _tanh_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    in_bounds = offsets < n
    tl.store(y_ptr + offsets, precise_tanh(tl.load(x_ptr + offsets, mask=in_bounds)), mask=in_bounds)


def _tanh(x):
    y = torch.empty_like(x)
    _tanh_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
    return y


def _ulps(got, x):
    """|got - tanh(x)| in units of the last place of tanh(x) in got's dtype (tanh in float64)."""
    want = torch.tanh(x.double())
    spacing = torch.finfo(got.dtype).eps * want.abs().clamp_min(torch.finfo(got.dtype).tiny)
    # eps * |v| is between one and two units of v's last place: a bound of k such units is
    # checked as at most k here.
    return ((got.double() - want).abs() / spacing)


# Every magnitude from the smallest normal to where tanh is 1, both signs, dense across the
# switch between the two forms (|x| = 0.55) and near 0, where 2 * sigmoid(2x) - 1 was ~eps / |x|.
def _points(dtype):
    tiny = torch.finfo(dtype).tiny
    magnitudes = torch.cat([torch.logspace(math.log10(tiny * 4), 1.3, 20000, dtype=torch.float64),
                            torch.linspace(0.5, 0.6, 2001, dtype=torch.float64)])
    return torch.cat([magnitudes, -magnitudes]).to(dtype)


# (dtype, the most ulps allowed): float32 measured at 1 (interpreter); a GPU's exp is within 2 ulps.
@needs_backend
@pytest.mark.parametrize("dtype, ulps", [(torch.float32, 3), (torch.float64, 8), (torch.float16, 1), (torch.bfloat16, 1)])
def test_tanh_is_within_a_few_ulps_everywhere(dtype, ulps):
    x = _points(dtype).to(DEVICE)
    err = _ulps(_tanh(x), x)
    worst = int(err.argmax())
    assert err.max() <= ulps, f"tanh({x[worst].item()!r}) is {err.max().item():.1f} ulps off"


@needs_backend
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_tanh_of_signed_zeros_infinities_and_nan(dtype):
    x = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 100.0, -100.0], dtype=dtype, device=DEVICE)
    got, want = _tanh(x), torch.tanh(x)
    torch.testing.assert_close(got, want, equal_nan=True, rtol=0, atol=0)
    assert torch.equal(torch.signbit(got[:2]), torch.signbit(want[:2])), "tanh(-0) is -0"


NEAR_ZERO = """
op: tanh_near_zero
kind: elementwise
doc: 1 / tanh and tanh(x) / x, ill-conditioned wherever tanh is not accurate relative to itself.
inputs:
  a: {dtype: [float32, float64]}
outputs:
  coth: {dtype: a}
  ratio: {dtype: a}
compute:
  coth: 2.5 / tanh(a)
  ratio: tanh(a) / a
tiles:
  N: {block: BLOCK, sizes: [256]}
"""


@needs_backend
@pytest.mark.parametrize("dtype, ulps", [(torch.float32, 4), (torch.float64, 16)])
def test_a_spec_dividing_by_tanh_near_zero_is_accurate(tmp_path, dtype, ulps):
    with built_package(tmp_path, "near_zero", {"tanh_near_zero.yaml": NEAR_ZERO}) as package:
        a = torch.cat([torch.logspace(-7, -1, 600, dtype=torch.float64), -torch.logspace(-7, -1, 600, dtype=torch.float64)])
        coth, ratio = package.tanh_near_zero(a.to(dtype).to(DEVICE))
    exact = a.to(dtype).double()  # the input as the op sees it
    for got, want in ((coth, 2.5 / torch.tanh(exact)), (ratio, torch.tanh(exact) / exact)):
        err = (got.cpu().double() - want).abs() / (torch.finfo(dtype).eps * want.abs())
        assert err.max() <= ulps, f"{err.max().item():.1f} ulps off at a = {exact[int(err.argmax())].item()!r}"
