"""Compute everything a template needs from a `Spec`: names, index math, checks, configs.

Templates only place these strings; every decision about the generated code is made here,
in Python, where it can be read and tested.
"""

from __future__ import annotations

import textwrap

from .dtypes import DTYPES
from .escaping import docstring_text
from .decisions import decides_on_fused_math
from .derivatives import Backward, differentiate, recorded_from
from .expressions import assignments
from .naming import backward_op_name, training_op_name
from .spec import Spec, TensorSpec, fixed_axes
from .schema import RUNTIME_VERSION, store_bit
from .torch_gradients import torch_gradients
from .tables import backward_table_name, load_table, render_table, table_for_spec




def _dtype_constant(source: str) -> str:
    return f"_{source.upper()}_DTYPES"


def _dtype_groups(spec: Spec) -> list[dict]:
    groups = {}
    for tensor in spec.inputs + spec.outputs:
        if tensor.dtype_source not in groups and tensor.dtype_source == tensor.name and tensor in spec.inputs:
            groups[tensor.name] = dict(
                constant=_dtype_constant(tensor.name),
                torch_dtypes="".join(f"{DTYPES[d].torch}, " for d in tensor.dtypes).rstrip(" "),
            )
    return [groups[k] for k in sorted(groups)]


def input_checks(spec: Spec, ndims: dict[str, int | None], min_ndims: dict[str, int] | None = None,
                 max_ndims: dict[str, int] | None = None) -> list[str]:
    op = repr(spec.op).replace("'", '"')
    lines = []
    for tensor in spec.inputs:
        # An input's dtype source is itself (its own list) or the input it follows.
        source = tensor.dtype_source
        ndim, least, most = (ndims.get(tensor.name), (min_ndims or {}).get(tensor.name),
                             (max_ndims or {}).get(tensor.name))
        suffix = (f", ndim={ndim}" if ndim is not None else f", min_ndim={least}" if least is not None
                  else f", max_ndim={most}" if most is not None else "")
        lines.append(f'rt.check_tensor({op}, "{tensor.public}", {tensor.name}, {_dtype_constant(source)}{suffix})')
        if source != tensor.name:
            lines.append(f'rt.check_same_dtype({op}, "{tensor.public}", {tensor.name}, '
                         f'"{spec.input(source).public}", {source})')
    pairs = _named_pairs(spec.inputs)
    if len(spec.inputs) > 1:
        lines.append(f"rt.check_same_device({op}, [{pairs}])")
    met = spec.int_scalars_met()
    for scalar in spec.scalars:
        # An int scalar computed with int tensors, or stored alone in an int output, must fit their
        # dtype (see categories.int_scalars_met).
        inputs, outputs = met.get(scalar.name, ((), ()))
        extra = "".join(f", {keyword}=[{_labelled(pairs)}]"
                        for keyword, pairs in (("meets", inputs), ("stores", outputs)) if pairs)
        lines.append(f'rt.check_scalar({op}, "{scalar.public}", {scalar.name}, "{scalar.type}"{extra})')
    return lines


def _named_pairs(tensors) -> str:
    """("name", identifier) pairs: how runtime checks receive tensors to name in errors."""
    return _labelled((t.public, t.name) for t in tensors)


def _labelled(pairs) -> str:
    """("label", expression) pairs, from (label, expression source) ones."""
    return ", ".join(f'("{label}", {expr})' for label, expr in pairs)


def _signature(spec: Spec) -> str:
    parts = [t.public for t in spec.inputs]
    keyword_only = []
    for scalar in spec.scalars:
        keyword_only.append(scalar.public if scalar.default is None else f"{scalar.public}={scalar.default!r}")
    if spec.reduced_axis_keyword():
        keyword_only.append(f"{spec.reduced_axis_keyword()}=-1")
    keyword_only.append("out=None")
    return ", ".join(parts + ["*"] + keyword_only)


def _arg_docs(spec: Spec) -> list[str]:
    lines = ["Args:"]
    for tensor in spec.inputs:
        shape = f"[{', '.join(tensor.shape)}]" if tensor.shape else "any shape (the inputs broadcast together)"
        dtypes = ", ".join(tensor.dtypes)
        same = f" (same dtype as {spec.input(tensor.dtype_source).public})" \
            if tensor.dtype_source != tensor.name else ""
        lines.append(f"    {tensor.public}: tensor {shape}, {dtypes}{same}.")
    for scalar in spec.scalars:
        default = "required" if scalar.default is None else f"default {scalar.default!r}"
        lines.append(f"    {scalar.public}: {scalar.type} scalar, {default}.")
    if spec.reduced_axis_keyword():
        lines.append(f"    {spec.reduced_axis_keyword()}: the axis of the rows to reduce, default -1 (the last); the "
                     "inputs along the rows have it, a per-row input or output has the rows' shape without it.")
    names = ", ".join(t.public for t in spec.outputs)
    if len(spec.outputs) == 1:
        lines.append(f"    out: optional tensor to write {names} into.")
    else:
        lines.append(f"    out: optional tuple of tensors to write ({names}) into.")
    lines.append("Returns:")
    lines.append(f"    {names}" + (" (a tuple, in spec order)." if len(spec.outputs) > 1 else "."))
    return lines


def output_context(spec: Spec) -> tuple[list[dict], list[str], str]:
    """Per-output allocation info, the lines that unpack `out=`, and the return expression."""
    outputs, prelude = [], []
    single = len(spec.outputs) == 1
    if not single:
        names = ", ".join(f"{t.name}_out" for t in spec.outputs)
        prelude.append(f'{names} = rt.split_out("{spec.op}", out, {len(spec.outputs)})')
    for index, tensor in enumerate(spec.outputs):
        if tensor.dtype_source == tensor.name:
            dtype_expr = DTYPES[tensor.dtypes[0]].torch
        else:
            dtype_expr = f"{tensor.dtype_source}.dtype"
        earlier = spec.outputs[:index]
        others = ""
        if earlier:  # outputs must not share memory with each other either
            others = ", others=[" + ", ".join(f'("out[{i}]", {t.name})' for i, t in enumerate(earlier)) + "]"
        outputs.append(dict(
            name=tensor.name,
            arg="out" if single else f"{tensor.name}_out",
            arg_name="out" if single else f"out[{index}]",
            dtype_expr=dtype_expr,
            others=others,
        ))
    result = spec.outputs[0].name if single else "(" + ", ".join(t.name for t in spec.outputs) + ",)"
    return outputs, prelude, result


def common_context(spec: Spec, header: str) -> dict:
    kind_table, op_table = load_table(spec.kind), load_table(spec.op, scope="op")
    return dict(
        header=header,
        op=spec.op,
        doc_escaped=docstring_text(spec.doc),
        dtype_groups=_dtype_groups(spec),
        signature=_signature(spec),
        arg_docs=_arg_docs(spec),
        config_mode=spec.configs.mode,
        key_mask=_key_mask(spec),
        table=render_table(table_for_spec(spec, kind_table, op_table)),
        backward_table=_backward_table(spec, kind_table, op_table),
        runtime_version=RUNTIME_VERSION,
        scalar_params=kernel_scalar_params(spec.scalars),
        plain_scalar_params=", ".join(s.name for s in spec.scalars),  # (a function a kernel calls)
        # An elementwise math function's (a forward's, a backward's, a matmul epilogue's gradient).
        math_scalar_casts=scalar_casts(spec.scalars, widened=spec.int_scalars_in_float_math()),
        scalar_names="".join(f"{s.name}, " for s in spec.scalars).rstrip(" "),
        # The forward Op's `scalars`: each one's public name and type, for the checks at launch.
        scalar_kinds=tuple_source(f'("{s.public}", "{s.type}")' for s in spec.scalars),
        # The values in call order (tensors, then scalars), as parameters and as arguments alike.
        call_args=", ".join([t.name for t in spec.inputs] + [s.name for s in spec.scalars]),
        # The public wrapper's own parameters: the spec's names.
        public_call_args=", ".join([t.public for t in spec.inputs] + [s.public for s in spec.scalars]),
        input_args=", ".join(t.name for t in spec.inputs),
        batching=_batching(spec),
        named_inputs=", ".join(f"{t.public}={t.name}" for t in spec.inputs),
        # ("name", value, kind) of each scalar: what a vmapped call checks (library.vmapped).
        named_scalars="[" + ", ".join(f'("{s.public}", {s.name}, "{s.type}")' for s in spec.scalars) + "]",
        typed_params=_typed_params(spec),
        return_type="torch.Tensor" if len(spec.outputs) == 1 else
        "tuple[" + ", ".join("torch.Tensor" for _ in spec.outputs) + "]",
        input_pairs=f"[{_named_pairs(spec.inputs)}]",
        # Kernels compiled with no FMA contraction where the backward decides on fused math.
        fp_fusion=not decides_on_fused_math([(n, e.tree.body) for n, e in [*spec.steps, *spec.body]]),
    )


def _backward_table(spec: Spec, kind_table: dict, op_table: dict) -> str | None:
    """The backward kernel's table literal. An elementwise backward's: its own entries ahead of
    the op's where it has a table of its own, else None (it reads the forward's _TABLE). A
    reduction's: its own entries only, `{}` without them (the heuristic's): it holds more of a row
    live than the forward, whose measured configs misled it (layer_norm 32768x4096: the forward's
    1024-element loop on 4 warps made the training step 3.5x rms_norm's; bench/results/h200/
    reductions/backward_tune/)."""
    own = load_table(backward_table_name(spec.op), scope="op")
    if spec.kind == "reduction":
        return render_table(table_for_spec(spec, {}, own))
    if not own:
        return None
    return render_table(table_for_spec(spec, kind_table, op_table, own))


def _batching(spec: Spec) -> str:
    """The registered op's batching arguments (runtime/batching.py): which inputs take extra leading
    axes, and how many of each one's last axes are its own. An elementwise op's inputs broadcast
    whole, as PyTorch's (no axis of their own); another kind's `[..., X]` lines its `...` up with
    the other inputs' (a reduction's row [..., N] beside a per-row [...], a batched matmul's
    operands), and an input of a fixed rank is all its own axes."""
    elementwise = spec.kind == "elementwise"
    batchable = tuple(elementwise if t.shape is None else t.shape[:1] == ("...",) for t in spec.inputs)
    own = tuple(0 if elementwise or t.shape is None else len(t.shape) - (t.shape[:1] == ("...",))
                for t in spec.inputs)
    return f"batchable={batchable}, own_axes={own}"


def _typed_params(spec: Spec) -> str:
    """The registered op's parameters, annotated as torch.library infers its schema from them."""
    params = [f"{t.name}: torch.Tensor" for t in spec.inputs]
    # Positional parameters: only the trailing run of scalars with defaults keeps them (the
    # public wrapper takes scalars as keywords, in any order).
    trailing = len(spec.scalars)
    while trailing and spec.scalars[trailing - 1].default is not None:
        trailing -= 1
    for index, scalar in enumerate(spec.scalars):
        default = "" if index < trailing else f" = {scalar.default!r}"
        params.append(f"{scalar.name}: {scalar.type}{default}")
    return ", ".join(params)


def _key_mask(spec: Spec) -> str:
    """Which axes of the config key tell configs apart (configs.key); the element size always does."""
    if spec.kind == "matmul":
        parts = spec.matmul_parts()
        axes = (parts.m, parts.n, parts.k)
    elif spec.kind == "reduction":  # (row length, row count, element size): the count always counts
        return repr((spec.tiles[0].axis in spec.configs.key, True, True))
    else:
        axes = (spec.tiles[0].axis,)
    return repr(tuple(axis in spec.configs.key for axis in axes) + (True,))


def fixed_or(spec: Spec, name: str, candidates):
    fixed = dict(spec.configs.fixed)
    return [fixed[name]] if name in fixed else list(candidates)


def scalar_params(spec: Spec) -> list[str]:
    return [f"{s.name}: {s.type}" for s in spec.scalars]


# A float scalar reaches every kernel as float64: Triton's own launch would pass a Python float as
# float32 (a float64 op's `scale=0.1` off in its 8th digit) where a compiled graph's launch passes
# float64 (a float32 op's math then widened to float64: other roundings than the eager call's, and
# matmul_residual_scaled's epilogue at 4096x11008x4096 2.2x slower inside torch.compile). The
# kernel then takes it in its math's dtype once (scalar_casts): one value, eager and compiled.
def kernel_scalar_params(scalars) -> str:
    """A kernel's scalar parameters (ScalarSpecs), float ones annotated as float64."""
    return ", ".join(f"{s.name}: tl.float64" if s.type == "float" else s.name for s in scalars)


def scalar_casts(scalars, dtype: str = "compute", rank: int = 1, widened=frozenset()) -> list[str]:
    """The lines that take each float scalar in `dtype` (a name in the kernel), as a tensor of
    `rank` ones: a Python float in the interpreter has no .to(), and a float64 one must not pass
    through float32 on its way (float64 math). A bool scalar becomes a 1-bit value: Triton takes a
    Python bool as an unsigned byte, which where() and the logic of bool tensors do not read as one.
    The int scalars `widened` (Spec.int_scalars_in_float_math) are taken in float64 where the math
    is: Triton computes `k / 3` or `k * 0.5` of an int in float32, where PyTorch's Python int gives
    a float64 op the exact float64 value (in float32 math both round to float32)."""
    ones = ", ".join(["1"] * rank)
    lines = []
    for s in scalars:
        if s.type == "float":
            lines.append(f"{s.name} = (tl.zeros([{ones}], {dtype}) + {s.name}).to({dtype})")
        elif s.type == "bool":
            lines.append(f"{s.name} = {s.name} != 0")
        elif s.name in widened:
            lines += ["if MATH_64:", f"    {s.name} = (tl.zeros([{ones}], {dtype}) + {s.name}).to({dtype})"]
    return lines


def tuple_source(items) -> str:
    return "(" + "".join(f"{x}, " for x in items).rstrip(" ") + ")"


def gradients_formula(op: str | None, inputs: list[str], saved: list[str], sources: list[str], outputs: int,
                      saved_outputs: tuple = (), phases: str | None = None, whole: bool = False,
                      records: tuple | None = None, selective: bool = False, read_by: dict | None = None,
                      differentiable: str | None = None, named: str | None = None) -> str:
    """The rt.Gradients of an op whose tensor inputs are `inputs`: what its backward op (`op`)
    reads and where each input's gradient comes from (`phases`: its two calls; `whole`: the backward
    op is one launch its kernel's call path learns; `records`: output_records; `selective`: the
    backward op takes which inputs need a gradient; `read_by`: saved input -> the inputs whose
    gradients alone read its values, for those not always read; `differentiable`: the backward op's
    math in PyTorch's ops, for a backward under create_graph=True; `named`: the op its errors name,
    where another op registers it (a matmul's training variant); rt.Gradients)."""
    read_by = {name: read_by[name] for name in saved if name in read_by} if read_by else {}
    readers = tuple_source(tuple_source(inputs.index(r) for r in read_by[name]) if name in read_by else "None"
                           for name in saved)
    return (f"rt.Gradients({op or 'None'}, tensors={len(inputs)}, saved={tuple_source(inputs.index(n) for n in saved)}, "
            f"sources={tuple_source(sources)}, outputs={outputs}, saved_outputs={tuple_source(saved_outputs)}"
            + (f", records={tuple_source(tuple_source(r) for r in records)}" if records is not None else "")
            + (f", phases={phases}" if phases else "") + (", selective=True" if selective and op else "")
            + (f", read_by={readers}" if read_by and op else "")
            + (f", differentiable={differentiable}" if differentiable and op else "")
            + (f", named={named!r}" if named else "")
            + (", whole=True)" if whole and op else ")"))


# A backward op's last parameter: which of the op's tensor inputs need a gradient (rt.Gradients
# selective), the gradients it computes.
NEEDED_PARAM = ["_needed: list[bool]"]


def needed_gradients(inputs: list[str], backward: Backward) -> dict:
    """For a backward kernel computing `backward`'s gradients (its results, one per computed name)
    of the op's tensor `inputs`: whether each result is needed, as an expression of `_needed`
    (`result_needed`: its input needs a gradient, or an input whose gradient is the same value,
    an alias of it, does), the runtime's `stores=` flags made of them (`stores`), and the kernel's
    STORES bit of each result (`store_bits`)."""
    needed = [" or ".join(f"_needed[{i}]" for i, n in enumerate(inputs) if backward.aliases.get(n, n) == name)
              for name in backward.computed()]
    return dict(result_needed=needed, stores=tuple_source(needed), store_bits=[store_bit(i) for i in range(len(needed))])


def output_records(spec: Spec) -> tuple | None:
    """Per output, the positions of the tensor inputs it records a graph from (recorded_from: it
    reads them other than through detach() or a comparison; a matmul's accumulator counts as its
    operands), as rt.Gradients takes them: a call marks an output that records from no input
    requiring grad non-differentiable, as PyTorch's would be. None where every float output
    records from every float input (nothing to mark)."""
    names = [t.name for t in spec.inputs]
    floats = spec.float_inputs()
    matmul = spec.kind == "matmul"
    reads = recorded_from(list(spec.body), [*floats, *(["acc"] if matmul else [])], list(spec.steps))
    operands = [spec.matmul_parts().a.name, spec.matmul_parts().b.name] if matmul else []
    float_outputs = spec.float_outputs()
    records = []
    for t in spec.outputs:
        read = set(reads[t.name]) if t.name in float_outputs else set()  # (an int or bool output records none)
        read |= set(operands) if "acc" in read else set()
        records.append(tuple(i for i, n in enumerate(names) if n in read))
    every = tuple(i for i, n in enumerate(names) if n in floats)
    return None if all(r == every for r in records) else tuple(records)


def records_gradients(spec: Spec) -> bool:
    """Whether some float output records a graph from some input (output_records): else a call
    that records autograd has no gradient to give, and no training step to take."""
    records = output_records(spec)
    return bool(spec.float_inputs()) and (records is None or any(records))


def gradient_sources(backward: Backward, inputs: list[str], outputs: list[str]) -> list[str]:
    """Where each input's gradient comes from, as rt.Gradients takes it: nowhere (None), an
    incoming gradient as it is, or a result of the backward op (one per computed gradient)."""
    computed = backward.computed()
    sources = []
    for name in inputs:
        if name not in backward.results or name in backward.zero:  # (no gradient asked: not float)
            sources.append("None")
        elif name in backward.passed:
            sources.append(f'("grad", {outputs.index(backward.passed[name])})')
        else:
            sources.append(f'("result", {computed.index(backward.aliases.get(name, name))})')
    return sources


def _elementwise_backward(spec: Spec) -> dict:
    """The backward of an elementwise op: one kernel computing every input's gradient that is not
    an incoming gradient as it is, from the inputs it reads and the incoming gradients."""
    inputs = [t.name for t in spec.inputs]
    outputs = [t.name for t in spec.outputs]
    floats = spec.float_inputs()  # int and bool inputs carry no gradient
    backward = differentiate(list(spec.body), floats)
    computed = backward.computed()
    saved = [n for n in inputs if n in backward.reads] if computed else []
    seeds = [backward.seeds[o] for o in outputs]
    results = [backward.results[n] for n in computed]
    scalars = [s.name for s in spec.scalars]
    name = backward_op_name(spec.op)
    sources = gradient_sources(backward, inputs, outputs)
    # The gradients' shape and device: the first float output's incoming gradient's (an int or
    # bool output's is of its own dtype, and carries none).
    like_output = next(iter(spec.float_outputs()), outputs[0])
    like = backward.seeds[like_output]
    readers = backward.readers()
    return dict(
        name=name,
        saved=saved,
        kernel_inputs=saved + seeds,
        load_bits=(bits := load_bits(saved + seeds, readers, backward)),
        reads=tuple_source(bits) if bits else None,
        results=results,
        pointer_params=", ".join(f"{n}_ptr" for n in saved + seeds + results),
        math_args=", ".join(saved + seeds + scalars),
        math_lines=backward.lines("triton"),
        # Float values are upcast to the math's precision on load; int and bool ones stay as they are.
        upcast=[n for n in saved if n in floats] + seeds,
        typed_params=", ".join([f"{n}: torch.Tensor" for n in saved + seeds] + scalar_params(spec) + NEEDED_PARAM),
        call_args=", ".join(saved + seeds + scalars),
        return_type="tuple[" + ", ".join("torch.Tensor" for _ in results) + "]",
        like=like,
        gradient_dtypes=[gradient_dtype(spec, like_output, like, n, saved) for n in computed],
        **needed_gradients(inputs, backward),
        in_torch=torch_gradients(spec, backward, saved + seeds, results),
        gradients=gradients_formula(f"_{name}" if computed else None, inputs, saved, sources, len(outputs), whole=True,
                                    records=output_records(spec), selective=True,
                                    read_by={n: readers[n] for n in saved if set(readers[n]) != set(floats)},
                                    differentiable=f"_{name}_in_torch"),
    )


def load_bits(kernel_inputs: list[str], readers: dict, backward: Backward) -> list[int | None] | None:
    """Per input of a backward kernel, the STORES bits of the gradients that read it, where not
    every gradient does (None): the kernel loads it only where one of those is stored, so a call
    may pass a shape-only stand-in for it (Gradients read_by keeps no more for it). None where
    every gradient reads every input."""
    computed = backward.computed()
    bits = []
    for name in kernel_inputs:
        read = {computed.index(backward.aliases.get(n, n)) for n in readers.get(name, ())}
        bits.append(None if len(read) == len(computed) else sum(store_bit(i) for i in sorted(read)))
    return None if all(b is None for b in bits) else bits


def gradient_dtype(spec: Spec, like_output: str, like: str, name: str, saved: list[str]) -> str:
    """The dtype a backward makes input `name`'s gradient in: that of `like` (the incoming
    gradient of output `like_output`), or, where the backward reads `name` and its dtype may
    differ, the wider of the two: a gradient is then never rounded to a narrower dtype than its
    input's on the way (a half x times a float32 w: w's is made in float32, as PyTorch's autograd
    makes it); autograd casts each to its input's dtype."""
    tensors = {t.name: t for t in spec.inputs + spec.outputs}
    if name not in saved or tensors[name].dtype_source == tensors[like_output].dtype_source:
        return f"{like}.dtype"
    return f"torch.promote_types({like}.dtype, {name}.dtype)"


def elementwise_context(spec: Spec, header: str) -> dict:
    tile = spec.tiles[0]
    policy = spec.mask(tile.axis)
    exact = policy == "never"
    inputs = [t.name for t in spec.inputs]
    outputs = [t.name for t in spec.outputs]
    ctx = common_context(spec, header)
    blocks = fixed_or(spec, tile.block, tile.sizes)
    warps = fixed_or(spec, "num_warps", spec.configs.num_warps)
    outs, prelude, result = output_context(spec)
    checks = input_checks(spec, {})
    declared = [t for t in spec.inputs if t.shape is not None]
    if declared:
        # Shapes the spec declares: ranks, and one size per named axis, checked before broadcasting.
        entries = ", ".join(f'("{t.public}", {t.name}, {tuple(t.shape)!r})' for t in declared)
        checks.append(f'rt.check_axes("{spec.op}", [{entries}])')
    # The call as made, for the compiled call path to learn (also where the inputs are expanded
    # below: it reads the views' pointers from the arguments, their strides from the signature).
    checks.append(f"_call = ({', '.join(inputs + [s.name for s in spec.scalars])},) if out is None else None")
    if len(inputs) > 1:
        # Inputs broadcast as in PyTorch, read through stride-0 views (nothing is materialized).
        checks.append(f'_broadcast = rt.broadcast_shape("{spec.op}", [{_named_pairs(spec.inputs)}])')
        checks.append("if _broadcast is not None:")
        checks.append(f"    {', '.join(inputs)} = {', '.join(f'{name}.expand(_broadcast)' for name in inputs)}")
    if exact:
        checks.append(f'rt.check_divisible("{spec.op}", "{tile.axis}", {inputs[0]}.numel(), '
                      f'{min(blocks)}, "{tile.block}")')
    scalars = [s.name for s in spec.scalars]
    math_lines = assignments(list(spec.body), "triton", kinds=spec.number_kinds())
    ctx.update(
        block=tile.block,
        mask=policy,
        space=f"rt.ElementwiseSpace({tile.block!r}, {blocks}, {warps}, exact={exact})",
        input_names=inputs,
        # Float inputs are upcast to the math's precision on load; int and bool ones stay as they are.
        upcast=spec.float_inputs(),
        output_names=outputs,
        tensor_names=inputs + outputs,
        pointer_params=", ".join(f"{n}_ptr" for n in inputs + outputs),
        math_params=", ".join(inputs + scalars),
        math_args=", ".join(inputs + scalars),
        math_lines=math_lines,
        outputs=outs,
        checks=checks + prelude,
        first_input=inputs[0],
        result=result,
        compute_floor=spec.compute or "float32",
        backward=_elementwise_backward(spec),
    )
    return ctx


_PLACEHOLDERS = {"float": "0.0", "int": "0", "bool": "False"}


def epilogue_backward(spec: Spec):
    """The derivative of a matmul's epilogue at the accumulator and the epilogue inputs. Where it
    needs only the epilogue's result (relu's, as PyTorch's reads it), it reads the op's output:
    no accumulator is kept or recomputed."""
    extras = [t.name for t in spec.matmul_parts().extras]
    return differentiate(list(spec.body), ["acc", *extras], outputs_instead_of=("acc",))


def keeps_exact_accumulator(backward) -> bool:
    """Whether the backward reads the accumulator in float32 (kept so by a training call, or
    recomputed so): where a decision reads it beyond its sign (`where(acc + bias > t, ...)`), as
    the forward's epilogue had it. Rounded to the operands' dtype, an element near the threshold
    would route its gradient the other way."""
    return "acc" in backward.reads and "acc" in backward.decided


def _without_backward_op(gradients: str, placeholders: str, no_gradient: str = "") -> dict:
    """The backward context of a matmul that renders no backward op: `gradients` its autograd
    formula (or "None"), `no_gradient` why calls that record autograd are refused ("": they are not)."""
    return dict(no_gradient=no_gradient, reads_acc=False, exact_acc=False, training_name="", results=[],
                kernel_results=[], gradients=gradients, placeholders=placeholders)


def _in_torch_gradient(name: str, a: str, b: str, flows: bool, extras: dict, backward: Backward, value,
                      inputs: list[str], matrix: tuple[str, str]) -> str | None:
    """Input `name`'s gradient in a matmul's differentiable backward (torch_gradients: PyTorch's
    ops, the epilogue's in float32, each product in the operands' dtype and only where `_needed`),
    from `value` (the gradient's [M, N] term); None where the backward op returns none for it (an
    incoming gradient as it is, none)."""
    needed = f"_needed[{inputs.index(name)}]"
    if name == a and flows:
        return f"({value('acc')}.to({b}.dtype) @ {b}.mT if {needed} else None)"
    if name == b and flows:
        return f"({a}.mT @ {value('acc')}.to({a}.dtype) if {needed} else None)"
    if name not in extras or name in backward.zero or (name in backward.passed and extras[name] == matrix):
        return None
    if extras[name] == matrix:
        return value(name)
    return f"{value(name)}.sum({-2 if extras[name] == (matrix[1],) else -1})"  # over M for [N], N for [M]


def _matmul_backward(spec: Spec) -> dict:
    """The backward of C = epilogue(acc, extras), acc = A @ B: the gradient at the accumulator
    (dZ) and the extras' gradients in one elementwise pass over [M, N], then dA = dZ @ B^T and
    dB = A^T @ dZ with the op's own kernel, and sums over M (or N) for [N] (or [M]) extras."""
    parts = spec.matmul_parts()
    a, b, m, n, k = parts.a.name, parts.b.name, parts.m, parts.n, parts.k
    placeholders = tuple_source(_PLACEHOLDERS[sc.type] for sc in spec.scalars)
    if spec.no_gradient():
        return _without_backward_op("None", placeholders, spec.no_gradient())
    inputs = [t.name for t in spec.inputs]
    outputs = [t.name for t in spec.outputs]
    extras = {t.name: parts.matrix(t) for t in parts.extras}
    batched = parts.is_batched
    backward = epilogue_backward(spec)
    computed = backward.computed()
    reads_acc = "acc" in backward.reads
    exact_acc = keeps_exact_accumulator(backward)
    outputs_read = [o for o in (t.name for t in spec.outputs) if o in backward.reads]
    flows = "acc" not in backward.zero  # the operands get gradients
    seeds = [backward.seeds[o] for o in outputs]

    def value(name):  # the [M, N] tensor holding `name`'s gradient in the backward op
        if name in backward.passed:
            return backward.seeds[backward.passed[name]]
        return backward.results[backward.aliases.get(name, name)]

    # The gradient at the accumulator is multiplied by the operands: it takes their dtype where an
    # output's may differ from it (as autograd of (a @ b).float() casts its gradient back): made
    # so by the elementwise pass (whose gradients are made like the first output's), or cast where
    # it is an output's incoming gradient as it is.
    dtype_of = {t.name: t.dtype_source for t in spec.outputs}  # (the input each output's dtype follows)
    own = dtype_of[outputs[0]] != parts.a.dtype_source
    passed = backward.passed.get("acc")
    dz = value("acc") + (f".to({a}.dtype)" if passed and dtype_of[passed] != parts.a.dtype_source else "")

    saved = [x for x in inputs if (x in (a, b) and flows) or (x in extras and x in backward.reads)]
    # Unless the accumulator is recomputed, A's values are read for B's gradient (A^T @ dZ) alone
    # and B's for A's: a call whose other operand needs no gradient keeps only the shape (eager
    # PyTorch's mm keeps no `self` for a frozen `mat2`: an activation into a frozen weight).
    operands_read_by = {a: [b], b: [a]}
    # The elementwise pass reads the accumulator, the extras it needs (broadcast to [M, N] views)
    # and the incoming gradients, and writes the [M, N] gradients ([N] and [M] ones in float32,
    # summed after).
    kernel_inputs = (["acc"] if reads_acc else []) + outputs_read + [x for x in extras if x in backward.reads] + seeds
    # Gradients are made in the dtype of the first incoming gradient (the output's); autograd
    # casts each to its input's dtype where that differs. Sums of [N] and [M] ones run in float32.
    like = seeds[0]
    # Gradients at the output have its shape ([..., M, N] where batched); autograd (rt.Gradients)
    # sums each over the axes its input was broadcast along.
    shape = f"{like}.shape" if batched else f"({m}, {n})"
    allocations = []
    # The compiled call path tells calls apart by their arguments: where a gradient takes A's
    # dtype, which none of the pass's tensors has, A is one of them (a repeat call of fp32
    # outputs from fp16 operands would take a learned fp32 operands' call's gradient dtype).
    keyed = []
    for name in computed:
        full = name == "acc" or (extras[name] == (m, n) and (not batched or name in parts.batched))
        dtype = f"{a}.dtype" if name == "acc" and flows and own else f"{like}.dtype" if full else "torch.float32"
        keyed += [a] if dtype == f"{a}.dtype" else []
        allocations.append(f"{backward.results[name]} = torch.empty({shape}, dtype={dtype}, device={like}.device)")
    # Every epilogue input the pass reads, as an [M, N] view: the op's argument as given (it may be
    # any shape that broadcasts to its declared axes: a 0-d scale for [M], [N] for [M, N]).
    expansions = [f"{x} = {x}.view(-1, 1).expand({shape})" if extras[x] == (m,) else f"{x} = {x}.expand({shape})"
                  for x in kernel_inputs if x in extras]
    results, sources = [], []
    in_torch_results = []  # the same gradients in PyTorch's ops (torch_gradients), None where not needed
    # Sums over broadcast axes run before the products: a column sum's reduction workspace (up
    # to an [M, N] float32 block in PyTorch's) then comes and goes before dA and dB are allocated,
    # as in eager PyTorch's order.
    sums = []
    # A gradient no input needs is not computed (the first layer's input, a frozen weight: eager
    # PyTorch's mm backward skips those products too); an empty tensor holds its place.
    def if_needed(name, expression):
        return f"{expression} if _needed[{inputs.index(name)}] else {dz}.new_empty(0)"

    for name in inputs:
        if name in extras and name in backward.passed and extras[name] == (m, n):
            # The incoming gradient itself (returned by the autograd formula: an op's result may
            # not alias its input).
            sources.append(f'("grad", {outputs.index(backward.passed[name])})')
            continue
        in_torch_results.append(_in_torch_gradient(name, a, b, flows, extras, backward, value, inputs, (m, n)))
        if name == a and flows and batched:  # summed over the batch axes a broadcast along
            results.append(if_needed(a, f"_OP.gradient({dz}, {b}.mT, {a}.shape)"))
        elif name == b and flows and batched:
            results.append(if_needed(b, f"_OP.gradient({a}.mT, {dz}, {b}.shape)"))
        elif name == a and flows:
            results.append(if_needed(a, f"_OP.product({dz}, {b}.t())"))
        elif name == b and flows:
            results.append(if_needed(b, f"_OP.product({a}.t(), {dz})"))
        elif name in extras and name not in backward.zero:
            if extras[name] == (m, n):
                # A gradient shared with another name is copied: an op's results may not alias.
                results.append(if_needed(name, value(name) + ".clone()") if name in backward.aliases else value(name))
            else:
                # In the terms' dtype (float32 where the pass made them so), as a reduction's column
                # sums are: autograd sums it further where the argument was smaller than its axes
                # (a 0-d scale for [M]; a batch), then casts it to the argument's dtype once.
                axis = -2 if extras[name] == (n,) else -1
                sums.append(f"_{name}_summed = " + if_needed(name, f"{value(name)}.sum({axis})"))
                results.append(f"_{name}_summed")
        else:
            sources.append("None")
            continue
        sources.append(f'("result", {len(results) - 1})')
    if not results:
        # No input's gradient needs a backward op (an epilogue that is a threshold's flag gives the
        # accumulator none): autograd's formula passes incoming gradients on, or gives none.
        return _without_backward_op(gradients_formula(None, inputs, [], sources, len(outputs), records=output_records(spec)),
                                    placeholders)
    name = backward_op_name(spec.op)
    scalars = [sc.name for sc in spec.scalars]
    kernel_results = [backward.results[x] for x in computed]
    # The accumulator with its history (the kept one has none), then the same math.
    recompute = (f'acc = rt.autograd.accumulator_with_history("{spec.op}", acc, {a}, {b}, _needed[{inputs.index(a)}], '
                 f'_needed[{inputs.index(b)}], "{parts.a.public}", "{parts.b.public}")')
    in_torch = torch_gradients(spec, backward, saved + ["acc"] + outputs_read + seeds,
                               [r for r in in_torch_results if r is not None],
                               rows=tuple(x for x in saved if extras.get(x) == (m,)),
                               prelude=(recompute,) if reads_acc else (), as_given=(a, b))
    read = [outputs.index(o) for o in outputs_read]  # the outputs the backward reads, saved
    # The elementwise pass's parameters; the backward op's add `_needed`: per tensor input of the
    # op, whether it needs its gradient (ctx.needs_input_grad).
    dz_params = ", ".join([f"{x}: torch.Tensor" for x in saved] + ["acc: torch.Tensor | None"]
                          + [f"{x}: torch.Tensor" for x in outputs_read + seeds] + scalar_params(spec))
    return dict(
        name=name,
        reads_acc=reads_acc,
        exact_acc=exact_acc,
        training_name=training_op_name(spec.op) if reads_acc else "",
        kernel_inputs=kernel_inputs,
        kernel_results=kernel_results,
        pointer_params=", ".join(f"{x}_ptr" for x in kernel_inputs + kernel_results),
        math_args=", ".join(kernel_inputs + scalars),
        call_args=", ".join(kernel_inputs + keyed + scalars),
        math_lines=backward.lines("triton"),
        dz_params=dz_params,
        typed_params=", ".join([dz_params, *NEEDED_PARAM]),
        sizes=f"{m}, {k} = {a}.shape[-2:]\n    {n} = {b}.shape[-1]" if batched else f"{m}, {k} = {a}.shape\n    {n} = {b}.shape[1]",
        allocations=allocations,
        expansions=expansions,
        sums=sums,
        results=results,
        return_type="tuple[" + ", ".join("torch.Tensor" for _ in results) + "]",
        in_torch=in_torch,
        # The op itself recomputes the accumulator where the backward reads it; its training
        # variant (the one eager calls that record autograd take) keeps it instead.
        gradients=gradients_formula(f"_{name}", inputs, saved, sources, len(outputs), (None, *read),
                                    records=output_records(spec), selective=True,
                                    read_by=None if reads_acc else operands_read_by,
                                    differentiable=f"_{name}_in_torch"),
        # Its eager backward runs in two calls, the kept accumulator freed between them.
        training_gradients=gradients_formula(f"_{name}", inputs, saved, sources, len(outputs), (len(outputs), *read),
                                             f"(_{name}_dz, _{name}_products)", records=output_records(spec),
                                             selective=True, read_by=operands_read_by, named=spec.op,
                                             differentiable=f"_{name}_in_torch"),
        rest_params=", ".join([f"{x}: torch.Tensor" for x in saved + seeds] + scalar_params(spec)),
        rest_args=", ".join(saved + seeds + scalars),
        all_args=", ".join(saved + ["acc"] + outputs_read + seeds + scalars),
        placeholders=placeholders,
        no_gradient="",
        # Its FLOP count for torch.utils.flop_counter (runtime/flops.py).
        flops=f"rt.flops.backward_flops({len(saved)}, recomputes={reads_acc}, products={flows})",
    )


def _tile_widening(spec: Spec, bm: str, bn: str) -> list[str]:
    """Lines giving each epilogue output that reads neither the accumulator nor an [M, N] input
    the tile's shape (`e: bias * 2` is a [1, BN] row; every output reads some tensor, validate
    says). A pointer store broadcasts it; a tensor descriptor's store takes its block's shape only."""
    parts = spec.matmul_parts()
    full = {"acc"} | {t.name for t in parts.extras if parts.matrix(t) == (parts.m, parts.n)}
    return [f"{name} = tl.broadcast_to({name}, ({bm}, {bn}))" for name, expression in spec.body
            if not set(expression.names) & full]


def matmul_context(spec: Spec, header: str) -> dict:
    parts = spec.matmul_parts()
    a, b, m, n, k, extras = parts.a, parts.b, parts.m, parts.n, parts.k, list(parts.extras)
    ctx = common_context(spec, header)
    batched = parts.is_batched
    # A tensor with batch axes has at least its matrix dims; an operand without, exactly them; an
    # epilogue input without, at most them (it broadcasts to them, below).
    plain_extras = [t for t in extras if t.name not in parts.batched]
    ndims = {t.name: len(parts.matrix(t)) for t in (a, b) if t.name not in parts.batched}
    min_ndims = {t.name: len(parts.matrix(t)) for t in spec.inputs if t.name in parts.batched}
    max_ndims = {t.name: len(parts.matrix(t)) for t in plain_extras}
    checks = input_checks(spec, ndims, min_ndims, max_ndims)
    for operand in (a, b):  # the interpreter's bfloat16 dot is wrong: refuse it
        checks.append(f'rt.check_interpretable("{spec.op}", "{operand.public}", {operand.name}, matmul=True)')

    def dim(tensor, index):  # a matrix axis's dim, counted from the end where batch axes may lead
        return index - len(parts.matrix(tensor)) if tensor.name in parts.batched else index

    size_source = {m: f"{a.name}.shape[{dim(a, 0)}]", n: f"{b.name}.shape[{dim(b, 1)}]",
                   k: f"{a.name}.shape[{dim(a, 1)}]"}
    checks.append(f'rt.check_dim("{spec.op}", "{b.public}", {b.name}, {dim(b, 0)}, {size_source[k]}, "{k}")')
    for extra in extras:
        axes = parts.matrix(extra)
        if extra in plain_extras:
            # (A view of its own name: the call path learns the call from the arguments as given.)
            checks.append(f'{extra.name}_view = {epilogue_view(spec.op, extra.public, extra.name, axes, size_source)}')
            continue
        for index, axis in enumerate(axes):
            checks.append(f'rt.check_dim("{spec.op}", "{extra.public}", {extra.name}, {dim(extra, index)}, '
                          f'{size_source[axis]}, "{axis}")')
    if batched:
        after = [f"{m}, {k} = {a.name}.shape[-2:]", f"{n} = {b.name}.shape[-1]"]
        named = [t for t in spec.inputs if t.name in parts.batched]
        after.append(f'_batch = rt.batch_shape("{spec.op}", ({_named_pairs(named)},), '
                     f'{tuple_source(len(parts.matrix(t)) for t in named)})')
    else:
        after = [f"{m}, {k} = {a.name}.shape", f"{n} = {b.name}.shape[1]"]
    tiles = {t.axis: t for t in spec.tiles}
    bm, bn, bk = tiles[m], tiles[n], tiles[k]
    policies = [spec.mask(m), spec.mask(n), spec.mask(k)]
    for axis, tile, policy in zip((m, n, k), (bm, bn, bk), policies):
        if policy == "never":
            after.append(f'rt.check_divisible("{spec.op}", "{axis}", {axis}, {min(tile.sizes)}, "{tile.block}")')
    outs, prelude, result = output_context(spec)
    tensor_names = [t.name for t in spec.inputs] + [t.name for t in spec.outputs]
    stride_names = [f"stride_{t.name}_{d}" for t in list(spec.inputs) + list(spec.outputs)
                    for d in range(len(parts.matrix(t)))]
    batched_tensors = [name for name in tensor_names if name in parts.batched]
    # Sizes and strides arrive as a quotient and a power-of-two constexpr factor (see the kernel).
    factored_names = ["M", "N", "K", *stride_names]
    acc_dtype = DTYPES[spec.accumulate].triton
    def space(exact, forward=True):
        return (
            f"rt.MatmulSpace(({bm.block!r}, {bn.block!r}, {bk.block!r}), "
            f"{fixed_or(spec, bm.block, bm.sizes)}, {fixed_or(spec, bn.block, bn.sizes)}, "
            f"{fixed_or(spec, bk.block, bk.sizes)}, {fixed_or(spec, 'num_warps', spec.configs.num_warps)}, "
            f"{fixed_or(spec, 'num_stages', spec.configs.num_stages)}, "
            f"exact=({', '.join(str(e) for e in exact)}), splits={spec.split_k}, launch={spec.launch!r}"
            f"{', ieee_float32=True' if forward and spec.precision == 'ieee' and 'float32' in parts.a.dtypes else ''})"
        )
    ctx.update(
        a=a.name, b=b.name, m=m, n=n, k=k,
        bm=bm.block, bn=bn.block, bk=bk.block,
        a_stride_m=f"stride_{a.name}_0", a_stride_k=f"stride_{a.name}_1",
        b_stride_k=f"stride_{b.name}_0", b_stride_n=f"stride_{b.name}_1",
        pointer_params=", ".join(f"{name}_ptr" for name in tensor_names),
        stride_params=", ".join(stride_names),
        a_index=tensor_names.index(a.name), b_index=tensor_names.index(b.name),
        factored_names=factored_names,
        # The epilogue's math runs on the float32 accumulator.
        tile_scalar_casts=scalar_casts(spec.scalars, "tl.float32", rank=2),
        factor_params=", ".join(f"{name.upper()}_FACTOR: tl.constexpr" for name in factored_names),
        factor_names=", ".join(f'"{name.upper()}_FACTOR"' for name in factored_names),
        tile_args=_wrapped_args(["partial_ptr", "count_ptr", "saved_ptr", *(f"{name}_ptr" for name in tensor_names),
                             *(s.name for s in spec.scalars),
                             *(["BATCHES", *(f"stride_{name}_batch" for name in batched_tensors)] if batched else []),
                             "M", "N", "K", *stride_names,
                             *(f"{name.upper()}_FACTOR" for name in factored_names),
                             bm.block, bn.block, bk.block, "GROUP_M", "SPLIT_K", "MASK_M", "MASK_N", "MASK_K",
                             "PEEL_K", "USE_TMA", "USE_TMA_STORE", "TRANS_A", "TRANS_B", "INDEX_64", "EPILOGUE",
                             "SAVE_ACC",
                             *(["BATCHED"] if batched else [])]),
        batched=batched,
        batched_tensors=batched_tensors,
        batch_stride_params=", ".join(f"stride_{name}_batch" for name in batched_tensors),
        batched_indices=tuple_source(tensor_names.index(name) for name in batched_tensors),
        along_rows=tuple_source(str(parts.matrix(t)[:1] == (m,)) for t in list(spec.inputs) + list(spec.outputs)),
        out_shape=f"(*_batch, {m}, {n})" if batched else f"({m}, {n})",
        acc_dtype=acc_dtype,
        dot_options=_dot_options(spec, spec.tile(k).block),
        extras=[_extra_load(t, m, n) for t in extras],
        epilogue_lines=assignments(list(spec.body), "triton") + _tile_widening(spec, bm.block, bn.block),
        outputs=outs,
        checks=checks + after + prelude,
        result=result,
        tensor_names=tensor_names,
        # What the launch reads: epilogue inputs as views of their declared axes.
        launch_names=[f"{name}_view" if any(name == x.name for x in plain_extras) else name for name in tensor_names],
        space=space([p == "never" for p in policies]),
        # The backward's products permute M, N and K: every axis may need a mask.
        # (The gradient's products, through transposed operands, kept the large tiles faster:
        # an H100's float32 training step, bench/results/h100/float32_matmul.)
        product_space=space([False] * 3, forward=False),
        group_m=spec.group_m,
        launch=spec.launch,
        mask_policies=repr(tuple(policies)),
        output_index=len(spec.inputs),
        ranks=tuple_source(len(parts.matrix(t)) for t in list(spec.inputs) + list(spec.outputs)),
        backward=_matmul_backward(spec),
        autocast=_autocast(spec, a, b),
    )
    return ctx


def _autocast(spec: Spec, a: TensorSpec, b: TensorSpec) -> dict | None:
    """What the wrapper casts inside a torch.autocast region (runtime/amp.py): each input's dtypes
    and the operands' places. None where the operands take no half-precision dtype (a float8
    product), which no region's dtype would change."""
    if not all({"float16", "bfloat16"} & set(t.dtypes) for t in (a, b)):
        return None
    return dict(names=", ".join(t.public for t in spec.inputs),
                dtypes=tuple_source(_dtype_constant(t.dtype_source) for t in spec.inputs),
                operands=tuple_source(spec.inputs.index(t) for t in (a, b)))


def _wrapped_args(names: list[str]) -> str:
    """Call arguments as lines of at most 92 characters (the template indents the lines after the first)."""
    return "\n".join(textwrap.wrap(", ".join(names), width=92, break_long_words=False, break_on_hyphens=False))


def epilogue_view(op: str, public: str, name: str, axes: tuple[str, ...], size_source: dict[str, str]) -> str:
    """The call that makes an epilogue input without batch axes a view of its declared axes (any
    tensor that broadcasts to them: a 0-d per-tensor scale for [M], say)."""
    sizes = tuple_source(size_source[axis] for axis in axes)
    names = tuple_source(f'"{axis}"' for axis in axes)
    return f'rt.epilogue_view("{op}", "{public}", {name}, {sizes}, {names})'


def _dot_options(spec: Spec, bk: str) -> str:
    # Triton's default for float32 dots is tf32; PyTorch's is full precision. Follow the spec.
    if not spec.fp8_operands():
        return f', input_precision="{spec.precision}"'
    # fp8: Triton's default on Hopper lets the tensor cores accumulate the whole K loop in their
    # reduced precision (torch._scaled_mm's use_fast_accum=True). Unless the spec asks for that,
    # each K step's products start from zero and are added into the float32 accumulator, as
    # _scaled_mm's default does. (Ignored on GPUs whose fp8 dots accumulate in float32.)
    return "" if spec.precision == "fast_accum" else f", max_num_imprecise_acc={bk}"


def _extra_load(tensor: TensorSpec, m: str, n: str) -> dict:
    name, shape = tensor.name, fixed_axes(tensor.shape)
    if shape == (m, n):
        pointer = f"{name}_ptr + offs_m[:, None] * stride_{name}_0 + offs_n[None, :] * stride_{name}_1"
        return dict(name=name, pointer=pointer, mask="mask", broadcast="")
    if shape == (n,):
        return dict(name=name, pointer=f"{name}_ptr + offs_n * stride_{name}_0",
                    mask="offs_n < N if MASK_N else None", broadcast="[None, :]")
    return dict(name=name, pointer=f"{name}_ptr + offs_m * stride_{name}_0",
                mask="offs_m < M if MASK_M else None", broadcast="[:, None]")
