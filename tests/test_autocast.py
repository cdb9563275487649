"""torch.autocast: inside a mixed-precision region a matmul op's inputs are cast to the region's
dtype, as torch.matmul's and F.linear's are (tilegen.runtime.amp); other kinds, and float8
products, take their inputs as given."""

import pytest
import torch

import tilegen.runtime as rt

CUDA = torch.cuda.is_available()
DEVICE = "cuda" if CUDA else "cpu"
# Triton's interpreter multiplies float16 correctly but not bfloat16: a CPU region asks for float16.
HALF = torch.bfloat16 if CUDA else torch.float16


def leaves(*shapes, dtype=torch.float32):
    generator = torch.Generator().manual_seed(len(shapes))
    return [torch.randn(*shape, generator=generator, dtype=dtype).to(DEVICE).requires_grad_() for shape in shapes]


def region(enabled=True):
    return torch.autocast(DEVICE, dtype=HALF, enabled=enabled)


def test_a_matmul_in_a_region_runs_on_its_inputs_cast_and_its_gradients_reach_float32_leaves():
    from generated import matmul_bias_gelu

    a, b, bias = leaves((64, 32), (32, 48), (48,))
    with region():
        c = matmul_bias_gelu(a, b, bias)
    assert c.dtype == HALF
    grad = torch.randn(c.shape, generator=torch.Generator().manual_seed(7)).to(DEVICE, HALF)
    got = torch.autograd.grad(c, (a, b, bias), grad)
    cast = [t.detach().to(HALF).requires_grad_() for t in (a, b, bias)]
    expected = matmul_bias_gelu(*cast)  # the same kernel on inputs cast by hand
    torch.testing.assert_close(c, expected, rtol=0, atol=0)
    for mine, theirs in zip(got, torch.autograd.grad(expected, cast, grad)):
        assert mine.dtype == torch.float32
        torch.testing.assert_close(mine, theirs.float(), rtol=0, atol=0)


def test_a_half_activation_meets_a_float32_weight_as_in_torch_matmul():
    # An activation an earlier autocast op made half precision, a float32 parameter: outside a
    # region the op refuses the pair (its operands share a dtype); inside, both are cast.
    from generated import matmul_relu

    a, b = leaves((40, 24), (24, 56))
    with region():
        c = matmul_relu(a.to(HALF), b)
        assert c.dtype == HALF and torch.matmul(a.to(HALF), b).dtype == HALF
    torch.testing.assert_close(c, matmul_relu(a.to(HALF), b.to(HALF)), rtol=0, atol=0)
    with pytest.raises(TypeError, match="matmul_relu: argument 'b'"):
        matmul_relu(a.to(HALF), b)


def test_a_batched_matmul_and_its_epilogue_input_are_cast_too():
    from generated import bmm_bias_silu

    a, b, bias = leaves((3, 16, 32), (3, 32, 24), (24,))
    with region():
        c = bmm_bias_silu(a, b, bias)
    assert c.dtype == HALF
    torch.testing.assert_close(c, bmm_bias_silu(a.to(HALF), b.to(HALF), bias.to(HALF)), rtol=0, atol=0)


def test_outside_a_region_or_with_it_disabled_nothing_is_cast():
    from generated import matmul_relu

    a, b = leaves((16, 16), (16, 16))
    assert matmul_relu(a, b).dtype == torch.float32
    with region(enabled=False):
        assert matmul_relu(a, b).dtype == torch.float32


def test_elementwise_ops_and_reductions_take_their_inputs_as_given():
    # As PyTorch's pointwise ops (on none of autocast's lists); a reduction's math is float32 on
    # half inputs already.
    from generated import rms_norm, scaled_silu_mul

    x, w = leaves((8, 32), (32,))
    with region():
        assert scaled_silu_mul(x, x, alpha=2.0).dtype == torch.float32
        assert rms_norm(x, w)[0].dtype == torch.float32
        assert rms_norm(x.to(HALF), w.to(HALF))[0].dtype == HALF


def test_the_cast_rule():
    half, single = (torch.float16, torch.bfloat16, torch.float32), (torch.float32,)
    fp8 = (torch.float8_e4m3fn, torch.float8_e5m2)
    a, b, scale = torch.randn(4, 4), torch.randn(4, 4), torch.rand(4)
    with torch.autocast("cpu", dtype=torch.float16):
        # An input whose dtypes lack the region's is left (a float32 scale), float64 too.
        got = rt.autocast_inputs((a, b, scale, scale.double()), (half, half, single, half), (0, 1))
        assert [t.dtype for t in got] == [torch.float16, torch.float16, torch.float32, torch.float64]
        # Operands that cannot take it (float8): nothing is cast, their scales included.
        quantized = (a.to(fp8[0]), b.to(fp8[0]), scale)
        assert rt.autocast_inputs(quantized, (fp8, fp8, half), (0, 1)) is quantized
        # Operands at other places than the first two.
        got = rt.autocast_inputs((scale, a, b), (half, half, half), (1, 2))
        assert [t.dtype for t in got] == [torch.float16] * 3
        # A wrong argument is left for the op's own checks to name.
        assert rt.autocast_inputs(("a", b), (half, half), (0, 1)) == ("a", b)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=False):
        assert rt.autocast_inputs((a, b), (half, half), (0, 1)) == (a, b)


@pytest.mark.skipif(not CUDA, reason="the other device type's region needs a GPU")
def test_a_region_of_another_device_type_casts_nothing():
    from generated import matmul_relu

    a, b = leaves((16, 16), (16, 16))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert matmul_relu(a, b).dtype == torch.float32


@pytest.mark.skipif(not CUDA, reason="float8 products need a GPU (Triton's interpreter has no float8 dot)")
def test_a_float8_product_is_left_as_quantized():
    from generated import fp8_scaled_mm

    a = torch.randn(64, 32, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(48, 32, device="cuda").to(torch.float8_e4m3fn).t()
    a_scale, b_scale = torch.rand(64, device="cuda") + 0.5, torch.rand(48, device="cuda") + 0.5
    expected = fp8_scaled_mm(a, b, a_scale, b_scale)
    with torch.autocast("cuda", dtype=torch.float16):
        got = fp8_scaled_mm(a, b, a_scale, b_scale)
    assert got.dtype == expected.dtype
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


@pytest.mark.skipif(not CUDA, reason="torch.compile of Triton kernels needs a GPU")
def test_a_compiled_region_casts_as_the_eager_one():
    from generated import matmul_bias_gelu

    a, b, bias = leaves((128, 64), (64, 96), (96,))

    def step(a, b, bias):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return matmul_bias_gelu(a, b, bias)

    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True)(a, b, bias)
    eager = step(a, b, bias)
    assert compiled.dtype == eager.dtype == torch.bfloat16
    torch.testing.assert_close(compiled, eager)
    grads = torch.autograd.grad(compiled.float().sum(), (a, b, bias))
    expected = torch.autograd.grad(eager.float().sum(), (a, b, bias))
    for got, want in zip(grads, expected):
        # (bfloat16 math on both sides, whose traced and eager launches may take other configs and
        # so add in other orders: they agree to bfloat16's rounding.)
        assert got.dtype == torch.float32
        torch.testing.assert_close(got, want, rtol=2e-2, atol=1e-2 * want.abs().max().item())


@pytest.mark.skipif(not CUDA, reason="the compiled call path serves GPU calls only")
def test_repeat_calls_in_a_region_are_cast_each_time():
    # The compiled call path learns the cast inputs' signature; a repeat call still casts first.
    from generated import matmul_relu

    a, b = leaves((256, 128), (128, 192))
    with region():
        results = [matmul_relu(a, b) for _ in range(3)]
    for result in results:
        assert result.dtype == HALF
        torch.testing.assert_close(result, matmul_relu(a.to(HALF), b.to(HALF)), rtol=0, atol=0)
