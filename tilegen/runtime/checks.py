"""Argument checks for generated wrappers: each raises TypeError/ValueError naming the op, the
argument and what was expected."""

import functools
import sys

import torch

from .device import INTERPRET
from .library import refuse_out_with_grad
from .sizes import same_shape


def dtype_names(dtypes):
    return ", ".join(str(d).replace("torch.", "") for d in dtypes)


def check_tensor(op, name, value, dtypes, ndim=None, min_ndim=None, max_ndim=None):
    """`value` is a dense tensor of one of `dtypes` (and `ndim` dims, or at least `min_ndim`:
    a batched matmul's matrix dims, after any batch axes, or at most `max_ndim`: an input that
    broadcasts), where kernels run."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{op}: argument '{name}' must be a torch.Tensor, got {type(value).__name__}")
    if value.layout != torch.strided or value.is_nested:
        raise TypeError(f"{op}: argument '{name}' is a {str(value.layout).replace('torch.', '')} tensor; "
                        "only dense (strided) tensors are supported")
    if value.dtype not in dtypes:
        raise TypeError(f"{op}: argument '{name}' has dtype {dtype_names([value.dtype])}, "
                        f"expected {dtype_names(dtypes)}")
    if ndim is not None and value.dim() != ndim:
        raise ValueError(f"{op}: argument '{name}' must be {ndim}-D, got shape {tuple(value.shape)}")
    if max_ndim is not None and value.dim() > max_ndim:
        raise ValueError(f"{op}: argument '{name}' must have at most {max_ndim} dim{'s' if max_ndim != 1 else ''} "
                         f"(the spec's shape for it, which broadcasts), got shape {tuple(value.shape)}")
    if min_ndim is not None and value.dim() < min_ndim:
        raise ValueError(f"{op}: argument '{name}' must have at least {min_ndim} dims (any batch axes, then "
                         f"{min_ndim} matrix dims), got shape {tuple(value.shape)}")
    check_device(op, name, value)


def check_device(op, name, value):
    if INTERPRET:
        if value.device.type != "cpu":
            raise ValueError(f"{op}: argument '{name}' is on {value.device}; under TRITON_INTERPRET=1 "
                             "tensors must be on the CPU")
    elif value.device.type != "cuda":
        raise ValueError(f"{op}: argument '{name}' is on {value.device}, expected a CUDA tensor (to run CPU "
                         "tensors in Triton's interpreter, set TRITON_INTERPRET=1 before the first import)")


def check_same_dtype(op, name, value, ref_name, ref):
    if value.dtype != ref.dtype:
        raise TypeError(f"{op}: argument '{name}' has dtype {dtype_names([value.dtype])}, expected "
                        f"{dtype_names([ref.dtype])} (the dtype of '{ref_name}')")


def check_same_device(op, named):
    first_name, first = named[0]
    for name, value in named[1:]:
        if value.device != first.device:
            raise ValueError(f"{op}: argument '{name}' is on {value.device}, expected {first.device} "
                             f"(the device of '{first_name}')")


def broadcast_shape(op, named):
    """The shape tensors `named` ([(name, tensor)]) broadcast to by PyTorch's rules, or None where
    every one has it already (nothing to expand). Raises ValueError naming the op, the argument
    that does not broadcast, its shape and the shape of those before it."""
    first = named[0][1].shape
    if all(same_shape(value.shape, first) for _, value in named[1:]):
        return None  # the common case, without torch.broadcast_shapes' Python-level work
    shape = tuple(first)
    for index, (name, value) in enumerate(named[1:], 1):
        try:
            shape = tuple(torch.broadcast_shapes(shape, value.shape))
        except RuntimeError:
            before = ", ".join(f"'{n}'" for n, _ in named[:index])
            whose = f"the shape of {before}" if index == 1 else f"the shapes of {before}, broadcast together"
            raise ValueError(f"{op}: argument '{name}' has shape {tuple(value.shape)}, which does not broadcast "
                             f"with {shape} ({whose}; shapes broadcast as in PyTorch)") from None
    return None if all(same_shape(value.shape, shape) for _, value in named) else shape


def broadcast_leading(op, named, has, of, rule):
    """The leading shapes `named` ([(name, shape)]) broadcast together by PyTorch's rules (a
    reduction's rows, a batched matmul's batch axes). Raises ValueError naming the op, the argument
    that does not broadcast ("has {has} {shape}"), and those before it ("{of} 'a', 'b'; {rule}")."""
    shape, before = (), []
    for name, lead in named:
        try:
            shape = tuple(torch.broadcast_shapes(shape, lead))
        except RuntimeError:
            raise ValueError(f"{op}: argument '{name}' has {has} {lead}, which do not broadcast with {shape} "
                             f"({of} {', '.join(before)}; {rule})") from None
        before.append(f"'{name}'")
    return shape


def check_axes(op, declared):
    """Tensors against the shapes their spec declares: `declared` is [(name, tensor, axes)] with
    axes such as ("...", "N"): "..." stands for any leading axes, and a named axis has one size in
    every tensor that names it (axes line up from the last, as PyTorch broadcasts). Raises
    ValueError naming the op, the argument, the axis and the sizes."""
    sizes = {}
    for name, value, axes in declared:
        fixed = axes[1:] if axes[:1] == ("...",) else axes
        if value.dim() < len(fixed) or (len(fixed) == len(axes) and value.dim() != len(axes)):
            shown = "[" + ", ".join(axes) + "]"
            raise ValueError(f"{op}: argument '{name}' has shape {tuple(value.shape)}, but the spec declares "
                             f"{shown} ({'at least ' if len(fixed) < len(axes) else ''}{len(fixed)}-D)")
        for place, (axis, size) in enumerate(zip(fixed, value.shape[value.dim() - len(fixed):])):
            if axis == "1":  # an axis of size 1 (tilegen.spec.SIZE_ONE: it broadcasts against the others)
                if size != 1:
                    raise ValueError(f"{op}: argument '{name}' has size {size} on dim {place - len(fixed)}, but "
                                     f"the spec declares [{', '.join(axes)}] (size 1 there)")
                continue
            first = sizes.setdefault(axis, (name, size))
            if first[1] != size:
                raise ValueError(f"{op}: argument '{name}' has size {size} on axis {axis}, but '{first[0]}' "
                                 f"has {first[1]} (the spec names both {axis})")


def epilogue_view(op, name, value, shape, axes, batched=False):
    """A matmul's epilogue input `value` as a view of `shape`, the sizes of its declared axes
    `axes` ([M], [N] or [M, N]): any tensor that broadcasts to it as in PyTorch (a per-tensor scale
    as a 0-d tensor, [1] for [N], [N] for [M, N]) is expanded with stride 0, never copied. Where
    `batched` (declared [..., M, N]), the dims before those are its batch axes, kept as they are
    (rt.batch_shape broadcasts them with the operands'): [B, 1, N] becomes [B, M, N]."""
    shape = tuple(shape)
    lead = tuple(value.shape[:max(value.dim() - len(shape), 0)]) if batched else ()
    if same_shape(value.shape, lead + shape):
        return value
    if value.dim() > len(lead + shape) or any(got not in (1, want) for got, want in zip(value.shape[::-1], shape[::-1])):
        declared, sizes = ", ".join(axes), shape
        if batched:
            declared, sizes = f"..., {declared}", f"(..., {', '.join(str(size) for size in shape)})"
        raise ValueError(f"{op}: argument '{name}' has shape {tuple(value.shape)}, which does not broadcast to "
                         f"[{declared}] = {sizes}")
    return value.expand(lead + shape)


def check_dim(op, name, value, dim, size, axis):
    if value.shape[dim] != size:
        raise ValueError(f"{op}: argument '{name}' has size {value.shape[dim]} on axis {axis} "
                         f"(dim {dim}), expected {size}")


# What a kernel's scalar argument can hold: Triton passes a Python int as int32 or int64; a float
# scalar reaches the kernel as float64 and its math takes it in its own dtype (check_float_range).
_INT_RANGE = (-(2**63), 2**63)
_FLOAT32_MAX = 3.4028234663852886e38
_FLOAT64_MAX = sys.float_info.max


# (A bool is an int to Python, but no number to a spec: an int or float scalar refuses it, and a
# bool scalar takes True and False alone, as PyTorch's bool arguments do.)
_SCALARS = {"int": (int, torch.SymInt), "float": (int, float, torch.SymInt, torch.SymFloat),
            "bool": (bool, torch.SymBool)}


def check_scalar(op, name, value, kind, meets=(), stores=()):
    """For an int scalar, `meets`: the ("name", tensor) pairs of the int inputs it is computed
    with, whose promoted dtype it takes in PyTorch; `stores`: ("name", tensor or dtype) pairs of
    the int outputs that store it alone, each in its own dtype. A value past such a dtype's range
    is refused, where PyTorch would wrap it (+, *, comparisons) or refuse it (clamp, where) and the
    kernel would compute it in 64 bits. (A traced call may hold a symbolic scalar: torch.compile
    with dynamic shapes makes Python numbers SymInts and SymFloats.) `kind`: "float", "int" or "bool"."""
    if not isinstance(value, _SCALARS[kind]) or (kind != "bool" and isinstance(value, bool)):
        raise TypeError(f"{op}: argument '{name}' must be a Python {kind}, got {type(value).__name__}")
    if kind == "int" and not _INT_RANGE[0] <= value < _INT_RANGE[1]:
        raise ValueError(f"{op}: argument '{name}' = {_shown(value)} does not fit in 64 bits")
    if kind != "int":  # (a float's range depends on the math's dtype: checked at launch, check_float_range)
        return
    groups = [([f"'{label}'" for label, _ in meets], [t for _, t in meets])] if meets else []
    groups += [([f"output {label}"], [t]) for label, t in stores]
    for labels, holders in groups:
        dtype = functools.reduce(torch.promote_types, (getattr(t, "dtype", t) for t in holders))
        if dtype.is_floating_point or dtype == torch.bool:
            continue
        info = torch.iinfo(dtype)
        if not info.min <= value <= info.max:
            raise ValueError(f"{op}: argument '{name}' = {value} does not fit in {str(dtype)[6:]}, the dtype of "
                             f"{' and '.join(labels)} it is computed with ([{info.min}, {info.max}])")


def _shown(value) -> str:
    """A scalar as an error quotes it: a Python int of more than 20 digits in e-notation (10**400
    as 1.000e+400, not 401 digits), anything else as it prints."""
    text = str(value)
    digits = text.lstrip("-")
    if type(value) is not int or len(digits) <= 20:
        return text
    return f"{text[:len(text) - len(digits)]}{digits[0]}.{digits[1:4]}e+{len(digits) - 1}"


def check_float_range(op, scalars, values, math_64, why):
    """Refuse a float scalar the op's math cannot hold: the math takes each float scalar in its own
    dtype (lowering.scalar_casts), float32 unless it runs in float64 (`math_64`, float64_math),
    where a finite value past float32's range would become inf, which no PyTorch user asked for.
    `scalars`: (name, "float" or "int") per value, in order; `why`: what decides the dtype here.
    Decided at launch, where the math's dtype is (a float64 op takes 1e300 whole)."""
    limit, dtype = (_FLOAT64_MAX, "float64") if math_64 else (_FLOAT32_MAX, "float32")
    for (name, kind), value in zip(scalars, values):
        if kind == "float" and abs(value) > limit and abs(value) != float("inf"):
            raise ValueError(f"{op}: argument '{name}' = {_shown(value)} does not fit in {dtype}, the dtype its math "
                             f"computes in ({why})")


def check_divisible(op, axis, size, block, name):
    if size % block:
        raise ValueError(f"{op}: axis {axis} has size {size}, which the spec requires to be a multiple "
                         f"of {name}={block} (masks: {axis}: never)")


FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def fp8_dots(device=None) -> bool:
    """Whether fp8 matmuls run on `device` (the current GPU by default): fp8 tensor cores start at
    compute capability 8.9, and Triton's interpreter has no fp8 dot."""
    return not INTERPRET and torch.cuda.is_available() and torch.cuda.get_device_capability(device) >= (8, 9)


def float64_math(op, spec_float64, tensors):
    """Whether an op's math runs in float64: its spec asks for it (`spec_float64`), or a tensor is
    float64. Triton's interpreter converts float64 to bfloat16 wrongly (garbage, not a rounding):
    such a launch is refused there."""
    wide = spec_float64 or any(t.dtype == torch.float64 for t in tensors)
    if wide and INTERPRET and any(t.dtype == torch.bfloat16 for t in tensors):
        raise TypeError(f"{op}: bfloat16 tensors with float64 math, which Triton's interpreter converts to "
                        "bfloat16 wrongly (TRITON_INTERPRET=1); run it on a GPU, or in float16 or float32")
    return wide


def check_interpretable(op, name, value, matmul=False):
    """Refuse what the machine cannot compute right: Triton's interpreter's bfloat16 dot returns
    garbage and it has no fp8 dot; fp8 tensor cores start at compute capability 8.9."""
    if not matmul:
        return
    if INTERPRET and value.dtype == torch.bfloat16:
        raise TypeError(f"{op}: argument '{name}' is bfloat16, which Triton's interpreter cannot multiply "
                        "correctly (TRITON_INTERPRET=1); run bfloat16 matmuls on a GPU")
    if value.dtype in FP8:
        dtype = str(value.dtype).replace("torch.", "")
        if INTERPRET:
            raise TypeError(f"{op}: argument '{name}' is {dtype}, which Triton's interpreter cannot multiply "
                            "(TRITON_INTERPRET=1); run fp8 matmuls on a GPU")
        if value.device.type == "cuda" and not fp8_dots(value.device):
            raise TypeError(f"{op}: argument '{name}' is {dtype}, which this GPU's tensor cores do not multiply "
                            "(fp8 needs compute capability 8.9 or later)")


def byte_span(t):
    """[first byte, past the last byte) that `t` can reach in its storage."""
    start = t.storage_offset() * t.element_size()
    extent = sum((size - 1) * abs(stride) for size, stride in zip(t.shape, t.stride()))
    return start, start + (extent + 1) * t.element_size()


def overlaps(a, b):
    """Whether tensors `a` and `b` may share an element of memory."""
    if a.device != b.device or a.numel() == 0 or b.numel() == 0:
        return False
    if a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr():
        return False
    a_lo, a_hi = byte_span(a)
    b_lo, b_hi = byte_span(b)
    return a_lo < b_hi and b_lo < a_hi


def has_internal_overlap(t):
    """Whether two elements of `t` may be one element of memory: a stride 0 (an expanded view), or
    strides that fold back onto each other (`as_strided((8, 16), (1, 1))`). Taken axis by axis from
    the smallest stride, each stride must step past every element the smaller ones reach; a layout
    that fails this without overlapping (interleaved axes, which no view of a dense tensor has) is
    refused with the rest, where PyTorch's own check gives up and writes it."""
    if t.numel() == 0:
        return False  # (no element to share)
    reach = 0  # elements the smaller strides span, past the first
    for size, stride in sorted(((s, abs(d)) for s, d in zip(t.shape, t.stride()) if s > 1), key=lambda a: a[1]):
        if stride <= reach:
            return True
        reach += (size - 1) * stride
    return False


def check_apart(op, name, out, inputs, in_place=False):
    """`out` shares no memory with any of `inputs` ([(name, value)]: tensors or not): a kernel
    that wrote it would read what it had written. `in_place`: `out` may be one of them exactly
    (the same elements in the same layout), as PyTorch's out= allows, for a kernel whose every
    element is read before it is written, by the program that writes it (elementwise); sharing
    part of an input's memory stays refused, as in PyTorch."""
    for input_name, value in inputs:
        if isinstance(value, torch.Tensor) and overlaps(out, value):
            if in_place and same_elements(out, value):
                continue
            raise ValueError(f"{op}: argument '{name}' shares memory with input '{input_name}'"
                             f"{' other than as that tensor itself' if in_place else ''}; pass a separate tensor")


def same_elements(a, b):
    """Whether tensors `a` and `b` are views of the same elements, laid out the same way."""
    return (a.data_ptr() == b.data_ptr() and same_shape(a.shape, b.shape) and same_shape(a.stride(), b.stride())
            and a.element_size() == b.element_size())


def prepare_out(op, out, shape, dtype, device, inputs, name="out", others=(), in_place=False):
    """The output tensor: `out` after checking it, or a new one. `others` are the (name, tensor)
    outputs already prepared, which `out` must not overlap either; `in_place`: `out` may be an
    input itself (check_apart)."""
    if out is None:
        return torch.empty(shape, dtype=dtype, device=device)
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"{op}: argument '{name}' must be a torch.Tensor or None, got {type(out).__name__}")
    if out.layout != torch.strided or out.is_nested:
        raise TypeError(f"{op}: argument '{name}' must be a dense (strided) tensor")
    if not same_shape(out.shape, shape):
        raise ValueError(f"{op}: argument '{name}' has shape {tuple(out.shape)}, expected {tuple(shape)}")
    if out.dtype != dtype:
        raise TypeError(f"{op}: argument '{name}' has dtype {dtype_names([out.dtype])}, "
                        f"expected {dtype_names([dtype])}")
    if out.device != device:
        raise ValueError(f"{op}: argument '{name}' is on {out.device}, expected {device}")
    if out.requires_grad and out.is_leaf and torch.is_grad_enabled():
        raise RuntimeError(f"{op}: argument '{name}' is a leaf tensor that requires grad; it cannot be "
                           "written in place")
    # Not a leaf: written in place, it would keep the history of what it held, and a backward
    # through it would take gradients of values it no longer holds.
    refuse_out_with_grad(op, out, **{name: out})
    if has_internal_overlap(out):
        raise ValueError(f"{op}: argument '{name}' has elements that share memory (a stride 0, or strides "
                         f"{tuple(out.stride())} that overlap at shape {tuple(out.shape)}); it cannot be written")
    check_apart(op, name, out, inputs, in_place)
    for other_name, value in others:
        if overlaps(out, value):
            raise ValueError(f"{op}: argument '{name}' shares memory with '{other_name}'; each output "
                             "needs its own tensor")
    return out


def split_out(op, out, count):
    """`out=` for an op with several outputs: None, or a tuple with one tensor per output."""
    if out is None:
        return (None,) * count
    if not isinstance(out, (tuple, list)) or len(out) != count:
        raise TypeError(f"{op}: argument 'out' must be None or a tuple of {count} tensors")
    return tuple(out)
