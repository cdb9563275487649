"""How the generated tests compare results: one tolerance table for every op, the float64
oracle as a dtype holds it, and the allowance of float32 math at ill-conditioned points."""

import functools

import torch
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree

from tilegen.testing.samples import DEVICE, as_tuple, exact, oracle_in

# One tolerance table for every op, keyed by the dtype the kernel stores (or "tf32" for
# float32 dots in tf32 precision): (atol, rtol) for torch.testing.assert_close.
TOLERANCES = {
    torch.float64: (1e-10, 1e-10),
    torch.float32: (1e-5, 1e-5),
    "tf32": (1e-2, 1e-2),
    "tf32x3": (1e-4, 1e-4),
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (1e-2, 1.6e-2),
    # Integer and bool results are exact.
    torch.int32: (0, 0),
    torch.int64: (0, 0),
    torch.bool: (0, 0),
}


def held_by(expected, dtype, actual=None):
    """The float64 oracle's `expected` as a tensor of `dtype` holds it: a value past the dtype's
    range (beyond its largest finite value by half a step) is that dtype's infinity, the correct
    result there, as PyTorch's cast of the exact value makes it; the others stay exact. Given the
    op's `actual` result, so is a value within the dtype's tolerance of passing its range where
    `actual` is that infinity: rounding within the tolerance (a direction rounded to float16 before
    it multiplies) may carry a result across the edge."""
    expected = expected.double()
    if not dtype.is_floating_point or dtype == torch.float64:
        return expected
    finite = torch.isfinite(expected)
    rounded = expected.to(dtype)
    held = torch.where(torch.isinf(rounded) & finite, rounded.double(), expected)
    if actual is None or dtype not in TOLERANCES:
        return held
    stretched = (expected * (1 + TOLERANCES[dtype][1])).to(dtype).double()
    actual = actual.detach().cpu().double()
    return torch.where(finite & torch.isinf(actual) & (stretched == actual), actual, held)


def assert_matches(actual, expected, key, op, allowance=None):
    """Compare a kernel result with the float64 oracle at the tolerance for `key`, beyond
    `allowance` where given (float32_allowances: how far float32 math of the same expression
    strays from the oracle at each element)."""
    atol, rtol = TOLERANCES[key]
    assert actual.device.type == DEVICE, f"{op}: result is on {actual.device}"
    actual, expected = actual.detach().cpu().double(), held_by(expected, actual.dtype, actual)
    if allowance is not None:
        actual = within_allowance(actual, expected, allowance)
    torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol, equal_nan=True,
                               msg=lambda m: f"{op} ({key}): {m}")


def within_allowance(got, want, allowance):
    """`got` moved toward `want` by up to `allowance` at each element (where the difference and
    the allowance are finite: NaN and inf compare as they are): what a comparison of it with
    `want` then holds to the tolerance is the difference beyond the allowance. An infinite
    allowance (float32_error: float32 math of the oracle is not finite there, where the float64
    oracle is) takes a result that is not finite either as float32's: `0 * exp(100.0)` is NaN in
    PyTorch's float32 too, and so is `inf / inf` where the oracle's value is past the dtype's range
    (`want`, held by the dtype, is inf). A finite result there is still held to `want`."""
    difference, allowed = got - want, allowance.to(want.dtype)
    beyond = torch.sign(difference) * torch.clamp(difference.abs() - allowed, min=0.0)
    moved = torch.where(torch.isfinite(difference) & torch.isfinite(allowed), want + beyond, got)
    return torch.where(torch.isinf(allowed) & ~torch.isfinite(got), want, moved)


def float32_yardsticks(compute):
    """What `compute()` (an oracle's results, a tuple) comes to where float32 math computes it: in
    float32 (PyTorch's own rounding of the same math), on the inputs and on inputs nudged by
    float32's rounding, up and down (three samples of float32's rounding error, not one that
    happened to be kind), and in float64 on those nudged inputs (how far the exact math moves under
    errors of that size in what it reads). A kernel that rounds in another order than PyTorch, or
    fuses a multiply into an add, lands within their reach."""
    yardsticks = []
    for dtype, nudge in ((torch.float32, 0), (torch.float32, 1), (torch.float32, -1),
                         (torch.float64, 1), (torch.float64, -1)):
        with oracle_in(dtype, nudge):
            yardsticks.append(tuple(compute()))
    return list(zip(*yardsticks))


def float32_error(yardsticks, want):
    """Twice the greatest distance of `yardsticks` (one result's float32_yardsticks) from the
    float64 oracle's `want`, element by element: how far an op's float32 math may stray beyond the
    tolerance, at a point where any float32 computation of it loses digits (float32_allowances,
    float32_slack, second derivatives). Infinite where one of them is not finite and `want` (not
    NaN) is another value: float32 math of the oracle overflows there (an exp past float32's range
    times a zero gradient is NaN; an inf minus an inf, where float64's sum is -inf), and so may the
    op's (within_allowance)."""
    if any(y is None for y in yardsticks):
        return None
    want = want.double()
    distance = functools.reduce(torch.fmax, [(y.double() - want).abs() for y in yardsticks])
    overflows = functools.reduce(torch.logical_or, [~torch.isfinite(y) & (y.double() != want) for y in yardsticks])
    overflows &= ~torch.isnan(want)
    return torch.where(overflows, torch.inf, 2 * distance)


def computes_in_float64(inputs):
    """Whether an op's math on `inputs` is float64 (an input is): it meets the float64 oracle to
    the last bits, with no float32 allowance."""
    return any(isinstance(x, torch.Tensor) and x.dtype == torch.float64 for x in inputs)


class _Float32Seen(TorchFunctionMode):
    """Notes whether a torch function inside it returns a float32 tensor."""

    def __init__(self):
        super().__init__()
        self.seen = False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        self.seen = self.seen or any(isinstance(t, torch.Tensor) and t.dtype == torch.float32
                                     for t in _pytree.tree_leaves(result))
        return result


def float32_parts(reference, inputs, scalars=None):
    """Whether the oracle `reference` computes some of its values on `inputs` in float32 where
    their math is float64: PyTorch's default dtype, which a float made from int or bool tensors
    alone takes (`1.0 * i`, `exp(0.1 * i)` beside a float64 x), in the op as in PyTorch."""
    given = [exact(x) for x in inputs]  # (outside: a float32 input's conversion is no part of the math)
    with _Float32Seen() as seen, torch.no_grad():
        reference(*given, **(scalars or {}))
    return seen.seen


def float64_allowances(reference, inputs, want, scalars=None):
    """The allowances of an op whose math is float64 (computes_in_float64), for its oracle's float
    values `want` (results, gradients or tangents; None where there is none): none where the math
    is float64 throughout, which meets the oracle to the last bits; float32's tolerance at each
    element where some of it is float32 (float32_parts), whose functions differ by an ulp from one
    library to another (numpy's exp, libdevice's and the CPU's)."""
    if not float32_parts(reference, inputs, scalars):
        return [None] * len(want)
    atol, rtol = TOLERANCES[torch.float32]
    return [None if w is None or not w.is_floating_point() else atol + rtol * w.detach().double().abs() for w in want]


def allowances(compute, want, reference, inputs, scalars=None):
    """How far each of the oracle's float values `want` (results, gradients or tangents, as
    `compute()` returns them; None where there is none) may stray beyond the tolerance: twice the
    distance of its float32 yardsticks from it (float32_error), or for an op whose math is float64
    (computes_in_float64), float64_allowances. None for int and bool values."""
    if computes_in_float64(inputs):
        return float64_allowances(reference, inputs, want, scalars)
    return [None if w is None or not w.is_floating_point() else float32_error(y, w)
            for y, w in zip(float32_yardsticks(compute), want)]


def float32_allowances(reference, inputs, want, scalars=None):
    """An allowance per output of `reference` on `inputs` (assert_matches): twice the distance of
    the oracle computed in float32 from the float64 one, element by element. At an
    ill-conditioned point (a sum that cancels, a divisor near zero) any float32 computation of the
    op loses digits, PyTorch's own too, and the op is held to no more than that, as its gradients
    are (AsPyTorchOp.float32_slack). `want`: the oracle's results on `inputs`, computed already.
    None for int and bool outputs; where an input is float64 (the op's math is float64 then),
    float64_allowances."""
    scalars = scalars or {}
    return allowances(lambda: as_tuple(reference(*inputs, **scalars)), as_tuple(want), reference, inputs, scalars)

def assert_identical(got, want):
    """The same values, bit for bit but NaN's (two runs of one op; a NaN in the same place is
    the same result, where an op's math gives one)."""
    torch.testing.assert_close(got, want, atol=0, rtol=0, equal_nan=True)


def assert_same_results(got, want, dtype, what):
    """Two computations of the same op agree to the dtype's tolerance (a compiled graph may fuse
    the ops around it differently)."""
    atol, rtol = TOLERANCES[dtype]
    for g, w in zip(as_tuple(got), as_tuple(want)):
        assert g.shape == w.shape and g.dtype == w.dtype and g.device == w.device, what
        torch.testing.assert_close(g, w, atol=atol, rtol=rtol, equal_nan=True, msg=lambda m: f"{what}: {m}")


def gradient_key(key, dtype):
    """The tolerance key of a gradient of `dtype` in a test run at `key`: `key`, unless that is an
    int or bool dtype (an op whose first input is an int beside float ones) or a finer one than
    `dtype` (a float32-only input of an op run in float64): a gradient is a float of its input's
    dtype, no more precise than that dtype's tolerance."""
    if isinstance(key, torch.dtype) and not (key.is_floating_point or key.is_complex):
        return dtype
    return dtype if dtype in TOLERANCES and TOLERANCES[dtype][1] > TOLERANCES[key][1] else key

def assert_same_gradients(got, want, dtype, what, sizes=(), slack=()):
    """Gradients from two computations agree to the dtype's tolerance (gradient_key), relative to
    the gradient's size (the incoming gradients themselves may be rounded differently: a compiled
    loss computes them in float32, eager in the dtype), or, element by element, to `sizes[i]`
    where larger (a tensor of the gradient's shape: the size of the terms each element sums,
    where a gradient sums many: their rounding adds up whatever the sum comes to), beyond
    `slack[i]` where given (a tensor of the gradient's shape: how far PyTorch's own float32 math
    strays from the float64 oracle at each element, AsPyTorchOp.float32_slack)."""
    for i, (g, w) in enumerate(zip(got, want)):
        if g is None or w is None:  # an int or bool input: no gradient on either side
            assert g is None and w is None, what
            continue
        assert g.shape == w.shape and g.dtype == w.dtype, what
        atol, rtol = TOLERANCES[gradient_key(dtype, g.dtype)]
        finite = w[torch.isfinite(w)].abs()
        scale = max(1.0, finite.max().item()) if finite.numel() else 1.0
        if i < len(slack) and slack[i] is not None:
            g = within_allowance(g, w, slack[i])
        if i < len(sizes) and sizes[i] is not None:
            # |g - w| <= atol * max(scale, size) + rtol * |w|: both divided by max(1, size / scale)
            # and compared at atol * scale (a relative difference is the same either way).
            factor = torch.clamp(sizes[i].to(w.dtype) / scale, min=1.0)
            factor = torch.where(torch.isfinite(factor), factor, torch.ones_like(factor))
            g, w = g / factor, w / factor
        torch.testing.assert_close(g, w, atol=atol * scale, rtol=rtol, equal_nan=True,
                                   msg=lambda m: f"{what}: {m}")
