"""The validated, immutable model of one spec; everything downstream reads only this."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .expressions import Expression
from .rows import ELEMENT, ROW, UNIFORM


@dataclass(frozen=True)
class TensorSpec:
    """An input or output. `name` is its identifier in generated code (see naming.py)."""

    name: str
    dtypes: tuple[str, ...]          # accepted dtypes, after resolving references
    dtype_source: str                # the input whose dtype this one follows (itself for a root)
    shape: tuple[str, ...] | None    # axis symbols, or None for "any rank" (elementwise)
    label: str = ""                  # the name the spec gives it, where `name` had to differ

    @property
    def public(self) -> str:
        """The name users see: the wrapper's parameter, error messages, docs."""
        return self.label or self.name


@dataclass(frozen=True)
class ScalarSpec:
    """A scalar argument. `name` is its identifier in generated code (see naming.py)."""

    name: str
    type: str                        # "float", "int" or "bool" (a categories kind)
    default: float | int | None
    label: str = ""                  # the name the spec gives it, where `name` had to differ

    @property
    def public(self) -> str:
        """The wrapper's keyword for it, as the spec names it."""
        return self.label or self.name


@dataclass(frozen=True)
class TileSpec:
    axis: str
    block: str
    sizes: tuple[int, ...]


@dataclass(frozen=True)
class ConfigPolicy:
    mode: str                                    # "auto", "autotune" or "fixed"
    key: tuple[str, ...] = ()                    # axes whose size bucket keys the config cache
    fixed: tuple[tuple[str, int], ...] = ()      # fixed: block name / num_warps / num_stages -> value
    num_warps: tuple[int, ...] = ()
    num_stages: tuple[int, ...] = ()


@dataclass(frozen=True)
class Spec:
    path: str
    op: str
    kind: str
    doc: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    scalars: tuple[ScalarSpec, ...]
    body: tuple[tuple[str, Expression], ...]     # compute (elementwise) or epilogue (matmul)
    accumulate: str
    compute: str | None
    precision: str
    tiles: tuple[TileSpec, ...]
    masks: tuple[tuple[str, str], ...]
    group_m: int
    split_k: tuple[int, ...]
    launch: str                                  # schedule.launch: auto, tiled or persistent
    configs: ConfigPolicy
    test_shapes: tuple[tuple[int, ...], ...] = ()
    bench_shapes: tuple[tuple[int, ...], ...] = ()
    reference: tuple[tuple[str, Expression], ...] = field(default=())
    source_text: str = ""
    steps: tuple[tuple[str, Expression], ...] = ()   # a reduction's named values, in order

    def tile(self, axis: str) -> TileSpec:
        return next(t for t in self.tiles if t.axis == axis)

    def mask(self, axis: str) -> str:
        return dict(self.masks)[axis]

    def input(self, name: str) -> TensorSpec:
        return next(t for t in self.inputs if t.name == name)

    def broadcast_axes(self) -> tuple[str, ...] | None:
        """An elementwise op's output axes where its inputs declare shapes ("..." first for any
        leading axes; the validator checked the inputs line up with them), else None."""
        return broadcast_axes_of([t.shape for t in self.inputs if t.shape is not None])

    def fit_rank(self, shape) -> tuple[int, ...]:
        """`shape` made a valid output shape for the declared axes: ones prepended up to their
        rank, without "..." leading sizes merged down to it, and the size at an axis of size 1
        moved onto the last named axis (or the leading ones): the element count is kept."""
        shape = tuple(shape)
        axes = self.broadcast_axes()
        if axes is None:
            return shape
        fixed = fixed_axes(axes)
        rank = len(fixed)
        if len(shape) < rank:
            shape = (1,) * (rank - len(shape)) + shape
        if axes[:1] != ("...",) and len(shape) > rank:
            merged = 1
            for size in shape[:len(shape) - rank + 1]:
                merged *= size
            shape = (merged,) + shape[len(shape) - rank + 1:]
        if SIZE_ONE in fixed:
            sizes, lead, moved = list(shape), len(shape) - rank, 1
            for place, axis in enumerate(fixed):
                if axis == SIZE_ONE:
                    moved, sizes[lead + place] = moved * sizes[lead + place], 1
            named = [lead + place for place, axis in enumerate(fixed) if axis != SIZE_ONE]
            if named:
                sizes[named[-1]] *= moved
            else:  # only leading axes can hold it ("...": the validator refuses shapes of ones alone)
                sizes = [math.prod(sizes[:lead]) * moved] + sizes[lead:]
            shape = tuple(sizes)
        return shape

    def input_shape_exprs(self, shape: str = "shape") -> list[str]:
        """Python expressions of each input's shape when the output's is `shape`: the whole of it,
        or its last axes where the input declares fewer."""
        exprs = []
        for tensor in self.inputs:
            if tensor.shape is not None and SIZE_ONE in tensor.shape:
                fixed = fixed_axes(tensor.shape)
                lead = f"tuple({shape}[:len({shape}) - {len(fixed)}]) + " if fixed != tensor.shape else ""
                sizes = ["1" if axis == SIZE_ONE else f"{shape}[len({shape}) - {len(fixed) - i}]"
                         for i, axis in enumerate(fixed)]
                exprs.append(f"{lead}({', '.join(sizes)},)")
            elif tensor.shape is None or tensor.shape[:1] == ("...",):
                exprs.append(f"tuple({shape})")
            else:
                exprs.append(f"tuple({shape}[len({shape}) - {len(tensor.shape)}:])")
        return exprs

    def output_expressions(self) -> dict[str, Expression]:
        """Each output's expression for oracles: `reference` where given, else compute/epilogue."""
        return {**dict(self.body), **dict(self.reference)}

    def fit_to_blocks(self, axes, shape, pick=max) -> tuple[int, ...]:
        """`shape` with each size on a masks: never axis rounded up to that axis's largest block
        (every candidate tile then fits it), or with pick=min to its smallest (the least step
        the wrapper accepts)."""
        units = [pick(self.tile(axis).sizes) if self.mask(axis) == "never" else 1 for axis in axes]
        return tuple(-(-size // unit) * unit for size, unit in zip(shape, units))

    def number_kinds(self) -> dict:
        """The kind of number each input, scalar and step holds (categories.Kind), for the
        emitters: a step is float math, or bool where it compares (`keep: x > m`); a matmul's
        accumulator is float."""
        from .categories import FLOAT, Kind, category_of
        from .dtypes import category
        from .rows import ROW_LENGTH, ROW_LENGTH_KIND

        kinds = {**{t.name: Kind(category(t.dtypes[0]), False) for t in self.inputs},
                 **{s.name: Kind(s.type, True) for s in self.scalars}}
        if self.kind == "matmul":
            kinds["acc"] = Kind(FLOAT, False)
        if self.kind == "reduction":
            kinds[ROW_LENGTH] = ROW_LENGTH_KIND  # the row's length its math may read (`N`)
        for name, expression in self.steps:  # (each reads the ones before it)
            kinds[name] = Kind(category_of(expression.tree.body, kinds), False)
        return kinds

    def int_scalars_met(self) -> dict[str, tuple[list[tuple[str, str]], list[tuple[str, str]]]]:
        """Each int scalar's int tensors (categories.int_scalars_met) as two lists of (label,
        Python expression of the tensor or dtype) pairs: the inputs it is computed with, in input
        order ("a", "a"), and the outputs that store a result of Python ints alone, each by the
        input whose dtype it follows or, with a dtype of its own, that dtype (its narrowest int
        one). The wrapper refuses a value past their dtypes' range."""
        from collections import defaultdict

        from .categories import FLOAT, Kind, int_scalars_met
        from .dtypes import DTYPES, narrowest_int

        # Names beyond the inputs, scalars and steps (a matmul's acc) hold floats.
        kinds = defaultdict(lambda: Kind(FLOAT, False), self.number_kinds())
        met: dict[str, set[str]] = {}
        for name, expression in self.body:
            for scalar, tensors in int_scalars_met(expression.tree.body, kinds, result=name).items():
                if isinstance(scalar, str):  # (literals are the validator's)
                    met.setdefault(scalar, set()).update(tensors)
        resolved = {}
        for scalar, tensors in met.items():
            inputs = [(t.public, t.name) for t in self.inputs if t.name in tensors]
            outputs = []
            for output in (t for t in self.outputs if t.name in tensors):
                narrowest = narrowest_int(output.dtypes)
                if output.dtype_source != output.name:
                    outputs.append((output.public, output.dtype_source))
                elif narrowest is not None:
                    outputs.append((output.public, DTYPES[narrowest].torch))
            resolved[scalar] = inputs, outputs
        return resolved

    def int_scalars_in_float_math(self) -> frozenset[str]:
        """The int scalars no int tensor meets and no int output stores (int_scalars_met): their
        values reach float math alone, as a Python int does in PyTorch, exactly (`k / 3` is a
        float64 number there); a kernel's own int arithmetic would make such a value float32."""
        int_context = {name for name, (inputs, outputs) in self.int_scalars_met().items() if inputs or outputs}
        return frozenset(s.name for s in self.scalars if s.type == "int" and s.name not in int_context)

    def float_inputs(self) -> list[str]:
        """The inputs that hold float values: those the math upcasts, and those with gradients."""
        return _floats(self.inputs)

    def float_outputs(self) -> list[str]:
        """The outputs that hold float values: those whose incoming gradients carry any."""
        return _floats(self.outputs)

    def row_roles(self) -> dict[str, str]:
        """A reduction's tensors (inputs, then outputs) by how they lie along its rows:
        "element" ([..., N]: one value per element), "column" ([N]: the same for every row) or
        "row" ([...]: one value per row)."""
        axis = self.tiles[0].axis
        return {t.name: "element" if t.shape[-1:] == (axis,) and t.shape[:1] == ("...",)
                else "column" if t.shape == (axis,) else "row" for t in self.inputs + self.outputs}

    def reduced_axis_keyword(self) -> str:
        """The keyword a reduction's wrapper takes for the axis it reduces ("dim", as PyTorch's
        row ops; the last by default), or "" for any other kind, and for a reduction whose spec
        names an input or scalar `dim`: such a spec keeps its parameter (specs that were accepted
        stay accepted), and its op reduces the last axis only."""
        if self.kind != "reduction" or any(v.public == DIM_KEYWORD for v in (*self.inputs, *self.scalars)):
            return ""
        return DIM_KEYWORD

    def names_read(self, outputs: dict[str, Expression]) -> dict[str, set[str]]:
        """Each step's and each of `outputs`' (name -> expression) names, read directly or through
        the steps it reads."""
        reads: dict[str, set[str]] = {}
        for name, expression in list(self.steps) + list(outputs.items()):
            reads[name] = set().union(*({n} | reads.get(n, set()) for n in expression.names))
        return reads

    def steps_read(self) -> list:
        """A reduction's steps its outputs' compute reads, directly or through later steps, in spec
        order: a step nothing reads would be work (a pass over a long row) for nothing."""
        body = dict(self.body)
        reads = self.names_read(body)
        read = set().union(*(reads[name] for name in body))
        return [(name, expression) for name, expression in self.steps if name in read]

    def row_levels(self) -> dict[str, int]:
        """A reduction's inputs and scalars by level (rows.py)."""
        roles = self.row_roles()
        return {**{t.name: ROW if roles[t.name] == "row" else ELEMENT for t in self.inputs},
                **{s.name: UNIFORM for s in self.scalars}}

    def fp8_operands(self) -> bool:
        """Whether a matmul's operands are 8-bit floats (the validator keeps them all fp8 or none)."""
        from .dtypes import FP8_DTYPES

        return self.kind == "matmul" and any(d in FP8_DTYPES for d in self.matmul_parts().a.dtypes)

    def no_gradient(self) -> str:
        """Why the op has no backward ("" where it has one): what its wrapper says to a call that
        would record autograd. An fp8 operand's gradient has no dtype to be made in, and training in
        fp8 needs scaling recipes (amax histories, per-step scales) a spec does not describe."""
        return "an fp8 matmul has no backward: its operands are 8-bit floats" if self.fp8_operands() else ""

    def matmul_parts(self) -> "MatmulParts":
        """A matmul's operands, its M, N, K axis symbols, its epilogue inputs, and which tensors
        lead with batch axes ("...")."""
        out_axes = set(fixed_axes(self.outputs[0].shape))
        a, b = (t for t in self.inputs if set(fixed_axes(t.shape)) - out_axes)
        (m, k), n = fixed_axes(a.shape), fixed_axes(b.shape)[1]
        return MatmulParts(a, b, m, n, k, tuple(t for t in self.inputs if t not in (a, b)),
                           frozenset(t.name for t in self.inputs + self.outputs if t.shape[:1] == ("...",)))


@dataclass(frozen=True)
class MatmulParts:
    a: TensorSpec
    b: TensorSpec
    m: str
    n: str
    k: str
    extras: tuple[TensorSpec, ...]
    batched: frozenset[str] = frozenset()  # the tensors with batch axes ("..." first)

    @property
    def is_batched(self) -> bool:
        return bool(self.batched)

    def matrix(self, tensor: TensorSpec) -> tuple[str, ...]:
        """`tensor`'s axes without its batch axes: [M, K], [K, N], [M, N], [N] or [M]."""
        return fixed_axes(tensor.shape)


# An elementwise shape's axis of size 1 (`1` in the spec: `scale: {shape: [M, 1]}`), which
# broadcasts against any size as PyTorch's do.
SIZE_ONE = "1"
# A reduction wrapper's keyword for the axis it reduces (Spec.reduced_axis_keyword).
DIM_KEYWORD = "dim"


def fixed_axes(shape: tuple[str, ...]) -> tuple[str, ...]:
    """The named axes of a declared shape, without a leading "..."."""
    return shape[1:] if shape[:1] == ("...",) else shape


def broadcast_axes_of(declared: list[tuple[str, ...]]) -> tuple[str, ...] | None:
    """The broadcast shape of declared shapes, lined up from the last axis: at each place the named
    axis there (1 where every shape has 1 or none), "..." first where any has it (None where none
    is declared)."""
    if not declared:
        return None
    fixed = [fixed_axes(shape) for shape in declared]
    broadcast = []
    for place in range(max(map(len, fixed)), 0, -1):  # from the first axis of the longest to the last
        named = [shape[-place] for shape in fixed if len(shape) >= place and shape[-place] != SIZE_ONE]
        broadcast.append(named[0] if named else SIZE_ONE)
    return (("...",) if any(shape[:1] == ("...",) for shape in declared) else ()) + tuple(broadcast)


def _floats(tensors) -> list[str]:
    """The names of `tensors` that hold float values (by their first accepted dtype's kind)."""
    from .dtypes import category

    return [t.name for t in tensors if category(t.dtypes[0]) == "float"]
