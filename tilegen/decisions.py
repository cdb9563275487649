"""The decisions of an op's math: the values where a kink is decided (where's condition, relu's,
abs's, maximum's and minimum's arguments, a row max's or min's), which its backward decides again
on values it computes again. Both sides must round those values alike, or an element within a
rounding of the kink goes the other way in the backward, its whole gradient with it."""

from __future__ import annotations

import ast

from .expressions import written_out

_DECIDING = ("relu", "abs", "maximum", "minimum")
# Reductions that decide on their argument (their backward finds the elements equal to them).
DECIDING_REDUCTIONS = ("max", "min")
# Functions whose value is one of their arguments' as it is: they compute nothing to round.
_PASSING = ("detach", *_DECIDING, *DECIDING_REDUCTIONS)


def decision_operands(tree: ast.AST) -> list[ast.expr]:
    """The operands of every decision in `tree`: both sides of where's comparison, the arguments
    of relu, abs, maximum, minimum, max and min."""
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        if node.func.id == "where":
            condition = node.args[0]
            found += [condition.left, *condition.comparators] if isinstance(condition, ast.Compare) else [condition]
        elif node.func.id in _DECIDING + DECIDING_REDUCTIONS:
            found += list(node.args)
    return found


def _rounds_a_product(node: ast.AST) -> bool:
    """Whether `node` ends in a product, a quotient or a function a compiler may compute with one."""
    while isinstance(node, ast.UnaryOp):
        node = node.operand
    if isinstance(node, ast.BinOp):
        return isinstance(node.op, (ast.Mult, ast.Div, ast.Pow))
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id not in _PASSING


def contractible(tree: ast.AST) -> bool:
    """Whether computing `tree` adds or subtracts a product (or a function's value): a compiler
    may fuse the two into one FMA, rounded once, in one kernel and not in another."""
    return any(isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub))
               and (_rounds_a_product(node.left) or _rounds_a_product(node.right)) for node in ast.walk(tree))


def decides_on_fused_math(values: list[tuple[str, ast.AST]]) -> bool:
    """Whether a decision of `values` ((name, tree), in order: steps, then outputs) reads a value
    whose computation a compiler may contract (contractible): the kernels of such an op are
    compiled without FP fusion (Triton's enable_fp_fusion), so that the forward's kernel and the
    backward's round it alike. Measured on the H200: a float16 backward looping on one warp fused
    `x * w - mean(x * w)` where the pass that found the row's max had not, and lost the max's
    gradient (bench/results/h200/fp_fusion/)."""
    defined = dict(values)
    return any(contractible(written_out(operand, defined))
               for _, tree in values for operand in decision_operands(tree))
