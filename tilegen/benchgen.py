"""Plan the generated benchmark of one op: shapes, dtypes, and its eager PyTorch equivalent."""

from __future__ import annotations

from .dtypes import DTYPES
from .lowering import records_gradients
from .spec import Spec
from .testgen import _base_value, _dtype_exprs, _positive_domain, dtype_root, pytorch_lines, row_shape_exprs

# The matmul shape set every benchmark and the tables start from, as (M, N, K).
MATMUL_SHAPES = [(1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192),
                 (16, 4096, 4096), (128, 4096, 4096), (4096, 11008, 4096), (1025, 769, 513)]
# A batched matmul's shape set, as (B, M, N, K): small batches of small matrices, attention's two
# products (scores Q @ K^T and the weighted sum P @ V at head size 128), and square batches.
BATCHED_MATMUL_SHAPES = [(64, 128, 128, 64), (256, 64, 64, 64), (32, 2048, 2048, 128), (32, 2048, 128, 2048),
                         (8, 1024, 1024, 1024), (4, 4096, 4096, 4096)]
# An fp8 matmul's shape set (sizes torch._scaled_mm takes: multiples of 16).
FP8_MATMUL_SHAPES = [(2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192), (4096, 11008, 4096),
                     (128, 4096, 4096)]
ELEMENTWISE_SHAPES = [(1 << p,) for p in range(12, 29, 2)]
# The last axis of the default shapes of elementwise ops whose inputs broadcast along it.
HIDDEN = 4096
BENCH_DTYPES = {"matmul": ("float16", "bfloat16"), "elementwise": ("float16", "bfloat16", "float32"),
                "reduction": ("float16", "bfloat16", "float32")}
# Dtypes a spec may allow that the default run leaves out, timed where --dtype names them (a
# float32 matmul against SGEMM: its tiles and tables are tuned apart from half precision's).
BENCH_DTYPES_ON_REQUEST = {"matmul": ("float32",), "elementwise": (), "reduction": ()}
# Reductions: rows of a model's widths, in batches of 2^20, 2^24 and 2^27 elements.
ROW_LENGTHS = (128, 1024, 4096, 32768)
REDUCTION_SHAPES = [(total // n, n) for total in (1 << 20, 1 << 24, 1 << 27) for n in ROW_LENGTHS]


def compared_outputs(spec: Spec) -> list:
    """The outputs the benchmark compares and a training step's loss reads: a reduction's
    per-row statistics (layer_norm's mean and rstd, one value per row) are left out beside the
    outputs of whole rows. A model reads the rows; PyTorch's own functions compute such
    statistics inside the same kernel and keep them (native_layer_norm, behind F.layer_norm), so
    an eager baseline that computed them again by composition would be charged work no PyTorch
    user does. tilegen's op still computes and writes them, in the time it is charged."""
    if spec.kind != "reduction":
        return list(spec.outputs)
    roles = spec.row_roles()
    return [t for t in spec.outputs if roles[t.name] == "element"] or list(spec.outputs)


def bench_context(spec: Spec, header: str, package: str) -> dict:
    root = dtype_root(spec).dtypes
    dtypes = [d for d in root if d in BENCH_DTYPES[spec.kind]] or [root[0]]
    compared = compared_outputs(spec)
    torch_lines = pytorch_lines(spec, "eager", frozenset(s.name for s in spec.scalars), compared)
    names = [t.name for t in compared]
    ctx = dict(
        header=header, package=package, op=spec.op, kind=spec.kind, batched=False, fp8=False,
        dtypes_literal=", ".join(DTYPES[d].torch for d in dtypes),
        asked_dtypes_literal=", ".join(DTYPES[d].torch for d in root
                                       if d in BENCH_DTYPES_ON_REQUEST[spec.kind] and d not in dtypes),
        input_names=[t.name for t in spec.inputs],
        input_dtype_exprs=_dtype_exprs(spec, spec.inputs),
        output_dtype_exprs=_dtype_exprs(spec, spec.outputs),
        scalars=[dict(name=s.name, label=s.public) for s in spec.scalars],
        unpack=", ".join(t.name for t in spec.inputs) + ("," if len(spec.inputs) == 1 else ""),
        scalar_values=", ".join(f'"{s.public}": {_base_value(s)}' for s in spec.scalars),
        torch_lines=torch_lines,
        result=names[0] if len(names) == 1 else "(" + ", ".join(names) + ",)",
        # The op's results run_tilegen returns (None: all of them, as the op returns them).
        compared=None if len(compared) == len(spec.outputs) else [spec.outputs.index(t) for t in compared],
        positive=_positive_domain(spec),
        differentiable=records_gradients(spec) and not spec.no_gradient(),
    )
    if spec.kind == "matmul":
        parts = spec.matmul_parts()
        a, b, m, n, k = parts.a, parts.b, parts.m, parts.n, parts.k
        # Sizes round up only as far as the wrapper requires (the smallest block of a masks: never
        # axis), so every op is timed on the kind's shape set, 128x4096x4096 included.
        shapes = [spec.fit_to_blocks((m, n, k), s, min) for s in MATMUL_SHAPES + list(spec.bench_shapes)]
        small = spec.fit_to_blocks((m, n, k), (64, 64, 64), min)
        if spec.fp8_operands():
            shapes = [spec.fit_to_blocks((m, n, k), s, min) for s in FP8_MATMUL_SHAPES + list(spec.bench_shapes)]
        if parts.is_batched:  # (B, M, N, K); the batch leads every tensor with "..."
            shapes = [s[:1] + spec.fit_to_blocks((m, n, k), s[1:], min)
                      for s in BATCHED_MATMUL_SHAPES + list(spec.bench_shapes)]
            small = (4,) + small
        shape_of = {m: "mm", n: "nn", k: "kk", "...": "bb"}
        # fp8: eager math runs on _scaled_mm's float32 result; the outputs then take their dtypes.
        casts = [f"{t.name} = {t.name}.to({d})" for t, d in zip(spec.outputs, _dtype_exprs(spec, spec.outputs))]
        ctx.update(a=a.name, b=b.name, small_shape=small, batched=parts.is_batched, fp8=spec.fp8_operands(),
                   fast_accum=spec.precision == "fast_accum",
                   torch_lines=ctx["torch_lines"] + (casts if spec.fp8_operands() else []),
                   b_index=[t.name for t in spec.inputs].index(b.name),
                   input_shape_exprs=[_tuple_source([shape_of[x] for x in t.shape]) for t in spec.inputs])
    elif spec.kind == "reduction":
        shapes = REDUCTION_SHAPES + list(spec.bench_shapes)
        ctx.update(small_shape=(8, 1024), input_shape_exprs=row_shape_exprs(spec, spec.inputs),
                   output_shape_exprs=row_shape_exprs(spec, spec.outputs))
    else:
        axis = (spec.tiles[0].axis,)
        defaults = ELEMENTWISE_SHAPES
        if spec.broadcast_axes() is not None:
            # Declared shapes broadcast along the last axis: rows of a model's hidden size.
            defaults = [(max(n // HIDDEN, 1), min(n, HIDDEN)) for (n,) in ELEMENTWISE_SHAPES]
        shapes = [spec.fit_rank(spec.fit_to_blocks(axis, s, min) if len(s) == 1 else s)
                  for s in defaults + list(spec.bench_shapes)]
        ctx.update(small_shape=spec.fit_rank(spec.fit_to_blocks(axis, (4096,), min)),
                   input_shape_exprs=spec.input_shape_exprs(), output_shape_exprs=None)
    ctx["shapes_literal"] = ", ".join(repr(tuple(s)) for s in dict.fromkeys(shapes))
    return ctx


def _tuple_source(items) -> str:
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
