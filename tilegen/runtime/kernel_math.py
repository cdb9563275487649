"""Functions of the expression language that Triton has no accurate portable form of, written
out in tl ops (the interpreter has no libdevice), and the conversion of an int or bool result to
a float output's dtype. Generated modules import them by their own names
(tilegen.naming.KERNEL_HELPERS)."""

import triton
import triton.language as tl


@triton.jit
def precise_tanh(x):
    """tanh(x) within a few ulps everywhere, ±0, ±inf and NaN as torch.tanh gives them.

    The usual 2 * sigmoid(2x) - 1 carries sigmoid's absolute error, which near 0 is an error
    of ~eps / |x| relative to the result (1 / tanh(x) or tanh(x) / x go wrong). In float32 (half
    dtypes computed in it): an odd polynomial below 0.55, fitted to relative error (1 ulp),
    and 1 - 2 / (1 + exp(2|x|)) above, where exp's relative error passes through unamplified.
    In float64: -expm1(-2|x|) / (2 + expm1(-2|x|)), expm1 by Kahan's (u - 1) * y / log(u),
    whose rounding errors in u cancel (4 ulps measured against 40-digit tanh)."""
    if x.dtype == tl.float64:
        y = -2.0 * tl.abs(x)
        u = tl.exp(y)
        expm1 = tl.where(u == 0.0, -1.0, (u - 1.0) * y / tl.log(u))
        magnitude = -expm1 / (2.0 + expm1)
        # Where u rounds to 1, |x| < 2^-54 and tanh(x) rounds to x (±0 kept).
        result = tl.where(u == 1.0, x, tl.where(x < 0.0, -magnitude, magnitude))
    else:
        x32 = x.to(tl.float32)
        a = tl.abs(x32)
        s = x32 * x32
        p = -0.0062827761285007
        p = p * s + 0.021077968180179596
        p = p * s - 0.05385390669107437
        p = p * s + 0.13332602381706238
        p = p * s - 0.33333319425582886
        # x * (1 + s * p), not x + x * s * p: 1 ulp instead of 0.7, and -0 stays -0.
        small = x32 * (1.0 + s * p)
        # exp(2|x|) overflows to inf past |x| ~ 44: 2 / inf = 0 gives 1, as it should.
        large = 1.0 - 2.0 / (1.0 + tl.exp(2.0 * a))
        large = tl.where(x32 < 0.0, -large, large)
        result = tl.where(a < 0.55, small, large).to(x.dtype)
    return result


@triton.jit
def int_as_float_output(value, out_ptr):
    """An int or bool result in the float dtype of the output `out_ptr` points to, by way of
    float32 where that is float16 or bfloat16, as PyTorch converts one (c10's Half and BFloat16
    are made from a float: an int past 2^24 is rounded twice, to float32, then to the half dtype;
    Triton's interpreter turns an int into bfloat16 wrongly, its bits taken as a float's)."""
    dtype = out_ptr.dtype.element_ty
    if dtype.primitive_bitwidth < 32:  # (a float output's only narrower dtypes: no chained `or` in a kernel)
        return value.to(tl.float32).to(dtype)
    return value.to(dtype)
