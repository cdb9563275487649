"""What the reduction template needs from a `Spec`: its row program, the kernel's loads and
stores, the wrapper's checks, and the backward derived from its math (itself a row program)."""

from __future__ import annotations

import ast
import functools

from .derivatives import differentiate, normal_form
from .expressions import expression_of
from .naming import backward_op_name
from .lowering import (NEEDED_PARAM, common_context, fixed_or, gradient_dtype, gradient_sources, gradients_formula,
                       input_checks, int_results, kernel_scalar_params, needed_gradients, output_context,
                       output_records, scalar_casts, scalar_params, summed_gradient_dtype, tuple_source)
from .schema import store_bit
from .rows import ELEMENT, ROW, KeptValues, RowProgram, first_row_lines, output_pass, read_back, stage_pass, whole_row_lines
from .spec import ScalarSpec, Spec
from .torch_gradients import torch_gradients

# The tensor roles along the rows (Spec.row_roles) and how a kernel addresses each.
_ADDRESS = {
    "element": "{n}_ptr + {rows} * stride_{n}_0 + cols * stride_{n}_1",
    "column": "{n}_ptr + cols * stride_{n}_0",
    "row": "{n}_ptr + {rows} * stride_{n}_0",
    # A backward's gradient of a column input ([N]): each program sums its rows into its own row of
    # a float32 workspace, and the last program to finish adds those rows up in order (below).
    "column_sum": "{n}_ptr + cols * stride_{n}_0",
}


# The block of workspace the column sums' finish adds up at a time: SUM_ROWS programs' rows by
# SUM_COLS columns (16 KB in float32: enough loads in flight that one program's share is not
# bound by the latency of each).
SUM_ROWS, SUM_COLS = 16, 256


def _partial(index: int, program: str = "pid", cols: str = "cols") -> str:
    """The row of the workspace where `program` sums its rows of the `index`-th column sum (rows
    held whole)."""
    return f"workspace_ptr + ({index} * tl.num_programs(0) + {program}) * row_length + {cols}"


def _row_value(index: int) -> str:
    """The workspace row holding the `index`-th row value the column phase reads (long rows)."""
    return f"workspace_ptr + {index} * n_rows + rows"

_MASK = {"element": "mask", "column": "cols < row_length", "row": "row_mask", "column_sum": "cols < row_length"}


def _column_sum(name: str) -> str:
    return f"tl.sum(tl.where(mask, {name}, 0.0), axis=0, keep_dims=True)"


def _address(name: str, role: str, rows: str = "rows") -> str:
    return _ADDRESS[role].format(n=name, rows=rows)


# A looped row's cache hints, where the config asks (EVICT), as TorchInductor gives its loops': a
# pass before the outputs' keeps what it loads in L2 for the next pass (evict_last); the outputs'
# pass reads the row for the last time (evict_first) and a weight every row reads again (evict_last).
_KEEP = 'eviction_policy="evict_last" if EVICT else ""'
_LAST = 'eviction_policy="evict_first" if EVICT else ""'
# A first pass's load of an input that only the outputs' pass reads again: read for the last time
# where that pass loads the outputs back instead (READ_BACK).
_KEEP_UNLESS_READ_BACK = 'eviction_policy=("evict_first" if READ_BACK else "evict_last") if EVICT else ""'


def _load(name: str, role: str, hint: str = "", keep=()) -> str:
    """A tensor's load, in the math's dtype but for the names in `keep` (bool masks: int1 as loaded)."""
    cast = "" if name in keep else ".to(compute)"
    return f"{name} = tl.load({_address(name, role)}, mask={_MASK[role]}{', ' + hint if hint else ''}){cast}"


def _take(name: str, keep=()) -> str:
    """A load issued a step ahead (_load_ahead), taken into the math's dtype (a bool mask as it is)."""
    return f"{name} = _p_{name}" + ("" if name in keep else ".to(compute)")


def _load_ahead(name: str) -> str:
    """The load of an input's next row block (rows `_ahead`), kept in its own dtype until its step
    takes it (row_kernel's prefetch, the column phase's)."""
    return f"_p_{name} = tl.load({_address(name, 'element', '_ahead')}, mask=(_ahead < n_rows) & (cols < row_length))"


def _store(name: str, role: str, int_results=()) -> str:
    """An output's store, cast to its dtype (`int_results`, outputs of bool values: through
    tilegen.runtime.kernel_math's int_as_float_output, as an elementwise op's)."""
    value = (f"int_as_float_output({name}, {name}_ptr)" if name in int_results
             else f"{name}.to({name}_ptr.dtype.element_ty)")
    return f"tl.store({_address(name, role)}, {value}, mask={_MASK[role]})"


def _gated(line: str, bits: int | None) -> str:
    """`line` run only where the kernel stores an output of `bits` (STORES: a backward kernel's
    gradients asked for); as it is where `bits` is None (a kernel that stores every output)."""
    return line if bits is None else f"if STORES & {bits}:\n    {line}"


def _strides(name: str, role: str) -> list[str]:
    return [f"stride_{name}_0", f"stride_{name}_1"] if role == "element" else [f"stride_{name}_0"]


def _read_back(program: RowProgram, along: dict[str, str], elements: list[str], first, final, keep=(),
               int_results=()) -> dict | None:
    """A long row's outputs stored by its `first` pass and loaded back by the outputs' pass
    (rows.read_back), where that pass then loads fewer tensors along the row than `final`; else None."""
    back = read_back(program, elements, first)
    if back is None:
        return None
    streams = [n for n in back.final.loads if n in back.outputs or along[n] == "element"]
    if len(streams) >= len([n for n in final.loads if along[n] == "element"]):
        return None
    loads = [_load(n, "element" if n in back.outputs else along[n], _LAST if n in streams else _KEEP, keep)
             for n in back.final.loads]
    stores = [_store(n, "element", int_results) for n in back.rest]
    return dict(
        outputs=list(back.outputs),
        # The stored outputs the outputs' pass loads: exact where each keeps the math's dtype
        # (the launch checks). Those the first pass only stores early ask nothing of their dtype.
        loaded=[n for n in back.final.loads if n in back.outputs],
        loads_of=list(back.final.loads),
        first=[*back.lines, *(_store(n, "element", int_results) for n in back.outputs)],
        loads=loads,
        lines=list(back.final.body),
        # (every output stored by the first pass: the outputs' pass has nothing left to do)
        stores=stores if loads or back.final.body or stores else ["pass"],
    )


def row_kernel(name: str, program: RowProgram, inputs: dict[str, str], outputs: dict[str, str],
               scalars: list[ScalarSpec], block: str, widened: frozenset[str], reads_back: bool = False,
               masks=(), selective: bool = False, int_results=()) -> dict:
    """The pieces of one reduction kernel: `inputs` and `outputs` map names to roles; `masks` are
    the bool inputs, loaded as they are (int1), never cast to the math's dtype; `widened` are the
    int scalars taken in float64 math (Spec.int_scalars_in_float_math). With `reads_back`,
    a long row's outputs may be stored by its first pass and loaded back by the outputs' pass
    (_read_back), where the launch says that is exact (READ_BACK). A `selective` kernel (a
    backward's) stores only the outputs its STORES asks for, bit i for output i, and sums the
    columns of only those: each store and each column sum's work is gated by its bit.
    `int_results` are the outputs whose values are bools (`y: keep * big`)."""
    keep = frozenset(masks)
    bit = {n: store_bit(i) for i, n in enumerate(outputs)} if selective else {}
    tensors = {**inputs, **outputs}
    reads_row = [n for n, role in inputs.items() if role == "row"]
    along = {n: role for n, role in inputs.items() if role != "row"}
    elements = [n for n, role in outputs.items() if role == "element"]
    sums = [n for n, role in outputs.items() if role == "column_sum"]
    rows_out = [n for n, role in outputs.items() if role == "row"]
    arguments = [n for r in program.reductions for n in r.argument.names]
    whole_reads = program.inputs_read(program.assignments, arguments)
    whole_elements = [n for n in whole_reads if along[n] == "element"]
    steps = [(stage, stage_pass(program, stage, block)) for stage in range(1, program.last_stage + 1)
             if not program.folded(stage)]  # (a folded stage's sums run online in the previous stage's pass)
    final = output_pass(program, elements)
    back = (_read_back(program, along, elements, steps[0][1], final, keep, int_results)
            if reads_back and steps else None)
    # The first pass's inputs that nothing after it reads where the outputs' pass reads back.
    last_read = set(steps[0][1].loads) - {n for _, step in steps[1:] for n in step.loads} - set(back["loads_of"]) \
        if back else set()
    passes = []
    for index, (stage, step) in enumerate(steps):
        what = f"stages {stage} and {stage + 1} (its sums online)" if program.folded(stage + 1) else f"stage {stage}"
        hints = [_KEEP_UNLESS_READ_BACK if index == 0 and n in last_read else _KEEP for n in step.loads]
        passes.append(dict(loads=[_load(n, along[n], h, keep) for n, h in zip(step.loads, hints)], before=list(step.before),
                           body=list(step.body), after=list(step.after), what=what))
    # A long row's column sums are left to the kernel's column phase (column_phase): the passes
    # store the row values those sums read into the workspace, one row of it each.
    values = program.row_values_read(sums) if sums else []
    sum_bits = sum(bit[n] for n in sums) if selective else None
    # Inside the column sums' finish or phase (run where any sum is asked for), each sum's own gate
    # where there are more than one.
    each = bit if len(sums) > 1 else {}
    values_store = [_gated(f"tl.store({_row_value(k)}, tl.broadcast_to({v}, [ROWS, 1]), mask=row_mask)", sum_bits)
                    for k, v in enumerate(values)]
    # Each column sum adds up the programs' workspace rows SUM_ROWS at a time, in program order
    # (the same sum every run), over SUM_COLS columns at a time: either every program a share of
    # the columns after all have arrived, or the last program to arrive all of them (template).
    finish = []
    for index, n in enumerate(sums):
        rows = (f"{_partial(index, 'others', 'sum_cols')}, "
                "mask=(others < tl.num_programs(0)) & (sum_cols < row_length)")
        finish.append(dict(start=_gated(f"_t_{n} = tl.zeros([1, {SUM_COLS}], compute)", each.get(n)),
                           add=_gated(f"_t_{n} += tl.sum(tl.load({rows}, other=0.0, cache_modifier=\".cg\"), "
                                      "axis=0, keep_dims=True)", each.get(n)),
                           store=_gated(f"tl.store({n}_ptr + sum_cols * stride_{n}_0, _t_{n}.to({n}_ptr.dtype"
                                        ".element_ty), mask=sum_cols < row_length)", each.get(n))))
    return dict(
        name=name,
        # The math takes a float scalar in its own dtype (a loop's accumulators keep one type).
        scalar_casts=scalar_casts(scalars, rank=2, widened=widened),
        pointer_params=", ".join(f"{n}_ptr" for n in tensors),
        scalar_params=kernel_scalar_params(scalars),
        stride_params=", ".join(s for n, role in tensors.items() for s in _strides(n, role)),
        block=block,
        row_loads=[_load(n, "row", keep=keep) for n in reads_row],
        # A row held whole: weights ([N]) are loaded once per program, before its rows.
        column_loads=[_load(n, along[n], keep=keep) for n in whole_reads if along[n] == "column"],
        whole_loads=[_load(n, along[n], keep=keep) for n in whole_reads if along[n] == "element"],
        # Where the grid is a few programs a multiprocessor (PER_SM, or the column sums' grid-wide
        # finish), nothing else hides a row block's load latency: under AHEAD each trip takes the
        # loads the trip before issued, and issues the next block's before its own math.
        prefetch=dict(loads=[_load_ahead(n) for n in whole_elements],
                      take=[_take(n, keep) for n in whole_elements]) if whole_elements else None,
        whole_lines=whole_row_lines(program),
        selective=selective,
        element_stores=[_gated(_store(n, outputs[n], int_results), bit.get(n)) for n in elements],
        row_stores=[_gated(_store(n, "row", int_results), bit.get(n)) for n in rows_out],
        sums_before=[_gated(f"_c_{n} = tl.zeros([1, {block}], compute)", bit.get(n)) for n in sums],
        sums_add=[_gated(f"_c_{n} += {_column_sum(n)}", bit.get(n)) for n in sums],
        sums_store=[_gated(f"tl.store({_partial(index)}, _c_{n}, mask=cols < row_length)", bit.get(n))
                    for index, n in enumerate(sums)],
        sums_finish=finish,
        sum_bits=sum_bits,
        sum_rows=SUM_ROWS,
        sum_cols=SUM_COLS,
        first_lines=first_row_lines(program),
        passes=passes,
        output_loads=[_load(n, along[n], _LAST if along[n] == "element" else _KEEP, keep) for n in final.loads],
        output_lines=list(final.body),
        read_back=back,
        values_store=values_store,
        writes_along=bool(elements),
        columns=column_phase(program, inputs, outputs, values, keep, each) if sums else None,
    )


def column_phase(program: RowProgram, inputs: dict[str, str], outputs: dict[str, str], values: list[str],
                 keep=(), bit=None) -> dict:
    """The lines of a long row's column phase: once every program has passed over its rows, each
    takes strips of COLS columns down every row, COL_ROWS rows a step, from the inputs and the row
    values the passes left in the workspace (`values`, in order). `bit`: each sum's STORES bit,
    where its lines are gated (a selective kernel of more than one sum; the phase itself runs where
    any is asked for)."""
    bit = bit or {}
    along = {n: role for n, role in inputs.items() if role != "row"}
    sums = [n for n, role in outputs.items() if role == "column_sum"]
    step = output_pass(program, sums, prefix="_k")
    # .cg: the row values other programs stored are read from L2, never a stale L1 line.
    loaded = [f"{v} = tl.load({_row_value(k)}, mask=row_mask, cache_modifier=\".cg\")" for k, v in enumerate(values)]
    elements = [n for n in step.loads if along[n] == "element"]
    return dict(
        value_count=len(values),
        column_loads=[_load(n, along[n], keep=keep) for n in step.loads if along[n] == "column"],
        row_loads=[_load(n, "row", keep=keep) for n in program.inputs_read(program.output_values(sums), sums, level=ROW)]
        + loaded,
        # One program a multiprocessor runs the phase, so nothing else hides a step's load latency:
        # each step takes the loads the step before issued (rows `_ahead`, in their own dtype) and
        # issues the next step's before its own math.
        prefetch=[_load_ahead(n) for n in elements],
        take=[_take(n, keep) for n in elements],
        lines=list(step.body),
        # Each lane keeps its own running sum; the lanes of a column are added up once, at the end.
        sums_before=[_gated(f"_c_{n} = tl.zeros([COL_ROWS, COLS], compute)", bit.get(n)) for n in sums],
        sums_add=[_gated(f"_c_{n} += tl.where(mask, {n}, 0.0)", bit.get(n)) for n in sums],
        sums_store=[_gated(f"tl.store({n}_ptr + cols * stride_{n}_0, tl.sum(_c_{n}, axis=0, keep_dims=True)"
                           f".to({n}_ptr.dtype.element_ty), mask=cols < row_length)", bit.get(n)) for n in sums],
    )


def _masks(spec: Spec) -> list[str]:
    """The bool inputs: masks a kernel reads as they are (int1)."""
    return [t.name for t in spec.inputs if t.dtypes == ("bool",)]


def _space(spec: Spec, backward: bool = False, sums_columns: bool = False) -> str:
    tile = spec.tiles[0]
    fixed = dict(spec.configs.fixed)
    if sums_columns:  # its grid is a program a multiprocessor already (the column sums' finish)
        fixed["PER_SM"] = 0
    rows = [fixed["ROWS"]] if "ROWS" in fixed else []
    longest = ", backward=True" if backward else ""
    unroll = f", unroll={[fixed['UNROLL']]}" if "UNROLL" in fixed else ""
    per_sm = f", per_sm={[fixed['PER_SM']]}" if "PER_SM" in fixed else ""
    fixed_n = f", fixed_n={[fixed['FIXED_N']]}" if "FIXED_N" in fixed else ""
    evict = f", evict={[fixed['EVICT']]}" if "EVICT" in fixed else ""
    loop = f", loop={[fixed['LOOP']]}" if "LOOP" in fixed else ""
    return (f"rt.ReductionSpace({tile.block!r}, {fixed_or(spec, tile.block, tile.sizes)}, "
            f"{fixed_or(spec, 'num_warps', spec.configs.num_warps)}, {rows}{longest}{unroll}{per_sm}{fixed_n}{evict}{loop})")


def forward_program(spec: Spec, kept: list[tuple[str, str]] = ()) -> RowProgram:
    """The forward's row program: the steps its outputs read, its outputs, and the `kept` row values
    ((name, the reduction it stores), kept_statistics) it also stores for its backward."""
    values = spec.steps_read() + list(spec.body)
    values += [(name, expression_of(ast.Name(reduction, ast.Load()))) for name, reduction in kept]
    return RowProgram(values, spec.row_levels())


def _key(program: RowProgram, reduction: str, kinds: dict) -> str:
    """The key of a program's reduction by its value (KeptValues), given the op's number kinds."""
    return normal_form(program.canonical(ast.Name(reduction, ast.Load())), kinds)


def kept_statistics(forward: RowProgram, kinds: dict) -> KeptValues | None:
    """The forward's sums that a decision reads (RowProgram.decided_sums), for its backward to read
    as the forward computed them: `where(x > mean(x), ...)` over a row of equal values, its mean
    summed again in another order (the backward's own config), decided the other way for every
    element. None where there are none."""
    decided = forward.decided_sums()
    if not decided:
        return None
    return KeptValues({_key(forward, r.name, kinds): f"_kept_{r.name[2:]}" for r in decided},
                      functools.partial(normal_form, kinds=kinds))


def _backward(spec: Spec, roles: dict[str, str], forward: RowProgram) -> dict:
    """The gradients of every input, derived from the steps and outputs: one reduction kernel over
    the saved inputs and the incoming gradients. A column input's gradient is summed over the
    rows by the kernel's programs, each into a row of its own, then over those rows. Sums that a
    decision reads (kept_statistics) are the forward's: its kernel stores them, and the backward
    runs it again on the saved inputs (the same config, the same sums) rather than sum again."""
    inputs = [t.name for t in spec.inputs]
    outputs = [t.name for t in spec.outputs]
    levels = spec.row_levels()
    # A column input's gradient is summed over the rows inside the kernel even where it is an
    # incoming gradient as it is (LayerNorm's bias): summed after it, by PyTorch, it took another
    # pass over the gradient (20 us of a 100 us step at 4096x4096 in half precision on the H200)
    # and a 128 MiB buffer (bench/results/h200/reductions/column_sums_in_kernel).
    columns = [n for n in inputs if roles[n] == "column"]
    output_levels = {o: ROW if roles[o] == "row" else ELEMENT for o in outputs}
    kinds = spec.number_kinds()
    kept = kept_statistics(forward, kinds)
    backward = _fewest_reads(spec, inputs, outputs, roles, levels, output_levels, columns, plain=kept is not None)
    computed = backward.computed()
    saved = [n for n in inputs if n in backward.reads] if computed else []
    outputs_read = [o for o in outputs if o in backward.reads] if computed else []
    seeds = [backward.seeds[o] for o in outputs]
    if computed and not any(roles[n] == "element" for n in saved + outputs_read + outputs):
        # Nothing the backward reads has rows along the reduced axis (outputs of a value per row
        # that read only weights: sum(w * w)): it takes the first input with rows, whose shape
        # gives the call N and the rows.
        saved.append(next(n for n in inputs if roles[n] == "element"))
    seed_levels = {backward.seeds[o]: output_levels[o] for o in outputs}
    kept_levels = {name: ROW for name in kept.names.values()} if kept else {}
    program = RowProgram(list(backward.steps), {**{n: levels[n] for n in saved},
                                                **{o: output_levels[o] for o in outputs_read}, **seed_levels,
                                                **kept_levels, **{s.name: levels[s.name] for s in spec.scalars}},
                         kept=kept)
    # The kept sums the backward reads, and the forward's reductions they are.
    by_key = {_key(forward, r.name, kinds): r.name for r in forward.reductions}
    reruns = [(kept.names[key], by_key[key]) for key in kept.names if key in kept.used] if kept else []
    # A backward that reruns the forward takes every input (the forward's call); its kernel reads
    # only those its math does.
    taken = inputs if reruns else saved
    results = {backward.results[n]: {"row": "row", "column": "column_sum"}.get(roles[n], "element") for n in computed}
    scalars = spec.scalars
    name = backward_op_name(spec.op)
    sources = gradient_sources(backward, inputs, outputs)
    kernel_inputs = {**{n: roles[n] for n in saved}, **{o: roles[o] for o in outputs_read},
                     **{k: "row" for k, _ in reruns}, **{backward.seeds[o]: roles[o] for o in outputs}}
    # Gradients take the shape of the first incoming gradient along the rows, and the widest dtype
    # of the float tensors the backward reads (gradient_dtype; autograd casts each to its input's).
    like_output = next((o for o in outputs if roles[o] == "element"), outputs[0])
    like = backward.seeds[like_output]
    needed = needed_gradients(inputs, backward)["result_needed"]
    allocations = []
    for n in computed:
        result = backward.results[n]
        made = gradient_dtype(spec, like_output, like, n, saved)
        shape = {"row": "_lead", "column": "(_n,)"}.get(roles[n], "(*_lead, _n)")
        # A column input's gradient is summed over the rows in float32 at least; another's, which
        # autograd sums where its input was broadcast, in the dtype its terms read.
        dtype = (f"torch.promote_types({made}, torch.float32)" if roles[n] == "column" else
                 summed_gradient_dtype(spec, backward, n, made, like_output, taken + outputs_read, shape))
        # A gradient not asked for: an empty placeholder, never written (rt.ReductionOp.run's stores).
        allocations.append(f"{result} = torch.empty({shape} if {needed[computed.index(n)]} else 0, dtype={dtype}, "
                           f"device={like}.device)")
    # Where no decision reads a kept sum, the same math in PyTorch's ops (a backward that reruns the
    # forward for its sums has none: its second derivative is refused by name).
    in_torch = None if reruns else torch_gradients(
        spec, backward, saved + outputs_read + seeds, list(results),
        rows=tuple(n for n, role in kernel_inputs.items() if role == "row"),
        row_results=tuple(r for r, role in results.items() if role == "row"),
        length=next(n for n, role in kernel_inputs.items() if role == "element"))
    return dict(
        name=name,
        in_torch=in_torch,
        kernel=row_kernel(name, program, kernel_inputs, results, scalars, spec.tiles[0].block,
                          spec.int_scalars_in_float_math(), masks=_masks(spec), selective=True),
        roles=tuple_source(repr(r) for r in [*kernel_inputs.values(), *results.values()]),
        kernel_inputs=list(kernel_inputs),
        results=list(results),
        named_inputs="[" + ", ".join(f'("{n}", {n})' for n in kernel_inputs) + "]",
        typed_params=", ".join([f"{n}: torch.Tensor" for n in taken + outputs_read + seeds] + scalar_params(spec)
                               + NEEDED_PARAM),
        call_args=", ".join(taken + outputs_read + seeds + [s.name for s in scalars]),
        allocations=allocations,
        return_type="tuple[" + ", ".join("torch.Tensor" for _ in results) + "]",
        **needed_gradients(inputs, backward),
        gradients=gradients_formula(f"_{name}" if computed else None, inputs, taken, sources, len(outputs),
                                    tuple(outputs.index(o) for o in outputs_read), whole=True,
                                    records=output_records(spec), selective=True,
                                    differentiable=in_torch and f"_{name}_in_torch"),
        # (name, the forward reduction it holds): the sums the forward stores and the backward reads.
        kept=reruns,
    )


def _fewest_reads(spec: Spec, inputs: list[str], outputs: list[str], roles: dict[str, str], levels: dict[str, int],
                  output_levels: dict[str, int], columns: list[str], plain: bool = False):
    """The backward derived from the inputs, or the one that reads outputs in place of the inputs
    they are computed from, where that reads fewer tensors along the rows: add_rms_norm's reads its
    sum h = x + residual, not x and residual (one tensor fewer in every pass over a row, and one
    fewer kept for the backward; PyTorch's rms_norm backward of the sum reads it so too). `plain`:
    from the inputs (a backward that reruns the forward on them)."""
    along = [n for n in inputs if roles[n] == "element"]

    def derived(**kwargs):
        return differentiate(list(spec.body), inputs, steps=list(spec.steps), levels=levels,
                             computed_always=columns, output_levels=output_levels, kinds=spec.number_kinds(), **kwargs)

    def read_along(backward):
        return sum(1 for n in backward.reads if n in along or (n in outputs and roles[n] == "element"))

    from_inputs = derived()
    if plain:
        return from_inputs
    reading = derived(outputs_instead_of=along)
    return reading if read_along(reading) < read_along(from_inputs) else from_inputs


def has_backward_kernel(spec: Spec) -> bool:
    """Whether the op's backward launches a kernel: some input's gradient is computed (an op whose
    outputs give no input a gradient, such as a share of elements above the mean, has none)."""
    return bool(_backward(spec, spec.row_roles(), forward_program(spec))["results"])


def differentiates_twice(spec: Spec) -> bool:
    """Whether the op's backward has its math in PyTorch's ops (torch_gradients), which a backward
    under create_graph=True runs: not where it reruns the forward for the sums its decisions read."""
    return _backward(spec, spec.row_roles(), forward_program(spec))["in_torch"] is not None


def reduction_context(spec: Spec, header: str) -> dict:
    roles = spec.row_roles()
    inputs = [t.name for t in spec.inputs]
    outputs = [t.name for t in spec.outputs]
    scalars = spec.scalars
    backward = _backward(spec, roles, forward_program(spec))
    kept = [name for name, _ in backward["kept"]]
    program = forward_program(spec, backward["kept"])
    ctx = common_context(spec, header)
    outs, prelude, result = output_context(spec)
    checks = input_checks(spec, {})
    entries = ", ".join(f'("{t.public}", {t.name}, {tuple(t.shape)!r})' for t in spec.inputs)
    checks.append(f'rt.check_axes("{spec.op}", [{entries}])')
    checks.append(f"_lead, _n = _OP.shape(\"{spec.op}\", {ctx['input_pairs']})")
    for out in outs:
        out["shape"] = "_lead" if roles[out["name"]] == "row" else "(*_lead, _n)"
    tile = spec.tiles[0]
    bool_results = int_results(spec)
    kernel = row_kernel(spec.op, program, {n: roles[n] for n in inputs},
                        {**{n: roles[n] for n in outputs}, **{k: "row" for k in kept}}, scalars, tile.block,
                        spec.int_scalars_in_float_math(), reads_back=True, masks=_masks(spec),
                        int_results=bool_results)
    ctx.update(
        kernel=kernel,
        int_results=bool_results,
        read_back=tuple_source(str((inputs + outputs).index(n)) for n in kernel["read_back"]["loaded"])
        if kernel["read_back"] else None,
        block=tile.block,
        roles=tuple_source(repr(roles[n]) for n in inputs + outputs),
        kept=kept,
        space=_space(spec),
        compute_floor=spec.compute or "float32",
        checks=checks + prelude,
        outputs=outs,
        input_names=inputs,
        output_names=outputs,
        result=result,
        backward=backward,
        backward_space=_space(spec, backward=True, sums_columns="column_sum" in backward["roles"]),
        along=_along(spec),
    )
    return ctx


def _along(spec: Spec) -> dict | None:
    """The public wrapper's call for another reduced axis (`dim=`), or None where it has no such
    keyword: its inputs and scalars by their public names, as the wrapper's parameters are."""
    keyword = spec.reduced_axis_keyword()
    if not keyword:
        return None
    inputs = ", ".join(f'"{t.public}": {t.public}' for t in spec.inputs)
    scalars = ", ".join(f'"{s.public}": {s.public}' for s in spec.scalars)
    return dict(keyword=keyword, call=f"_OP.along({spec.op}, {keyword}, {{{inputs}}}, {{{scalars}}}, out)")

