"""An op's gradients in PyTorch's own ops: the math of its backward, which autograd can
differentiate again. A backward asked for gradients to differentiate (create_graph=True: a
Hessian-vector product, a gradient penalty, a physics-informed loss) runs these (rt.Gradients
`differentiable`); every other backward runs the kernels. Rendered per op as a function with the
backward op's parameters and results."""

import re

from .categories import FLOAT, Kind, category_of
from .derivatives import Backward
from .dtypes import category
from .expressions import MATH_DTYPE
from .rows import ROW_LENGTH
from .spec import Spec


def torch_gradients(spec: Spec, backward: Backward, params: list[str], results: list[str],
                    rows: tuple[str, ...] = (), row_results: tuple[str, ...] = (), length: str | None = None,
                    prelude: tuple[str, ...] = (), as_given: tuple[str, ...] = ()) -> dict:
    """The context of `_<backward op>_in_torch`: `params` the backward op's tensor parameters (its
    scalars and `_needed` follow), `results` its results in order (names the lines bind, or
    expressions of them). A reduction's: `rows` the parameters that hold a value per row (given a
    last axis of 1, as its math reads them), `row_results` the results that do (their last axis of
    1 dropped), `length` a parameter whose last axis is the reduced one (the row length `_n` its
    math reads). `prelude`: lines before the math (a matmul's accumulator, recomputed); `as_given`:
    tensors left in their own dtype (a matmul's operands: its products run in their dtype, the
    float32 accumulation inside, as the kernels' do)."""
    scalars = [s.name for s in spec.scalars]
    floats = set(spec.float_inputs()) | set(spec.float_outputs())
    seeds = set(backward.seeds.values())
    # Float tensors in the math's precision (int and bool ones, masks and conditions, as they are).
    upcast = [n for n in params if (n in floats or n in seeds) and n not in as_given]
    compute = spec.compute or "float32"
    lines = backward.lines("eager", frozenset(scalars + ([ROW_LENGTH] if length else [])), kinds=gradient_kinds(spec, backward),
                           differentiated=True)
    # The math's dtype, where a where() of numbers alone takes it (expressions.MATH_DTYPE).
    reads_math_dtype = any(re.search(rf"\b{MATH_DTYPE}\b", line) for line in lines)
    return dict(
        params=", ".join([*params, *scalars, "_needed"]),
        upcast=upcast,
        compute=compute,
        math_dtype=(MATH_DTYPE, f"{upcast[0]}.dtype" if upcast else f"torch.{compute}") if reads_math_dtype else None,
        rows=list(rows),
        length=length,
        prelude=list(prelude),
        lines=lines,
        results=[_result(r, row_results, length) for r in results],
    )


def _result(name: str, row_results: tuple[str, ...], length: str | None) -> str:
    """A reduction's result as its backward op returns it: a per-row one without its last axis of
    1; the others along the whole rows, even where their math is a value per row alone (a weight
    read only in a row's mean: its gradient is that value in every column, which the formula then
    sums over the rows), as the kernel stores them."""
    if name in row_results:
        return f"{name}[..., 0]"
    return f"{name}.expand_as({length})" if length else name


def gradient_kinds(spec: Spec, backward: Backward) -> dict[str, Kind]:
    """The kind of number each name the gradients' lines read holds (categories.Kind), for the
    emitters: a bool's maximum is an or in eager code, not a clamp PyTorch has no bool kernel for;
    an int literal of int math is an int in a kernel too."""
    kinds = {**spec.number_kinds(), **{t.name: Kind(category(t.dtypes[0]), False) for t in spec.outputs},
             **{seed: Kind(FLOAT, False) for seed in backward.seeds.values()}}  # (a reduction's row length: number_kinds)
    for name, expression in backward.steps:  # (each reads the ones before it)
        kinds[name] = Kind(category_of(expression.tree.body, kinds), False)
    return kinds
