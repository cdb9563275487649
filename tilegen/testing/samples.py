"""Inputs of the generated tests: where they run, their dtypes, random values in every memory
layout, and the float dtype the oracles compute in."""

import contextlib
import os

import pytest
import torch

import tilegen.runtime as rt

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
DEVICE = "cpu" if INTERPRET else "cuda"

# A matmul op's every-candidate-config test runs in this many parts, each a share of the configs
# (one compile each: one part whole took up to 280 s on the H200, the tail of a parallel run).
CONFIG_PARTS = 4

needs_backend = pytest.mark.skipif(
    not INTERPRET and not torch.cuda.is_available(),
    reason="needs a CUDA GPU, or TRITON_INTERPRET=1 to run in Triton's interpreter",
)

FP8_DTYPES = rt.checks.FP8
# Whether fp8 matmuls run here: a GPU with fp8 tensor cores (Triton's interpreter has no fp8 dot).
FP8_DOTS = rt.checks.fp8_dots()


def dtype_params(dtypes, bfloat16_refused=""):
    """pytest params for dtypes. `bfloat16_refused`: why Triton's interpreter cannot run the op
    in bfloat16 (testgen's reasons: its bfloat16 dot, float64 math beside bfloat16), where the op
    refuses it there; bfloat16 is then skipped in the interpreter. Other math runs in it."""
    return [
        pytest.param(d, id=str(d).replace("torch.", ""),
                     marks=pytest.mark.skipif(bool(bfloat16_refused) and INTERPRET and d == torch.bfloat16,
                                              reason=f"{bfloat16_refused}; runs on a GPU"))
        for d in dtypes
    ]


def generator(seed):
    return torch.Generator().manual_seed(seed)


def random(shape, dtype, seed, scale=1.0, positive=False):
    """Random values drawn on the CPU in float64 (seeded), then rounded and moved; integers from
    -50 to 50 (1 to 50 where positive: no sum or product of a few leaves int32), bools even."""
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=generator(seed)).bool().to(DEVICE)
    if not dtype.is_floating_point:
        low = 1 if positive else -50
        return torch.randint(low, 51, shape, generator=generator(seed)).to(dtype).to(DEVICE)
    values = torch.randn(shape, generator=generator(seed), dtype=torch.float64) * scale
    if positive:
        values = values.abs() + 0.25
    return values.to(dtype).to(DEVICE)


def unwritten(shape, dtype, device):
    """A tensor an op must overwrite: NaN where it holds floats, a value no test computes else."""
    return torch.full(shape, float("nan") if dtype.is_floating_point else (True if dtype == torch.bool else -12345),
                      dtype=dtype, device=device)


# The oracles' float dtype, and their nudge: float64, or float32 inside oracle_in (PyTorch's own
# rounding of the same math), either on inputs nudged by float32's rounding (float32_yardsticks).
_ORACLE_FLOAT = [(torch.float64, 0)]
# A nudge moves each float input of the oracle by this much of itself: two float32 roundings.
NUDGE = 2.0 ** -23


@contextlib.contextmanager
def oracle_in(dtype, nudge=0):
    """Inside the block the oracles compute in `dtype` (their inputs cast to it; their 0-d
    constants and scalars stay float64, which PyTorch's type promotion does not let widen them),
    their float inputs moved by NUDGE of themselves where `nudge` is 1 (every element up) or -1
    (up and down in turn, element by element)."""
    _ORACLE_FLOAT.append((dtype, nudge))
    try:
        yield
    finally:
        _ORACLE_FLOAT.pop()


def oracle_float(t):
    """`t` on the CPU in the oracle's float dtype (float64 but inside oracle_in), whatever its own,
    nudged where oracle_in says."""
    dtype, nudge = _ORACLE_FLOAT[-1]
    t = t.cpu()
    if nudge == 0:
        return t.to(dtype)
    return (t.double() * (1.0 + NUDGE * _nudge_signs(t.shape, nudge))).to(dtype)


def _nudge_signs(shape, nudge):
    """The direction of a nudge at each element of `shape`: every one up (1), or up and down in
    turn (-1)."""
    signs = torch.ones(shape, dtype=torch.float64)
    if nudge < 0:
        signs.view(-1)[1::2] = -1.0
    return signs


def oracle_product(a, b):
    """A @ B as the oracle computes a matmul's accumulator (a and b as oracle_float made them):
    exactly in float64; inside oracle_in with a nudge, moved by what a float32 sum of its K
    products may round in another order, sqrt(K) roundings of their size |A| @ |B| (up, or up and
    down as oracle_float's nudge), which the operands' nudge alone does not reach: a GPU sums in
    the tensor cores' order, not the CPU's, and an epilogue may magnify the difference (acc^3
    where it cancels a bias)."""
    product = a @ b
    nudge = _ORACLE_FLOAT[-1][1]
    if nudge == 0:
        return product
    sizes = (a.detach().abs() @ b.detach().abs()).double()
    return product + (sizes * (a.shape[-1] ** 0.5 * NUDGE) * _nudge_signs(sizes.shape, nudge)).to(product.dtype)


def exact(t):
    """`t` on the CPU as the float64 oracle reads it: floats in float64 (the oracle's float dtype:
    oracle_in), ints in int64 (exact)."""
    t = t.cpu()
    return oracle_float(t) if t.is_floating_point() else t if t.dtype == torch.bool else t.long()

def poison_floats(inputs):
    """NaN, inf and -inf at a few places of each float input (int and bool inputs hold none; an
    input of a few elements, such as a per-row scale, holds what fits)."""
    for i, t in enumerate(inputs):
        if t.is_floating_point() and t.numel():
            flat = t.view(-1)
            for place, value in ((20 + i, float("-inf")), (10 + i, float("inf")), (i, float("nan"))):
                flat[place % flat.numel()] = value
    return inputs


def with_layout(make, shape, layout):
    """A tensor of logical `shape` in the given memory layout, made by `make(physical_shape)`.

    contiguous | transposed (last two dims swapped in memory) | sliced (every other element of
    the last dim) | expanded (stride 0 along the first dim) | offset (storage offset, odd address).
    """
    shape = tuple(shape)
    if layout == "contiguous":
        return make(shape)
    if layout == "transposed":
        if len(shape) < 2:
            return make(shape)
        swapped = shape[:-2] + (shape[-1], shape[-2])
        return make(swapped).transpose(-1, -2)
    if layout == "sliced":
        wide = shape[:-1] + (shape[-1] * 2,)
        return make(wide)[..., ::2]
    if layout == "expanded":
        return make((1,) + shape[1:]).expand(shape)
    if layout == "offset":
        flat = make((1 + _numel(shape),))
        return flat[1:].view(shape)
    raise ValueError(layout)


def _numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n

def another_dtype(t):
    """A float dtype other than `t`'s: how a test hands an argument the wrong dtype (float64, or
    float32 where `t` is float64 already)."""
    return torch.float32 if t.dtype == torch.float64 else torch.float64

def as_tuple(result):
    return result if isinstance(result, tuple) else (result,)


def reducing_along(fn, roles, dim):
    """`fn`, a reduction's public function, reducing axis `dim` of its rows, called with inputs
    whose reduced axis is the last (as the oracle's): its inputs along the rows get that axis
    moved to `dim` (in memory order, as a user's tensors lie), its outputs along the rows get it
    moved back. `roles` gives each input, then each output, its lie along the rows."""
    def call(*inputs, **scalars):
        moved = [x.movedim(-1, dim).contiguous() if role == "element" else x for x, role in zip(inputs, roles)]
        result = fn(*moved, **scalars, dim=dim)
        back = [r.movedim(dim, -1) if role == "element" else r
                for r, role in zip(as_tuple(result), roles[len(inputs):])]
        return tuple(back) if isinstance(result, tuple) else back[0]
    return call
