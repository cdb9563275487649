"""What the matmul template needs from a `Spec`: its tiles, batch axes and epilogue loads, the
wrapper's checks, and the backward (the gradient through the epilogue, then tilegen's own
matmuls for the operands' gradients)."""

from __future__ import annotations

import textwrap

from .dtypes import DTYPES
from .derivatives import Backward, differentiate
from .expressions import assignments
from .lowering import (NEEDED_PARAM, common_context, dtype_constant, fixed_or, gradients_formula, input_checks,
                       output_context, output_records, scalar_casts, scalar_params,
                       summed_gradient_dtype, tuple_source)
from .naming import backward_op_name, training_op_name
from .spec import Spec, TensorSpec, fixed_axes
from .torch_gradients import torch_gradients


_PLACEHOLDERS = {"float": "0.0", "int": "0", "bool": "False"}


def epilogue_backward(spec: Spec):
    """The derivative of a matmul's epilogue at the accumulator and the epilogue inputs. Where it
    needs only the epilogue's result (relu's, as PyTorch's reads it), it reads the op's output:
    no accumulator is kept or recomputed."""
    extras = [t.name for t in spec.matmul_parts().extras]
    return differentiate(list(spec.body), ["acc", *extras], outputs_instead_of=("acc",), kinds=spec.number_kinds())


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

    # The operands are read for their products' gradients, or to compute the accumulator again
    # where the epilogue's gradient reads it and gives it none (`where(acc > 0, r, 0)`: r's gradient).
    operands_read = flows or reads_acc
    saved = [x for x in inputs if (x in (a, b) and operands_read) or (x in extras and x in backward.reads)]
    # Unless the accumulator is recomputed, A's values are read for B's gradient (A^T @ dZ) alone
    # and B's for A's: a call whose other operand needs no gradient keeps only the shape (eager
    # PyTorch's mm keeps no `self` for a frozen `mat2`: an activation into a frozen weight). Where
    # the products get no gradient, none reads them: the kept accumulator is all the backward needs.
    operands_read_by = {a: [b], b: [a]} if flows else {a: [], b: []}
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
        if full and name != "acc":  # (an [M, N] input that may come smaller: its expanded view's)
            dtype = summed_gradient_dtype(spec, backward, name, dtype, outputs[0], saved, shape)
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
        return f"{expression} if _needed[{inputs.index(name)}] else {dz if flows else like}.new_empty(0)"

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
    # The accumulator with its history (the kept one has none), then the same math; where the
    # epilogue gives it no gradient, it needs none (its training variant keeps no operand's values).
    recompute = (f'acc = rt.autograd.accumulator_with_history("{spec.op}", acc, {a}, {b}, _needed[{inputs.index(a)}], '
                 f'_needed[{inputs.index(b)}], "{parts.a.public}", "{parts.b.public}")' if flows
                 else f"acc = rt.autograd.accumulator_without_history(acc, {a}, {b})")
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
        # (an epilogue that gives the operands no gradient keeps them only to compute the
        # accumulator again, or not at all: its incoming gradients have the output's shape)
        sizes=(f"{m}, {n} = {like}.shape[-2:]" if not operands_read
               else f"{m}, {k} = {a}.shape[-2:]\n    {n} = {b}.shape[-1]" if batched
               else f"{m}, {k} = {a}.shape\n    {n} = {b}.shape[1]"),
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
    # An operand with batch axes has at least its matrix dims, one without exactly them; an epilogue
    # input without batch axes has at most them, and any epilogue input broadcasts to its axes (below).
    plain_extras = [t for t in extras if t.name not in parts.batched]
    ndims = {t.name: len(parts.matrix(t)) for t in (a, b) if t.name not in parts.batched}
    min_ndims = {t.name: len(parts.matrix(t)) for t in (a, b) if t.name in parts.batched}
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
        # (A view of its own name: the call path learns the call from the arguments as given.)
        checks.append(f'{extra.name}_view = '
                      f'{epilogue_view(spec.op, extra, parts.matrix(extra), size_source, extra.name in parts.batched)}')
    if batched:
        after = [f"{m}, {k} = {a.name}.shape[-2:]", f"{n} = {b.name}.shape[-1]"]
        named = [t for t in spec.inputs if t.name in parts.batched]
        viewed = ", ".join(f'("{t.public}", {t.name}_view)' if t in extras else f'("{t.public}", {t.name})' for t in named)
        after.append(f'_batch = rt.batch_shape("{spec.op}", ({viewed},), '
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
        launch_names=[f"{name}_view" if any(name == x.name for x in extras) else name for name in tensor_names],
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
                dtypes=tuple_source(dtype_constant(t.dtype_source) for t in spec.inputs),
                operands=tuple_source(spec.inputs.index(t) for t in (a, b)))


def _wrapped_args(names: list[str]) -> str:
    """Call arguments as lines of at most 92 characters (the template indents the lines after the first)."""
    return "\n".join(textwrap.wrap(", ".join(names), width=92, break_long_words=False, break_on_hyphens=False))


def epilogue_view(op: str, extra: TensorSpec, axes: tuple[str, ...], size_source: dict[str, str],
                  batched: bool) -> str:
    """The call that makes an epilogue input a view of its declared axes `axes` (any tensor that
    broadcasts to them: a 0-d per-tensor scale for [M], [B, 1, N] for [..., M, N]), its batch axes,
    where it has them, kept for rt.batch_shape."""
    sizes = tuple_source(size_source[axis] for axis in axes)
    names = tuple_source(f'"{axis}"' for axis in axes)
    return (f'rt.epilogue_view("{op}", "{extra.public}", {extra.name}, {sizes}, {names}'
            f'{", batched=True" if batched else ""})')


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
