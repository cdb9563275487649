"""The row program of a reduction op: its values by level and stage, and the kernel lines that
compute them, one row tile at a time or in passes over a long row.

A reduction op computes, per row, a list of assignments (the spec's steps, then its outputs; or
a derived backward's temporaries, then its gradients). Each value has a *level*: it varies along
the row (ELEMENT: inputs over the reduced axis, and what is computed from them), is one value
per row (ROW: a reduction, or what is computed from reductions and per-row inputs), or is the
same for every row (UNIFORM: scalars, constants, the row length `_n`). Each reduction
(`sum(e)`, `max(e)`, `min(e)`; `mean(e)` is `sum(e) / _n`) is taken out of its expression and
named `_r<i>`; its *stage* is one more than the latest stage among the values its argument
reads (a value's stage is the latest among the reductions it reads). Reductions of one stage run in one pass over the row.

A row that fits one tile is loaded once and computed straight through (`whole_row`). A longer
row runs one pass per stage, each accumulating its reductions tile by tile, then one pass that
writes the outputs (`passes`). A stage whose reductions are all sums of exp(u - max(u)) (softmax's
normalizer) needs no pass of its own where the max's pass reads more than u's inputs (a backward):
that pass keeps a running sum per lane beside the running max, rescaled as the max grows
(`RowProgram.online_sums`).
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Callable
from dataclasses import dataclass, field

from .categories import INT, Kind
from .decisions import DECIDING_REDUCTIONS, decision_operands
from .expressions import REDUCTIONS, Expression, assignments, expression_of, value_names, written_out

UNIFORM, ROW, ELEMENT = 0, 1, 2
LEVEL_NAMES = {UNIFORM: "the same for every row", ROW: "one value per row", ELEMENT: "varies along the row"}
ROW_LENGTH = "_n"  # the reduced axis's length, in the compute dtype (mean divides by it)
# Its kind of number where a spec reads it (by its axis's name, `N`): an int, as x.shape[-1] is,
# taken as a Python number is beside tensors.
ROW_LENGTH_KIND = Kind(INT, True)

# What a masked lane holds for each reduction: its identity.
_NEUTRAL = {"sum": "0.0", "max": "float(\"-inf\")", "min": "float(\"inf\")"}


@dataclass(frozen=True)
class Reduction:
    name: str            # _r<i>
    kind: str            # sum, max or min
    argument: Expression  # an element-level expression, its own reductions already named
    stage: int


@dataclass(frozen=True)
class Assignment:
    name: str
    expression: Expression  # reductions replaced by their names
    level: int
    stage: int


def level_of(tree: ast.AST, levels: dict[str, int], problems: list[str] | None = None) -> int:
    """The level of a checked expression tree over names of known `levels`; with `problems`, each
    reduction of a value that does not vary along the row is noted there."""
    if isinstance(tree, ast.Name):
        return levels.get(tree.id, UNIFORM)
    if isinstance(tree, ast.Call) and isinstance(tree.func, ast.Name) and tree.func.id in REDUCTIONS:
        inner = level_of(tree.args[0], levels, problems)
        if inner != ELEMENT and problems is not None:
            problems.append(f"{tree.func.id}() of a value that is {LEVEL_NAMES[inner]}, not one that varies "
                            "along the row")
        return ROW
    children = [c for c in ast.iter_child_nodes(tree) if not isinstance(c, (ast.expr_context, ast.operator,
                                                                           ast.unaryop, ast.cmpop))]
    if isinstance(tree, ast.Call):
        children = list(tree.args)
    return max((level_of(c, levels, problems) for c in children), default=UNIFORM)


def without_mean(tree: ast.AST) -> ast.AST:
    """`tree` with each mean(e) written sum(e) / _n (a copy)."""
    tree = copy.deepcopy(tree)

    class Rewrite(ast.NodeTransformer):
        def visit_Call(self, node):
            self.generic_visit(node)
            if isinstance(node.func, ast.Name) and node.func.id == "mean":
                node.func.id = "sum"
                return ast.BinOp(node, ast.Div(), ast.Name(ROW_LENGTH, ast.Load()))
            return node

    return ast.fix_missing_locations(Rewrite().visit(tree))


def _row_factors(tree: ast.AST, levels: dict[str, int], stages: dict[str, int]):
    """(inner, outside) for a sum's argument `tree`: the factors of its product (with its
    quotients and negations) that are one value per row and read a reduction move out of the
    sum, so that sum(tree) = outside(sum(inner)); `outside` is None where there are none. A
    backward's sum(g * e / s / s) becomes sum(g * e) / s / s, a stage earlier than the s it
    divides by. Factors known before the row is read (per-row inputs, scalars) stay in: they cost
    no stage, and moved out they would change the result where they are infinite (sum(t * x) for
    t = inf over x of both signs is NaN, as PyTorch computes it; inf * sum(x) is not)."""
    factors = []  # (subtree, divides)
    negations = 0

    def collect(node, divides):
        nonlocal negations
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            negations += 1
            collect(node.operand, divides)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Div)):
            collect(node.left, divides)
            collect(node.right, divides != isinstance(node.op, ast.Div))
        else:
            factors.append((node, divides))

    collect(tree, False)

    def moves_out(factor):
        return level_of(factor, levels) != ELEMENT and any(stages.get(n, 0) > 0 for n in value_names(factor))

    along = [(f, d) for f, d in factors if not moves_out(f)]
    per_row = [(f, d) for f, d in factors if moves_out(f)]
    if not per_row or not any(level_of(f, levels) == ELEMENT for f, _ in along):
        return tree, None

    def product(parts, start):
        for node, divides in parts:
            start = ast.BinOp(start, ast.Div() if divides else ast.Mult(), copy.deepcopy(node))
        return start

    first = next((i for i, (_, d) in enumerate(along) if not d), None)
    inner = (product(along[:first] + along[first + 1:], copy.deepcopy(along[first][0])) if first is not None
             else product(along, ast.Constant(1.0)))

    def outside(reduced):
        result = product(per_row, reduced)
        return ast.UnaryOp(ast.USub(), result) if negations % 2 else result

    return inner, outside


def _exp_and_weight(tree: ast.AST):
    """(the exp() call, the factor beside it or None) where `tree` is exp(...) or a product of
    exp(...) and another factor; (None, None) otherwise."""
    def is_exp(node):
        return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "exp"
    if is_exp(tree):
        return tree, None
    if isinstance(tree, ast.BinOp) and isinstance(tree.op, ast.Mult):
        if is_exp(tree.left):
            return tree.left, tree.right
        if is_exp(tree.right):
            return tree.right, tree.left
    return None, None


@dataclass
class KeptValues:
    """Reductions a program reads from row inputs instead of computing them: `names` maps the
    key of a reduction (`key_of` its canonical tree: sum(e) with every value e reads written
    out down to the inputs, see RowProgram.canonical) to the row input holding its value. A
    backward reads the forward's own sums so, where a decision reads them: recomputed with its
    own config, a sum comes out in another order, and an element within a rounding of it would
    be decided the other way (reduction_lowering.kept_statistics). `used`: the keys read."""
    names: dict[str, str]
    key_of: Callable[[ast.AST], str]
    used: set = field(default_factory=set)


def _undetached(tree: ast.AST) -> ast.AST:
    """`tree` without a detach() around it: the same value (online_sums looks through it)."""
    if isinstance(tree, ast.Call) and isinstance(tree.func, ast.Name) and tree.func.id == "detach":
        return tree.args[0]
    return tree


class RowProgram:
    """`values` ((name, Expression) in order, each reading only names defined before it) over the
    names in `levels` (inputs and scalars, with their levels). Reductions may nest in what a
    backward derives: an inner one is computed in an earlier stage. Equal reductions are one."""

    def __init__(self, values, levels: dict[str, int], kept: KeptValues | None = None):
        self.levels = {**levels, ROW_LENGTH: UNIFORM}
        self.stages = {name: 0 for name in self.levels}
        self.reductions: list[Reduction] = []
        self.assignments: list[Assignment] = []
        # Each value and reduction written out down to the inputs (self.canonical).
        self._canonical: dict[str, ast.AST] = {}
        self._kept = kept
        seen: dict[tuple, str] = {}
        for name, expression in values:
            tree = self._take_reductions(without_mean(expression.tree.body), seen)
            body = expression_of(tree)
            self._canonical[name] = self.canonical(tree)
            level = max((self.levels[n] for n in body.names), default=UNIFORM)
            stage = max((self.stages[n] for n in body.names), default=0)
            self.levels[name], self.stages[name] = level, stage
            self.assignments.append(Assignment(name, body, level, stage))
        self.last_stage = max((r.stage for r in self.reductions), default=0)
        self._online: dict[str, Reduction] | None = None

    def _take_reductions(self, tree: ast.AST, seen: dict) -> ast.AST:
        program = self

        class Take(ast.NodeTransformer):
            def visit_Call(self, node):
                self.generic_visit(node)  # inner reductions first
                if not (isinstance(node.func, ast.Name) and node.func.id in REDUCTIONS):
                    return node
                outside = None
                if node.func.id == "sum":  # sum(r * e) = r * sum(e) for r one value per row
                    inner, outside = _row_factors(node.args[0], program.levels, program.stages)
                    node.args[0] = inner
                argument = expression_of(node.args[0])
                key = (node.func.id, ast.dump(argument.tree))
                kept = program._kept_name(node.func.id, argument)
                if kept is not None:
                    reduced = ast.Name(kept, ast.Load())
                    return outside(reduced) if outside is not None else reduced
                if key not in seen:
                    name = seen[key] = f"_r{len(program.reductions)}"
                    stage = 1 + max((program.stages[n] for n in argument.names), default=0)
                    program.reductions.append(Reduction(name, node.func.id, argument, stage))
                    program.levels[name], program.stages[name] = ROW, stage
                    program._canonical[name] = program._reduced(node.func.id, argument)
                reduced = ast.Name(seen[key], ast.Load())
                return outside(reduced) if outside is not None else reduced

        return ast.fix_missing_locations(Take().visit(tree))

    def _reduced(self, kind: str, argument: Expression) -> ast.AST:
        return ast.Call(ast.Name(kind, ast.Load()), [self.canonical(argument.tree.body)], [])

    def _kept_name(self, kind: str, argument: Expression) -> str | None:
        """The row input that holds this reduction's value (KeptValues), else None."""
        if self._kept is None:
            return None
        reduced = self._reduced(kind, argument)
        key = self._kept.key_of(reduced)
        if key not in self._kept.names:
            return None
        self._kept.used.add(key)
        name = self._kept.names[key]
        self._canonical[name] = reduced  # (a reduction of values that read it is keyed by it too)
        return name

    def canonical(self, tree: ast.AST) -> ast.AST:
        """`tree` (a copy) with every value and reduction it reads written out, down to the inputs,
        scalars and the row length: the same tree for the same value whatever a program named its
        parts (a forward's steps, a backward's temporaries)."""
        return written_out(tree, self._canonical)

    def decided_sums(self) -> list[Reduction]:
        """The sums whose value a decision reads, through any values between: where's condition,
        relu's, abs's, maximum's and minimum's arguments, and a max's or min's argument (its
        backward finds the elements equal to it). A max or a min of the same values is the same
        in any order; a sum is not."""
        defined = {a.name: a.expression.tree.body for a in self.assignments}
        defined.update({r.name: r.argument.tree.body for r in self.reductions})
        read = [n for r in self.reductions if r.kind in DECIDING_REDUCTIONS for n in r.argument.names]
        read += [n for tree in defined.values() for operand in decision_operands(tree) for n in value_names(operand)]
        reached: set[str] = set()
        while read:
            name = read.pop()
            if name in reached or name not in defined:
                continue
            reached.add(name)
            read.extend(value_names(defined[name]))
        return [r for r in self.reductions if r.kind == "sum" and r.name in reached]

    def level(self, name: str) -> int:
        return self.levels[name]

    def _inlined(self, tree: ast.AST) -> ast.AST:
        """`tree` (a copy) with each element-level assignment it reads replaced by its expression,
        down to inputs and row values."""
        by_name = {a.name: a for a in self.assignments if a.level == ELEMENT}

        class Inline(ast.NodeTransformer):
            def visit_Name(self, node):
                if node.id in by_name:
                    return self.visit(copy.deepcopy(by_name[node.id].expression.tree.body))
                return node

        return Inline().visit(copy.deepcopy(tree))

    def online_sums(self) -> dict[str, Reduction]:
        """Sum reductions that the pass of the max they read can accumulate, to that max
        (found once: every stage's pass asks)."""
        if self._online is None:
            self._online = self._find_online_sums()
        return self._online

    def _find_online_sums(self) -> dict[str, Reduction]:
        """online_sums: each sum of exp(u - m), m being max(u) of the same u (the normalizer of
        softmax and log_softmax). Each lane keeps a running sum of exp(u - its running max), rescaled by
        exp(old max - new max) when that grows; the lanes' sums are then added up rescaled to the
        row's max. Only stages whose reductions are all such sums are listed: another reduction
        in the stage would need its pass anyway."""
        maxima = {r.name: r for r in self.reductions if r.kind == "max"}
        # Row values that are a max itself (a step `m: max(x)`, or `m: detach(max(x))`).
        aliases = {a.name: value.id for a in self.assignments
                   if a.level == ROW and isinstance(value := _undetached(a.expression.tree.body), ast.Name)
                   and value.id in maxima}
        found = {}
        for r in self.reductions:
            if r.kind != "sum":
                continue
            exponential, weight = _exp_and_weight(self._inlined(r.argument.tree.body))
            if exponential is None:
                continue
            difference = exponential.args[0]
            if not (isinstance(difference, ast.BinOp) and isinstance(difference.op, ast.Sub)
                    and isinstance(_undetached(difference.right), ast.Name)):
                continue
            right = _undetached(difference.right).id
            peak = maxima.get(aliases.get(right, right))
            weight_stage = max((self.stages[n] for n in value_names(weight)), default=0) if weight is not None else 0
            if (peak is not None and r.stage == peak.stage + 1 and weight_stage < peak.stage
                    and ast.dump(difference.left) == ast.dump(self._inlined(peak.argument.tree.body))):
                found[r.name] = peak
        whole = {r.name: found[r.name] for r in self.reductions
                 if all(other.name in found for other in self.stage_reductions(r.stage))}
        # Where the max's pass reads nothing along the row but the max's own input (a forward
        # softmax), the normalizer keeps its pass: that re-read of a row the pass just read comes
        # from L2, and on the H200 it cost less than the online update (the fold measured 0.68-0.89x
        # on long half-precision rows, bench/results/h200/reductions/online/). Where the merged pass
        # reads more (a backward's incoming gradient) the fold measured 1.07-1.20x.
        return {name: peak for name, peak in whole.items()
                if self._merged_inputs(peak, [s for s, p in whole.items() if p is peak])
                - self._row_inputs(peak.argument.names)}

    def _row_inputs(self, names) -> set[str]:
        """The inputs along the row that computing `names` reads, through the assignments they read."""
        return set(self.inputs_read(self._needed(names), names))

    def _merged_inputs(self, peak: Reduction, sums: list[str]) -> set[str]:
        """The inputs along the row that the max's pass reads with `sums` folded into it."""
        by_name = {r.name: r for r in self.reductions}
        reduced = self.stage_reductions(peak.stage) + [by_name[s] for s in sums]
        return self._row_inputs([n for r in reduced for n in r.argument.names])

    def online_weight(self, reduction: Reduction) -> ast.AST | None:
        """What an online sum multiplies its exp(u - m) by (None: nothing), inlined."""
        return _exp_and_weight(self._inlined(reduction.argument.tree.body))[1]

    def folded(self, stage: int) -> bool:
        """Whether `stage`'s reductions all run in the previous stage's pass (online_sums)."""
        online = self.online_sums()
        return bool(self.stage_reductions(stage)) and all(r.name in online for r in self.stage_reductions(stage))

    # ---- what each part of the kernel needs -----------------------------------------------------

    def _needed(self, names, held=()) -> list[Assignment]:
        """The element-level assignments that computing `names` reads, in order (row values are
        computed once, outside the passes); those in `held` are needed, what they read is not
        (their values come from elsewhere: read_back)."""
        by_name = {a.name: a for a in self.assignments}
        wanted, stack = set(), list(names)
        while stack:
            name = stack.pop()
            if name in wanted or name not in by_name or by_name[name].level != ELEMENT:
                continue
            wanted.add(name)
            if name not in held:
                stack.extend(by_name[name].expression.names)
        return [a for a in self.assignments if a.name in wanted]

    def inputs_read(self, assigned: list[Assignment], extra=(), level: int = ELEMENT) -> list[str]:
        """The inputs of `level` (along the row unless said; not assignments or reductions) that
        `assigned` and `extra` names read."""
        defined = {a.name for a in self.assignments} | {r.name for r in self.reductions}
        read = set(extra)
        for a in assigned:
            read.update(a.expression.names)
        return [n for n in self.levels if n in read and n not in defined and self.levels[n] == level]

    def stage_reductions(self, stage: int) -> list[Reduction]:
        return [r for r in self.reductions if r.stage == stage]

    def row_assignments(self, stage: int) -> list[Assignment]:
        return [a for a in self.assignments if a.level != ELEMENT and a.stage == stage]

    def pass_values(self, stage: int) -> list[Assignment]:
        """The element assignments a pass accumulating `stage`'s reductions computes."""
        return self._needed([n for r in self.stage_reductions(stage) for n in r.argument.names])

    def output_values(self, outputs) -> list[Assignment]:
        return self._needed(outputs)

    def row_values_read(self, outputs) -> list[str]:
        """The values computed once a row (reductions, and assignments that are not along the row)
        that computing `outputs` along the row reads, in the order they are computed: what a
        kernel that computes `outputs` apart from the passes needs handed to it."""
        read = set(outputs)
        for a in self._needed(outputs):
            read.update(a.expression.names)
        computed = [r.name for r in self.reductions] + [a.name for a in self.assignments if a.level != ELEMENT]
        return [n for n in sorted(computed, key=lambda n: self.stages[n]) if n in read]


# ---- Triton lines ---------------------------------------------------------------------------


def _lines(values: list[tuple[str, Expression]], prefix: str) -> list[str]:
    return assignments(values, "triton", temp_prefix=prefix)


def reduce_lines(reduction: Reduction, value: str) -> list[str]:
    """The lines computing `reduction` from `value`, a name (masked lanes hold its identity). tl.max
    and tl.min drop NaN; amax and amin, and so the oracle, keep it: a row holding one gets NaN."""
    name = reduction.name
    if reduction.kind == "sum":
        return [f"{name} = tl.sum({value}, axis=1, keep_dims=True)"]
    return [f"{name} = tl.{reduction.kind}({value}, axis=1, keep_dims=True)",
            f"{name} = tl.where(tl.max(({value} != {value}).to(tl.int32), axis=1, keep_dims=True) > 0, "
            f"float(\"nan\"), {name})"]


def masked(reduction: Reduction, value: str) -> str:
    return f"tl.where(mask, {value}, {_NEUTRAL[reduction.kind]})"


def whole_row_lines(program: RowProgram, prefix: str = "_w") -> list[str]:
    """The whole program, straight through, on a tile that holds whole rows: each stage's
    reductions of masked values, then the values that read them."""
    lines: list[str] = []
    counter = [0]

    def emit(values):
        if values:
            lines.extend(_lines(values, f"{prefix}{counter[0]}_"))
            counter[0] += 1

    emit([(a.name, a.expression) for a in program.assignments if a.stage == 0])
    for stage in range(1, program.last_stage + 1):
        for reduction in program.stage_reductions(stage):
            value, kept = f"_a{reduction.name[2:]}", f"_m{reduction.name[2:]}"
            emit([(value, reduction.argument)])
            lines.append(f"{kept} = {masked(reduction, value)}")
            lines.extend(reduce_lines(reduction, kept))
        emit([(a.name, a.expression) for a in program.assignments if a.stage == stage])
    return lines


def first_row_lines(program: RowProgram, prefix: str = "_f") -> list[str]:
    """The row values that read no reduction (from scalars and per-row inputs): a kernel that
    passes over long rows computes them before its first pass."""
    return _lines([(a.name, a.expression) for a in program.row_assignments(0)], prefix)


@dataclass(frozen=True)
class Pass:
    """One pass over a long row: the inputs it loads, the lines inside the loop, and, for a
    stage's pass, the accumulators (before the loop) and the reductions (after it)."""

    loads: tuple[str, ...]
    before: tuple[str, ...]
    body: tuple[str, ...]
    after: tuple[str, ...]


def stage_pass(program: RowProgram, stage: int, block: str, prefix: str = "_p") -> Pass:
    """The pass accumulating `stage`'s reductions, and the next stage's where they are sums it
    can keep online (RowProgram.online_sums; that stage then has no pass of its own)."""
    reductions = program.stage_reductions(stage)
    online = program.online_sums()
    folded = program.stage_reductions(stage + 1) if program.folded(stage + 1) else []
    values = program.pass_values(stage)
    body = _lines([(a.name, a.expression) for a in values]
                  + [(f"_a{r.name[2:]}", r.argument) for r in reductions], f"{prefix}{stage}_")
    before, after, weights = [], [], []
    for r in reductions:
        acc, value = f"_acc{r.name[2:]}", f"_a{r.name[2:]}"
        before.append(f"{acc} = tl.full([ROWS, {block}], {_NEUTRAL[r.kind]}, compute)")
        sums = [s for s in folded if online[s.name] is r]
        if r.kind == "sum":
            body.append(f"{acc} += {masked(r, value)}")
        elif sums:
            # Each lane's running sums of exp(value - running max). Of exp(value - max) and the
            # rescaling exp(max - value) where the value is the new max, one is 1: both come from
            # one exp of -|value - max|, so the pass costs one exp an element, as the sums' own
            # pass would. A difference that is NaN (a lane of -inf meeting -inf, or a NaN, which
            # the max carries to the row) adds nothing; a lane that only sees -inf keeps 0 (0
            # beside any finite max; a row of -inf gets NaN from the final rescaling, as PyTorch).
            value_masked, gap, step = f"_u{r.name[2:]}", f"_d{r.name[2:]}", f"_t{r.name[2:]}"
            body.append(f"{value_masked} = {masked(r, value)}")
            body.append(f"{gap} = {value_masked} - {acc}")
            body.append(f"{step} = tl.exp(tl.where({gap} == {gap}, -tl.abs({gap}), float(\"-inf\")))")
            for s in sums:
                total = f"_acc{s.name[2:]}"
                weight = program.online_weight(s)
                term = step
                if weight is not None:  # sum(exp(u - m) * v): v along the row, from earlier stages
                    body.extend(_lines([(f"_v{s.name[2:]}", expression_of(weight))], f"{prefix}{stage}v{s.name[2:]}_"))
                    weights.append(weight)
                    term = f"{step} * _v{s.name[2:]}"  # (t * v where v is NaN: NaN, as in the plain sum)
                own = f"_v{s.name[2:]}" if weight is not None else "1.0"  # the value's term where it is the max
                before.append(f"{total} = tl.full([ROWS, {block}], 0.0, compute)")
                body.append(f"{total} = tl.where(mask, tl.where({gap} > 0, {total} * {step} + {own}, "
                            f"{total} + {term}), {total})")
            body.append(f"{acc} = tl.maximum({acc}, {value_masked}, propagate_nan=tl.PropagateNan.ALL)")
        else:
            pick = "maximum" if r.kind == "max" else "minimum"
            body.append(f"{acc} = tl.{pick}({acc}, {masked(r, value)}, propagate_nan=tl.PropagateNan.ALL)")
        after.extend(reduce_lines(r, acc))
    after.extend(_lines([(a.name, a.expression) for a in program.row_assignments(stage)], f"{prefix}{stage}r_"))
    for s in folded:
        # The lanes' sums, each rescaled from its lane's max to the row's.
        peak = online[s.name]
        after.append(f"{s.name} = tl.sum(_acc{s.name[2:]} * tl.exp(_acc{peak.name[2:]} - {peak.name}), axis=1, "
                     "keep_dims=True)")
    if folded:
        after.extend(_lines([(a.name, a.expression) for a in program.row_assignments(stage + 1)],
                            f"{prefix}{stage + 1}r_"))
    loads = program.inputs_read(values, [n for r in reductions for n in r.argument.names]
                                + [n for w in weights for n in sorted(value_names(w))])
    return Pass(tuple(loads), tuple(before), tuple(body), tuple(after))


def output_pass(program: RowProgram, outputs: list[str], prefix: str = "_o") -> Pass:
    values = program.output_values(outputs)
    body = _lines([(a.name, a.expression) for a in values], prefix)
    return Pass(tuple(program.inputs_read(values, outputs)), (), tuple(body), ())


@dataclass(frozen=True)
class ReadBack:
    """Outputs along the row that a long row's first pass can store and its outputs' pass load
    back in place of the inputs they are computed from (add_rms_norm's sum h = x + residual: one
    stream read again instead of two; TorchInductor's loops do the same). `outputs` are stored
    by the first pass after `lines` compute them; `final` is the outputs' pass that loads them
    and computes and stores the other outputs (`rest`). Exact only where a stored output keeps
    the math's dtype (the launch decides: READ_BACK)."""

    outputs: tuple[str, ...]
    lines: tuple[str, ...]
    final: Pass
    rest: tuple[str, ...]


def read_back(program: RowProgram, outputs: list[str], first: Pass, prefix: str = "_b") -> ReadBack | None:
    """The ReadBack of `outputs` (the element outputs) given the `first` pass (stage 1's), or
    None where no output qualifies: one that reads no reduction and no input the first pass does
    not load. Elsewhere in the outputs' pass, a value equal to a stored output (the same tree
    written out down to the inputs) is that output, loaded; what it was computed from is then
    loaded only if something else reads it."""
    by_name = {a.name: a for a in program.assignments}
    stored = [o for o in outputs if by_name[o].stage == 0 and by_name[o].level == ELEMENT
              and set(program.inputs_read(program._needed([o]), [o])) <= set(first.loads)]
    if not stored:
        return None
    trees = {ast.dump(program._canonical[o]): o for o in stored}
    # Each element value equal to a stored output, and which output holds it.
    held = {a.name: trees[ast.dump(program._canonical[a.name])] for a in program.assignments
            if a.level == ELEMENT and ast.dump(program._canonical[a.name]) in trees}
    rest = [o for o in outputs if o not in stored]
    values = program._needed(rest, held)
    computed = [a for a in values if a.name not in held]
    loaded = sorted({held[a.name] for a in values if a.name in held}, key=stored.index)
    aliases = [(a.name, expression_of(ast.Name(held[a.name], ast.Load()))) for a in values
               if a.name in held and a.name != held[a.name]]
    body = _lines(aliases + [(a.name, a.expression) for a in computed], prefix)
    final = Pass(tuple(loaded) + tuple(program.inputs_read(computed, rest)), (), tuple(body), ())
    # The stored outputs' own lines in the first pass: what its body does not compute already.
    in_first = {a.name for a in program.pass_values(1)}
    lines = _lines([(a.name, a.expression) for a in program._needed(stored) if a.name not in in_first], f"{prefix}f_")
    return ReadBack(tuple(stored), tuple(lines), final, tuple(rest))
