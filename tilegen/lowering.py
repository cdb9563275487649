"""What every kind's template needs from a `Spec`: names, signatures, checks, configs, and the
shape of its gradients' formula. Each kind's own lowering (elementwise_lowering, matmul_lowering,
reduction_lowering) builds on it.

Templates only place these strings; every decision about the generated code is made here,
in Python, where it can be read and tested.
"""

from __future__ import annotations

from .categories import FLOAT, category_of
from .dtypes import DTYPES
from .escaping import docstring_text
from .decisions import decides_on_fused_math
from .derivatives import Backward, recorded_from
from .spec import Spec
from .schema import RUNTIME_VERSION, store_bit
from .tables import backward_table_name, load_table, render_table, table_for_spec


def dtype_constant(source: str) -> str:
    return f"_{source.upper()}_DTYPES"


def _dtype_groups(spec: Spec) -> list[dict]:
    groups = {}
    for tensor in spec.inputs + spec.outputs:
        if tensor.dtype_source not in groups and tensor.dtype_source == tensor.name and tensor in spec.inputs:
            groups[tensor.name] = dict(
                constant=dtype_constant(tensor.name),
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
        lines.append(f'rt.check_tensor({op}, "{tensor.public}", {tensor.name}, {dtype_constant(source)}{suffix})')
        if source != tensor.name:
            lines.append(f'rt.check_same_dtype({op}, "{tensor.public}", {tensor.name}, '
                         f'"{spec.input(source).public}", {source})')
    pairs = named_pairs(spec.inputs)
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


def named_pairs(tensors) -> str:
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
        input_pairs=f"[{named_pairs(spec.inputs)}]",
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


def int_results(spec: Spec) -> list[str]:
    """The outputs of float dtypes whose values are ints or bools (`y: a + 1` with an int a into
    `y: {dtype: x}`, a reduction's `y: keep * big`): kernels store them through
    tilegen.runtime.kernel_math's int_as_float_output, which converts them as PyTorch does."""
    kinds = spec.number_kinds()
    body = dict(spec.body)
    return [name for name in spec.float_outputs() if category_of(body[name].tree.body, kinds) != FLOAT]


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


def summed_gradient_dtype(spec: Spec, backward, name: str, made: str, like_output: str, taken: list[str],
                          shape: str) -> str:
    """The dtype its buffer of `shape` (an expression) is made in for input `name`'s gradient:
    `made` (gradient_dtype), or, where the tensors its terms read may be wider than the incoming
    gradient, rt.summed_gradient_dtype's choice at the call. `taken`: the tensors the backward op
    takes, whose shapes and dtypes it has (as given, or expanded to `shape`: either tells a
    broadcast one).

    A gradient is summed over the axes its input was broadcast along after the backward returns
    it: where its terms read a wider dtype than the incoming gradient's (a float16 row b over a
    float32 column g in (b / g) ** 3, its output float16), PyTorch's autograd computes them in
    that wider dtype and casts the sum. Made in the incoming gradient's, the terms overflow
    float16 one by one (inf - inf: NaN) where their sum is finite. Such a gradient of an input
    broadcast in the call is made in the widest of those dtypes; one of the call's full shape stays
    in the narrower dtype, which its values fit as they will once cast."""
    roots = {t.name: t.dtype_source for t in spec.inputs + spec.outputs}
    floats = set(spec.float_inputs()) | set(spec.float_outputs())
    readers = backward.readers()
    # (the inputs this gradient is of whose shapes the backward has: an input no gradient reads is
    # not taken, and its gradient then reads no float tensor, whose terms are the incoming
    # gradient's dtype in PyTorch too)
    sharing = [n for n in (name, *(a for a, of in backward.aliases.items() if of == name)) if n in taken]
    read = [n for n in taken if n in floats and name in readers.get(n, ())]
    if not sharing or len({roots[n] for n in read} | {roots[like_output]}) == 1:
        return made
    return f"rt.summed_gradient_dtype({made}, {shape}, {tuple_source(sharing)}, {tuple_source(read)})"
