"""The dtypes a spec may name, and how each is spelled in PyTorch and Triton."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DType:
    name: str
    torch: str
    triton: str
    itemsize: int


DTYPES: dict[str, DType] = {
    d.name: d
    for d in (
        DType("float16", "torch.float16", "tl.float16", 2),
        DType("bfloat16", "torch.bfloat16", "tl.bfloat16", 2),
        DType("float32", "torch.float32", "tl.float32", 4),
        DType("float64", "torch.float64", "tl.float64", 8),
        DType("int32", "torch.int32", "tl.int32", 4),
        DType("int64", "torch.int64", "tl.int64", 8),
        DType("bool", "torch.bool", "tl.int1", 1),
        DType("float8_e4m3fn", "torch.float8_e4m3fn", "tl.float8e4nv", 1),
        DType("float8_e5m2", "torch.float8_e5m2", "tl.float8e5", 1),
    )
}
# 8-bit floats hold a matmul's operands only (scaled on the accumulator by epilogue inputs).
FP8_DTYPES = ("float8_e4m3fn", "float8_e5m2")
# What elementwise ops take: every dtype but the 8-bit floats.
ELEMENTWISE_DTYPES = tuple(d for d in DTYPES if d not in FP8_DTYPES)
FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
# Reductions compute in float (their statistics are float whatever the input); an input may also
# be a bool mask (`where(mask, x, float("-inf"))`), read as it is, never reduced.
REDUCTION_DTYPES = FLOAT_DTYPES + ("bool",)
# The values each int dtype holds: a literal computed with int inputs must fit their narrowest.
INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


def narrowest_int(dtypes) -> str | None:
    """The int dtype among `dtypes` that holds the fewest values (None where there is none): a
    Python int computed with such a tensor must fit it."""
    ints = [d for d in dtypes if d in INT_RANGES]
    return min(ints, key=lambda d: INT_RANGES[d][1]) if ints else None


def category(dtype: str) -> str:
    """"float", "int" or "bool": what PyTorch's type promotion tells apart between kinds of dtype."""
    return "bool" if dtype == "bool" else "int" if dtype.startswith("int") else "float"

# Matmul inputs go through tl.dot, which has no float64 path on tensor cores; fp8 operands
# take the tensor cores' 8-bit path (float32 accumulator).
MATMUL_DTYPES = ("float16", "bfloat16", "float32", *FP8_DTYPES)
ACCUMULATE_DTYPES = ("float32",)
# Dot precisions: float32 dots in full precision (ieee), tf32 or tf32x3; fp8 dots either add
# every K step's products into the float32 accumulator (ieee) or let Hopper's fp8 tensor cores
# accumulate the whole K loop in their reduced precision (fast_accum, torch._scaled_mm's
# use_fast_accum=True).
PRECISIONS = ("ieee", "tf32", "tf32x3", "fast_accum")
FLOAT32_PRECISIONS = ("ieee", "tf32", "tf32x3")
FP8_PRECISIONS = ("ieee", "fast_accum")


def wider(a: str, b: str) -> str:
    """The more precise of two float dtypes (bfloat16 and float16 both widen to float32)."""
    if a == b:
        return a
    rank = {"float8_e4m3fn": 0, "float8_e5m2": 0, "float16": 1, "bfloat16": 1, "float32": 2, "float64": 3}
    if rank[a] == rank[b]:
        return "float32"
    return a if rank[a] > rank[b] else b
