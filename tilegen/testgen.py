"""Plan the generated tests of one op: shapes, dtypes, oracle code and bad-argument cases.

The oracle is derived from the spec's own expressions (or its `reference`), emitted as
PyTorch code that runs in float64 on the CPU, independent of the Triton kernel.
"""

from __future__ import annotations

from .dtypes import DTYPES
from .expressions import assignments
from .lowering import records_gradients
from .matmul_lowering import epilogue_backward, keeps_exact_accumulator
from .reduction_lowering import differentiates_twice, has_backward_kernel
from .rows import ELEMENT, ROW_LENGTH, level_of
from .spec import SIZE_ONE, Spec, TensorSpec

# Functions whose inputs the tests keep positive, so the oracle is not mostly NaN.
_POSITIVE_DOMAIN = ("log", "sqrt", "rsqrt")


def dtype_root(spec: Spec) -> TensorSpec:
    """The input whose dtypes an op's tests and benchmark run over (`dtype` in them: the inputs
    that follow it take it too, the others their first dtype): a matmul's A; another op's input
    whose dtype its first output follows, where it follows one (a float32 scale or a bool mask
    listed ahead of it would hold the tests to its one dtype), else its first input."""
    source = spec.outputs[0].dtype_source
    first = source if spec.kind != "matmul" and source in {t.name for t in spec.inputs} else spec.inputs[0].name
    return spec.input(spec.input(first).dtype_source)


def _dtype_exprs(spec: Spec, tensors) -> list[str]:
    root = dtype_root(spec).name
    out = []
    for tensor in tensors:
        if tensor.dtype_source == root:
            out.append("dtype")
        else:
            out.append(DTYPES[spec.input(tensor.dtype_source).dtypes[0] if tensor.dtype_source in
                              {t.name for t in spec.inputs} else tensor.dtypes[0]].torch)
    return out


def pytorch_lines(spec: Spec, target: str, scalars: frozenset[str] = frozenset(), outputs=None) -> list[str]:
    """The op's math as PyTorch lines, for `target` "torch" (the float64 oracle) or "eager" (the
    benchmark's baseline): a matmul's [M] inputs made columns, a reduction's steps first (those
    its outputs read, where its reference does not say otherwise), the outputs (`outputs`: those
    named, by default all), then the outputs given the op's shapes."""
    outputs = spec.outputs if outputs is None else outputs
    expressions = spec.output_expressions()
    # Only the steps an output reads: one a reference replaces (softmax's max and exp, beside
    # torch.softmax) would be work the eager baseline does for nothing, and time it is charged.
    reads = names_read(spec)
    read = set().union(*(reads[t.name] for t in outputs))
    steps = [(n, e) for n, e in spec.steps if n in read]
    if target == "eager":
        # A reference that repeats a step computed anyway reads it instead (add_rms_norm's
        # rms_norm(x + residual, ...) beside its step s: x + residual): one sum, as a user writes it.
        expressions = {name: e.sharing(dict(steps)) for name, e in expressions.items()}
    math = steps + [(t.name, expressions[t.name]) for t in outputs]
    # (The eager code's functions of scalars alone keep an int scalar's kind, and the int
    # literals of int math stay ints, exact: the kinds say which.)
    kinds = spec.number_kinds()
    whole = target == "torch"  # (the oracle may be given per-row inputs along the row: its `whole`)
    length = row_length(spec, math, target)
    if length and target == "eager":
        scalars = scalars | {ROW_LENGTH}  # (a Python int there, as the scalars are numbers)
    return (matmul_columns(spec, whole) + row_values(spec, whole) + length
            + assignments(math, target, scalars, kinds=kinds)
            + rows_shaped(spec, outputs) + matmul_shaped(spec, expressions, outputs))


def row_length(spec: Spec, math, target: str) -> list[str]:
    """The line that gives a reduction's math the row's length it reads (`N` in the spec), from an
    input along the rows, where some of `math` (name -> expression) reads it: for the oracle a
    float64 number, as its scalars are; in eager code a Python int, as `x.shape[-1]` is."""
    if not any(ROW_LENGTH in expression.names for _, expression in math):
        return []
    roles = spec.row_roles()
    length = next(t.name for t in spec.inputs if roles[t.name] != "row") + ".shape[-1]"
    return [f"{ROW_LENGTH} = " + (f"torch.tensor({length}, dtype=torch.float64)" if target == "torch" else length)]


def names_read(spec: Spec) -> dict[str, set[str]]:
    """Each step's and output's names (its reference's, where given), read directly or through the
    steps it reads."""
    return spec.names_read(spec.output_expressions())


def _oracle(spec: Spec) -> tuple[list[str], str]:
    lines = pytorch_lines(spec, "torch")
    names = [t.name for t in spec.outputs]
    # A result that does not depend on any tensor (a constant) still needs the output's shape.
    result = names[0] if len(names) == 1 else "(" + ", ".join(names) + ",)"
    return lines, result


def matmul_columns(spec: Spec, whole: bool = False) -> list[str]:
    """Lines that make a matmul's [M] epilogue inputs columns ([M, 1]: one value per row of the
    output, the same along N), as the kernel reads them; PyTorch would line [M] up with N.
    `whole`: the oracle's, which leaves those its `whole` names as given (already [M, N])."""
    if spec.kind != "matmul":
        return []
    return [_along_rows(t, whole) for t in spec.inputs if term_role(spec, t) == "row"]


def row_values(spec: Spec, whole: bool = False) -> list[str]:
    """Lines that give a reduction's per-row inputs ([...]) the reduced axis as a last axis of 1,
    as the kernel reads them (one value for the whole row): PyTorch would line [...] up with N.
    `whole`: the oracle's, which leaves those its `whole` names as given (already [..., N])."""
    if spec.kind != "reduction":
        return []
    return [_along_rows(t, whole) for t in spec.inputs if term_role(spec, t) == "row"]


def _along_rows(tensor, whole: bool) -> str:
    if not whole:
        return f"{tensor.name} = {tensor.name}[..., None]"
    return f'{tensor.name} = {tensor.name} if "{tensor.public}" in whole else {tensor.name}[..., None]'


def term_role(spec: Spec, tensor) -> str:
    """How `tensor` lines up with the terms of the op's math, whose sum its gradient is where it
    is broadcast (the generated gradient tests hold such a gradient to the size of its terms):
    "a" and "b" (a matmul's operands: rows and columns of the terms), "row" (one value per row
    of the terms, given a last axis of 1: a matmul's [M] input, a reduction's per-row one),
    "element" (lined up from the last axis, as PyTorch broadcasts), or "fixed" (a weight a
    reduction's PyTorch reference takes at its own shape only: not given at the terms')."""
    if spec.kind == "matmul":
        parts = spec.matmul_parts()
        if tensor.name in (parts.a.name, parts.b.name):
            return "a" if tensor.name == parts.a.name else "b"
        return "row" if parts.matrix(tensor) == (parts.m,) else "element"
    if spec.kind == "reduction":
        role = spec.row_roles()[tensor.name]
        return "row" if role == "row" else "fixed" if role == "column" and spec.reference else "element"
    return "element"


def rows_shaped(spec: Spec, outputs=None) -> list[str]:
    """Lines that give a reduction's outputs, computed by PyTorch, the op's shapes: the rows'
    shape ([..., N]) where PyTorch's broadcasting would not make it (an output of a weight [N]
    alone, of a value per row, or of some of the inputs whose rows broadcast), and for an output
    of one value per row that shape less the reduced axis PyTorch's reductions keep (keepdim)."""
    if spec.kind != "reduction":
        return []
    outputs = spec.outputs if outputs is None else outputs
    roles = spec.row_roles()
    rows = {t.name for t in spec.inputs if roles[t.name] != "column"}
    reads = names_read(spec)
    levels = spec.row_levels()
    for name, expression in spec.steps:
        levels[name] = level_of(expression.tree.body, levels)
    expressions = spec.output_expressions()
    lines = []
    for t in outputs:
        # PyTorch gives the rows' shape where the output reads every input with rows, and varies
        # along the row (or is one value per row, which keeps the axis as 1).
        along = roles[t.name] != "element" or level_of(expressions[t.name].tree.body, levels) == ELEMENT
        if rows <= reads[t.name] and along:
            continue
        if not lines:
            # (A per-row input has its last axis of 1 by now: row_values gave it one.)
            shapes = [f"{i.name}.shape" for i in spec.inputs if i.name in rows]
            lines.append(f"_rows = torch.broadcast_shapes({', '.join(shapes)})")
        # A value per row keeps its last axis: 1, or the row's where the gradient tests give a
        # per-row input it reads along its row (`whole`: the terms' sizes, which skip it).
        shape = "_rows" if roles[t.name] == "element" else f"(*_rows[:-1], {t.name}.shape[-1])"
        lines.append(f"{t.name} = {t.name}.expand({shape})")
    lines += [f"{t.name} = {t.name}.squeeze(-1)" for t in outputs if roles[t.name] == "row"]
    return lines


def matmul_shaped(spec: Spec, expressions: dict, outputs) -> list[str]:
    """Lines that give a matmul's outputs that read no accumulator (`r * 2` beside `acc + r`) the
    output's shape, as the kernel writes them: PyTorch's result has their inputs' shape (a 0-d scale's)."""
    if spec.kind != "matmul":
        return []
    return [f"{t.name} = {t.name}.expand(torch.broadcast_shapes({t.name}.shape, acc.shape))"
            for t in outputs if "acc" not in expressions[t.name].names]


def _base_value(scalar) -> str:
    """The value a test call gives a scalar where it gives none: its default, or for a scalar the
    spec gives none (a required keyword) one of its own, other than _scalar_test_value's (so a
    test that passes that one still changes the value the kernel gets)."""
    if scalar.default is not None:
        return repr(scalar.default)
    return {"bool": "False", "int": "2", "float": "1.3"}[scalar.type]


def _scalar_test_value(scalar) -> str:
    if scalar.type == "bool":  # the other branch than the default's
        return repr(not scalar.default)
    if scalar.type == "int":
        return repr((scalar.default or 0) + 3)
    # Not exact in float32 (a tenth in it): a float64 op meets its float64 oracle to the last bits
    # only where its kernels take the scalar in float64 (lowering.kernel_scalar_params).
    return repr(round(((scalar.default if scalar.default is not None else 0.0) * 0.5 + 0.75) * 1024) / 1024 + 0.1)


def _takes_whole(spec: Spec) -> bool:
    """Whether the oracle has a `whole` parameter: it gives some input a last axis of 1."""
    return any(term_role(spec, t) == "row" for t in spec.inputs)


def _wide_math(spec: Spec) -> bool:
    """Math in float64 beside bfloat16 tensors, which Triton's interpreter converts wrongly (the
    op refuses it there): the spec asks for float64 math, or a tensor is float64 alone."""
    return spec.compute == "float64" or any(t.dtypes == ("float64",) for t in spec.inputs + spec.outputs)


def _interpreter_refusal(spec: Spec) -> str:
    """Why Triton's interpreter cannot run the op in bfloat16 (the op refuses it there), or "":
    its bfloat16 dot is wrong, and so is its float64 math beside bfloat16."""
    if spec.kind == "matmul":
        return "Triton's interpreter cannot multiply bfloat16 matrices"
    if _wide_math(spec):
        return "Triton's interpreter converts float64 math to bfloat16 wrongly"
    return ""


def _sample_dtype(spec: Spec) -> str:
    """The dtype the tests of one dtype run in: the dtype root's first dtype that Triton's
    interpreter runs too (a spec listing bfloat16 first for a matmul is tested in its next one),
    else its first."""
    dtypes = dtype_root(spec).dtypes
    runs = [d for d in dtypes if not (_interpreter_refusal(spec) and d == "bfloat16")]
    return (runs or dtypes)[0]


def _common(spec: Spec, header: str, package: str) -> dict:
    lines, result = _oracle(spec)
    scalars = [s for s in spec.scalars]
    in_float_math = spec.int_scalars_in_float_math()
    root = dtype_root(spec)
    followers = [t for t in spec.inputs if t.dtype_source == root.name and t is not root]
    refusal = _interpreter_refusal(spec)
    floats = spec.float_inputs()
    return dict(
        header=header, package=package, op=spec.op,
        dtypes_literal=", ".join(DTYPES[d].torch for d in root.dtypes),
        # Why the interpreter cannot run the op in bfloat16 ("" where it can): its tests skip it there.
        bfloat16_refusal=refusal,
        first_dtype=DTYPES[_sample_dtype(spec)].torch,
        # Where bfloat16 is the op's only dtype, the interpreter runs none of its tests.
        interpreter_skip=f"{refusal} (bfloat16 is the op's only dtype); runs on a GPU"
        if refusal and root.dtypes == ("bfloat16",) else "",
        input_names=[t.name for t in spec.inputs],
        input_labels=[t.public for t in spec.inputs],
        input_dtype_exprs=_dtype_exprs(spec, spec.inputs),
        output_dtype_exprs=_dtype_exprs(spec, spec.outputs),
        # Scalars arrive as the wrapper takes them: keywords named as in the spec.
        reference_params=", ".join([t.name for t in spec.inputs] + (["whole=()"] if _takes_whole(spec) else [])
                                   + (["**scalars"] if scalars else [])),
        term_roles=repr(tuple(term_role(spec, t) for t in spec.inputs)),
        reference_lines=lines,
        reference_result=result,
        single_output=len(spec.outputs) == 1,
        as_tuple_got="(got,)" if len(spec.outputs) == 1 else "got",
        as_tuple_want="(want,)" if len(spec.outputs) == 1 else "want",
        scalars=[dict(name=s.name, label=s.public, type=s.type,
                      default=_base_value(s),
                      # An int scalar stays int in the oracle where it meets int math, as in the
                      # kernel; one that reaches float math alone is an exact float64 number there.
                      oracle_dtype={"float": "torch.float64", "bool": "torch.bool",
                                    "int": "torch.float64" if s.name in in_float_math else "torch.int64"}[s.type])
                 for s in scalars],
        scalar_values=", ".join(f'"{s.public}": {_scalar_test_value(s)}' for s in scalars),
        # Scalars without a default, given in every call the tests make (by a partial of the op).
        required_scalars=", ".join(f"{s.public}={_base_value(s)}" for s in scalars if s.default is None),
        follower=followers[0].name if followers else "",
        follower_label=followers[0].public if followers else "",
        positive=_positive_domain(spec),
        oracle_detaches=_oracle_detaches(spec),
        records_gradients=records_gradients(spec),
        # Whether gradients asked for with create_graph=True differentiate again (else refused by name).
        second_derivative=spec.kind != "reduction" or differentiates_twice(spec),
        # Each float input frozen in turn, where another is left to differentiate.
        frozen_inputs=[t.public for t in spec.inputs if t.name in floats] if len(floats) > 1 else [],
    )


def _positive_domain(spec: Spec) -> bool:
    return any(name in _POSITIVE_DOMAIN for _, e in spec.body for name in _called(e))


def _oracle_detaches(spec: Spec) -> bool:
    """Whether the oracle's math (each output's reference, else its compute, and the steps it
    reads) stops a gradient with detach(): finite differences then measure the gradient it stops
    where the result depends on the detached value, and gradcheck cannot hold the op to them."""
    expressions = spec.output_expressions()
    reads = names_read(spec)
    steps = dict(spec.steps)
    read = set().union(*(reads[name] for name in expressions)) if expressions else set()
    return any("detach" in _called(e) for e in [*expressions.values(), *(steps[n] for n in read if n in steps)])


def _called(expression) -> set[str]:
    import ast

    return {node.func.id for node in ast.walk(expression.tree) if isinstance(node, ast.Call)}


def _shape_literal(shapes) -> str:
    return ", ".join(repr(tuple(s)) for s in shapes)


def elementwise_test_context(spec: Spec, header: str, package: str) -> dict:
    ctx = _common(spec, header, package)
    ctx.update(_elementwise_shapes(spec))
    fit = spec.fit_rank  # every shape below, made valid for the axes the spec declares
    tile = spec.tiles[0]
    never = spec.mask(tile.axis) == "never"
    if never:
        big = max(tile.sizes)
        shapes = [(4 * big,), (big,), (2, big), (3, 2, big)]
        ctx.update(layout_shape=fit((4, big)), nan_shape=fit((big,)), out_shape=fit((big, 2)),
                   scalar_shape=fit((2 * big,)), config_shape=fit((3 * big,)), config_numel=3 * big,
                   bad_shape=fit((big,)), never_mask=dict(axis=tile.axis, bad_shape=fit((big + 1,))),
                   tiny_shape=fit((big,)), broadcast_rows=2, broadcast_last=big,
                   dynamic_shapes=(fit((2, big)), fit((3, big))))
    else:
        shapes = [(1 << 16,), (1,), (1000,), (127, 65), (3, 5, 7, 11)]
        ctx.update(layout_shape=fit((37, 129)), nan_shape=fit((257,)), out_shape=fit((100, 3)),
                   scalar_shape=fit((1000,)), config_shape=fit((3001,)), config_numel=3001, bad_shape=fit((8,)),
                   never_mask=None, tiny_shape=fit((3, 5)), broadcast_rows=4, broadcast_last=33,
                   dynamic_shapes=(fit((6, 33)), fit((47, 47))))
    ctx["broadcast_shapes"] = _broadcast_inputs(spec, ctx["broadcast_rows"], ctx["broadcast_last"])
    # Six strided dims (the output's shape as the spec's axes let it be), made by permuting a
    # contiguous tensor of these sizes: (8, 6, 4, 7, 5, 3) from (3, 4, 5, 6, 7, 8).
    high = fit((8, 6, 4, 7, 5, 3))
    ctx["high_rank_shape"] = high
    ctx["high_rank_physical"] = (high[5], high[2], high[4], high[1], high[3], high[0]) if len(high) == 6 else None
    out_shape = ctx["out_shape"]
    # The same shape with its last two axes swapped in memory (an out= written through strides).
    ctx["out_shape_t"] = out_shape[:-2] + (out_shape[-1], out_shape[-2]) if len(out_shape) > 1 else None
    ctx["empty_shapes"] = _shape_literal(dict.fromkeys(fit(s) for s in [(0,), (3, 0, 5)]))
    ctx["shapes_literal"] = _shape_literal(dict.fromkeys(fit(s) for s in shapes + list(spec.test_shapes)))
    return ctx


def _elementwise_shapes(spec: Spec) -> dict:
    """How tests shape each input: the whole output shape, or its last axes where the spec
    declares fewer (a bias [N] beside x [..., N])."""
    axes = spec.broadcast_axes()
    whole = [i for i, t in enumerate(spec.inputs) if t.shape is None or t.shape == axes]
    return dict(
        input_shape_exprs=spec.input_shape_exprs(),
        declared=any(t.shape is not None for t in spec.inputs),
        # The call checks tried on the second input: a last axis cut to 3 is refused by the declared
        # axis's size where another input names that axis too, or else by broadcasting (an axis of
        # size 1 stays 1: neither).
        declared_second=len(spec.inputs) > 1 and spec.inputs[1].shape is not None
        and spec.inputs[1].shape[-1] != SIZE_ONE
        and any(t.shape and spec.inputs[1].shape[-1] in t.shape for t in spec.inputs if t is not spec.inputs[1]),
        undeclared_second=len(spec.inputs) > 1 and spec.inputs[1].shape is None,
        # An input with the output's shape and dtype, which out= may be, where one has them.
        in_place_input=next((i for i in whole if len(spec.outputs) == 1 and _same_dtype(spec.inputs[i], spec.outputs[0])),
                            None),
    )


def _broadcast_inputs(spec: Spec, rows: int, last: int) -> str:
    """Input shapes that broadcast together to (rows, 5, last), as source, where the spec has two
    or more inputs and declares none of their shapes (else ""): the first (rows, 1, last), the
    second (5, last), any others (last,). Each is then broadcast in the call, and its gradient
    summed over the axes it was."""
    if len(spec.inputs) < 2 or any(t.shape is not None for t in spec.inputs):
        return ""
    return repr([(rows, 1, last), (5, last)] + [(last,)] * (len(spec.inputs) - 2))


def _same_dtype(a: TensorSpec, b: TensorSpec) -> bool:
    """Whether tensors `a` and `b` have one dtype in every call: both follow one input, or each
    has the same single dtype."""
    return a.dtype_source == b.dtype_source or (len(a.dtypes) == 1 and a.dtypes == b.dtypes)


def batch_layouts(a_batched: bool, b_batched: bool, along_m_batched: bool) -> dict:
    """The batch axes a batched matmul's generated tests give each operand (arguments of their
    make_batched), by which operands the spec gives batch axes: an operand declared without them
    is one matrix for every batch and gets none. A batch of A folds into M where B and every
    epilogue input along M are the same for every matrix of it or batched with it
    (`along_m_batched`: no epilogue input along M lacks the batch axes)."""
    def pair(batch: str) -> str:  # (a's batch axes, b's): `batch` for each batched operand
        return f"{batch if a_batched else '()'}, {batch if b_batched else '()'}"

    if a_batched and b_batched:  # batch axes that broadcast against each other too
        batches = "((3,), (3,)), ((3,), ()), ((), (3,)), ((2, 1), (1, 3)), ((2, 3), (3,)), ((1,), (4,))"
        empty, shared_note = "((0,), (0,)), ((0,), ()), ((2,), (0, 1))", ""
        unfolded_note = "A batch of b too"
    else:
        batches = ", ".join(f"({pair(batch)})" for batch in ("(3,)", "(2, 3)", "(1,)", "(2, 1)"))
        empty = f"({pair('(0,)')}), ({pair('(0, 2)')})"
        shared_note = " (b is one [K, N] matrix for every batch)" if a_batched else " (a is one [M, K] matrix for every batch)"
        unfolded_note = ("A batch of a held across its rows, which does not fold into M" if a_batched
                         else "A batch of b alone (a is one matrix), which never folds into M")
    return dict(batches=batches, shared_note=shared_note, two=pair("(2,)"), spec_shape=pair("shape[:1]"),
                folds=a_batched and along_m_batched, unfolded=pair("(3,)"),
                across=", across=True" if a_batched and not b_batched else "", unfolded_note=unfolded_note,
                four=pair("(4,)"), moved=0 if a_batched else 1, two_three=pair("(2, 3)"),
                batched_operands=[i for i, batched in enumerate((a_batched, b_batched)) if batched], empty=empty)


def matmul_test_context(spec: Spec, header: str, package: str) -> dict:
    ctx = _common(spec, header, package)
    parts = spec.matmul_parts()
    a, b, m, n, k, extras = parts.a, parts.b, parts.m, parts.n, parts.k, list(parts.extras)
    never = {axis: spec.mask(axis) == "never" for axis in (m, n, k)}
    fp8 = spec.fp8_operands()

    def fit(*shape):
        return spec.fit_to_blocks((m, n, k), shape)

    shapes = [fit(*s) for s in [(256, 256, 256), (1, 1, 1), (127, 65, 129), (33, 200, 17), (200, 16, 300),
                                (64, 64, 64)]]
    # A batched spec's own shapes are [B, M, N, K]: batches of B matrices of both operands.
    batched_shapes = [(s[0], *fit(*s[1:])) for s in spec.test_shapes] if parts.is_batched else []
    shapes += [s for s in spec.test_shapes if s not in shapes and not parts.is_batched]
    empty = [fit(*s) for s in [(0, 32, 16), (32, 0, 16)]]
    if not never[k]:
        empty.append(fit(32, 16, 0))
    never_axes = [dict(axis=axis, bad=fit(64, 64, 64)[i] + 1, index=i) for i, axis in enumerate((m, n, k))
                  if never[axis]]
    ctx.update(
        a=a.name, b=b.name, m=m, n=n, k=k,
        bm=spec.tile(m).block, bn=spec.tile(n).block,
        a_label=a.public, b_label=b.public,
        extras=[dict(name=t.name, label=t.public, shape_expr=_extra_shape(parts.matrix(t), m, n),
                     index=[i.name for i in spec.inputs].index(t.name),
                     batched=t.name in parts.batched) for t in extras],
        batched=parts.is_batched,
        a_batched=a.name in parts.batched,
        b_batched=b.name in parts.batched,
        layouts=batch_layouts(a.name in parts.batched, b.name in parts.batched,
                              not [t for t in extras if m in parts.matrix(t) and t.name not in parts.batched]),
        batched_shapes_literal=_shape_literal(batched_shapes),
        batched_extras=any(t.name in parts.batched for t in extras),
        shapes_literal=_shape_literal(dict.fromkeys(shapes)),
        empty_literal=_shape_literal(empty),
        odd_shape=fit(127, 65, 129),
        dynamic_shapes=_matmul_dynamic_shapes(fit, [never[axis] for axis in (m, n, k)]),
        aligned_shape=fit(128, 96, 256),
        # Output rows 16-byte aligned in every dtype, a multiple of no tile (where masks allow).
        store_shape=fit(127, 72, 129),
        tiny_shape=fit(5, 3, 4),
        a_index=[t.name for t in spec.inputs].index(a.name), b_index=[t.name for t in spec.inputs].index(b.name),
        # The dtype the training variant keeps the accumulator in (matmul_lowering.keeps_exact_accumulator).
        kept_dtype="torch.float32" if not spec.no_gradient() and keeps_exact_accumulator(epilogue_backward(spec))
        else f"inputs[{[t.name for t in spec.inputs].index(a.name)}].dtype",
        # Config keys whose candidates hold every tile, and every split of K.
        large_key=", ".join(map(str, fit(4096, 4096, 4096))),
        skinny_key=", ".join(map(str, fit(64, 4096, 4096))),
        never_axes=never_axes,
        # fp8 operands: the oracle multiplies them exactly; the output's rounding bounds the error.
        precision_key="output_dtypes(dtype)[0]" if fp8 else f'"{spec.precision}" if dtype == torch.float32 else dtype'
        if spec.precision != "ieee" else "dtype",
        fp8=fp8,
        no_gradient=spec.no_gradient(),
    )
    return ctx


def _extra_shape(shape, m, n) -> str:
    return "(" + "".join(f"{'mm' if axis == m else 'nn'}, " for axis in shape).rstrip(" ") + ")"


def row_shape_exprs(spec: Spec, tensors, shape: str = "shape") -> list[str]:
    """Python expressions of each tensor's shape when the rows' is `shape` ([..., N])."""
    roles = spec.row_roles()
    forms = {"element": f"tuple({shape})", "column": f"tuple({shape}[-1:])", "row": f"tuple({shape}[:-1])"}
    return [forms[roles[t.name]] for t in tensors]


def _matmul_dynamic_shapes(fit, never) -> tuple:
    """(M, N, K) twice, the first axis the wrapper does not hold to a block multiple (masks:
    never) sized otherwise the second time: as another such axis is, where there is one (a guard
    relating two sizes fails there; a held axis' size, a multiple of 16, would meet the guard a
    compiled matmul keeps on that), else a size of its own; the same shape twice where every
    axis is held. No free size is a multiple of 16, nor twice one: a batch of two matrices folded
    into M guards on whether 2M is (runtime.layout.size_factor), and a trace at M = 40 (2M = 80)
    recompiled at M = 65."""
    first = fit(36, 65, 129)
    free = [axis for axis, held in enumerate(never) if not held]
    if free:
        second = list(first)
        second[free[0]] = first[free[1]] if len(free) > 1 else (76, 97, 193)[free[0]]
        return first, tuple(second)
    return first, first


def reduction_test_context(spec: Spec, header: str, package: str) -> dict:
    ctx = _common(spec, header, package)
    roles = spec.row_roles()
    # Rows longer than the smallest block the spec loops in.
    long_shape = (3, 2 * min(spec.tiles[0].sizes) + 37)
    shapes = [(4, 128), (1, 1), (3, 1000), (2, 3, 77), (64, 33), (2, long_shape[1])]
    columns = [t for t in spec.inputs if roles[t.name] == "column"]
    ctx.update(
        input_shape_exprs=row_shape_exprs(spec, spec.inputs),
        output_shape_exprs=row_shape_exprs(spec, spec.outputs),
        shapes_literal=_shape_literal(dict.fromkeys(shapes + list(spec.test_shapes))),
        long_shape=long_shape,
        backward_kernel=has_backward_kernel(spec),
        column=columns[0].public if columns else "",
        column_index=spec.inputs.index(columns[0]) if columns else -1,
        # The one output is a value per row ([...]): an out= of it has no row axis to transpose,
        # and one that shares memory with an input is a column of it (where the dtypes allow).
        single_output_per_row=len(spec.outputs) == 1 and roles[spec.outputs[0].name] == "row",
        overlapping_out=_overlapping_out(spec, roles),
        along=spec.reduced_axis_keyword(),
        broadcast_shapes=_broadcast_rows(spec, roles),
        # More rows, and longer ones (within the tile a compiled graph guards on), as many rows as
        # the row is long (a guard relating the two sizes fails there).
        dynamic_shapes=((6, 50), (60, 60)),
    )
    return ctx


def _broadcast_rows(spec: Spec, roles: dict) -> str:
    """Input shapes whose rows broadcast together to (4, 5, 33), as source, where two or more
    inputs have rows (else ""): the first with elements (4, 1, 33), the others (5, 33), values per
    row (5,), weights (33,). Each input with rows is then broadcast in the call, and its gradient
    summed over the axes it was."""
    with_rows = [t for t in spec.inputs if roles[t.name] in ("element", "row")]
    if len(with_rows) < 2:
        return ""
    first = next(t for t in spec.inputs if roles[t.name] == "element")
    shapes = {"element": (5, 33), "row": (5,), "column": (33,)}
    return repr([(4, 1, 33) if t is first else shapes[roles[t.name]] for t in spec.inputs])


def _overlapping_out(spec: Spec, roles: dict) -> str:
    """An out= for a one-output reduction that has its shape and dtype and shares memory with an
    input along the row, as source ("" where no input's dtype is the output's)."""
    out = spec.outputs[0]
    whole = next((i for i, t in enumerate(spec.inputs)
                  if roles[t.name] == "element" and t.dtype_source == out.dtype_source), None)
    if whole is None:
        return ""
    return f"inputs[{whole}]" if roles[out.name] == "element" else f"inputs[{whole}][..., 0]"


def test_context(spec: Spec, header: str, package: str) -> dict:
    if spec.kind == "matmul":
        return matmul_test_context(spec, header, package)
    if spec.kind == "reduction":
        return reduction_test_context(spec, header, package)
    return elementwise_test_context(spec, header, package)
