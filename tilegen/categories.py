"""What kind of number each expression is, bool, int or float, by PyTorch's type promotion, and
the spec errors where the math is not defined for it.

PyTorch promotes by category first: bool < int < float. A tensor's category counts in full; a
Python number (a literal, a scalar) raises the category only where it is of a higher one (an int
tensor times 0.5 is float, an int tensor plus 3 stays int). Within a category the kernel and
PyTorch agree on the width: Triton promotes int32 with int64 to int64, and floats compute in the
op's precision. So the category decides the code: what is loaded as it is, what is upcast, which
spelling of relu, and whether an output can hold the result.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

BOOL, INT, FLOAT = "bool", "int", "float"
_RANK = {BOOL: 0, INT: 1, FLOAT: 2}
# Functions defined for float arguments only (PyTorch would promote an int argument to float;
# the spec says so instead, with a cast the language does not have: write `x * 1.0`).
FLOAT_ONLY = frozenset({"exp", "log", "sqrt", "rsqrt", "sin", "cos", "erf", "sigmoid", "tanh", "silu", "gelu"})
# Functions defined for numbers, not for bool values.
NUMERIC = frozenset({"abs", "relu", "maximum", "minimum"})


class CategoryError(ValueError):
    def __init__(self, message: str, allowed: str):
        super().__init__(message)
        self.message, self.allowed = message, allowed


@dataclass(frozen=True)
class Kind:
    category: str
    weak: bool  # a Python number (literal or scalar): promotes only upward


def _promote(*kinds: Kind) -> Kind:
    strong = [k for k in kinds if not k.weak]
    top = max(kinds, key=lambda k: _RANK[k.category]).category
    if strong:
        base = max(strong, key=lambda k: _RANK[k.category]).category
        return Kind(top if _RANK[top] > _RANK[base] else base, False)
    return Kind(top, True)


def category_of(tree: ast.AST, names: dict[str, Kind]) -> str:
    """The category of a checked expression tree over `names`; raises CategoryError where the
    math is not defined for its arguments."""
    return _kind(tree, names).category


def _kind(node: ast.AST, names: dict[str, Kind]) -> Kind:
    if isinstance(node, ast.Constant):
        return Kind(INT if type(node.value) is int else FLOAT, True)
    if isinstance(node, ast.Name):
        return names[node.id]
    if isinstance(node, ast.UnaryOp):
        operand = _kind(node.operand, names)
        if operand.category == BOOL and isinstance(node.op, ast.USub):
            raise CategoryError("negation of a bool value", "negate a number, or use where()")
        return operand
    if isinstance(node, ast.BinOp):
        left, right = _kind(node.left, names), _kind(node.right, names)
        if isinstance(node.op, ast.Pow):
            if left.category == BOOL:
                raise CategoryError("** of a bool value", "raise a number to a power")
            return left
        if left.category == BOOL and right.category == BOOL:
            symbol = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}[type(node.op)]
            raise CategoryError(f"{symbol} of two bool values", "compute on numbers, or select with where()")
        if isinstance(node.op, ast.Div):  # true division, as in PyTorch
            return Kind(FLOAT, left.weak and right.weak)
        return _promote(left, right)
    if isinstance(node, ast.Compare):
        _promote(_kind(node.left, names), _kind(node.comparators[0], names))
        return Kind(BOOL, False)
    if isinstance(node, ast.Call):
        name = node.func.id
        args = [_kind(arg, names) for arg in node.args]
        if name == "where":
            if args[0].category != BOOL:
                raise CategoryError(f"the condition of where() is {args[0].category}, not bool",
                                    "a comparison (x > 0) or a bool input")
            return _promote(args[1], args[2])
        if name in FLOAT_ONLY:
            for arg in args:
                if arg.category != FLOAT:
                    article = "an" if arg.category == INT else "a"
                    raise CategoryError(f"{name}() of {article} {arg.category} value: {name}() is defined for float values",
                                        "float inputs, or an int one made float first (x * 1.0)")
            return _promote(*args)
        if name in NUMERIC:
            for arg in args:
                if arg.category == BOOL:
                    raise CategoryError(f"{name}() of a bool value", "numbers, or where() on the bool value")
            return _promote(*args)
        return _promote(*args)  # reductions and oracles: float ops, their inputs checked elsewhere
    raise AssertionError(f"unchecked node {type(node).__name__}")  # pragma: no cover


def can_hold(output: str, result: str) -> bool:
    """Whether an output of category `output` holds a result of category `result`, as PyTorch's
    out= allows: a float output any result, an int one int and bool results, a bool one bool."""
    return _RANK[output] >= _RANK[result]


def int_scalars_met(tree: ast.AST, names: dict[str, Kind], result: str | None = None) -> dict[str | int, set[str]]:
    """For each int scalar (by name) and int literal (by value) of a checked tree, the int tensors
    it is computed with: where a Python int meets an int tensor, PyTorch takes the tensor's dtype
    for it (wrapping a value past that dtype's range, or refusing it, op by op) while the kernel
    computes it in 64 bits. The wrapper refuses such a scalar value (checks.check_scalar's
    `meets`) and the validator such a literal, so that neither answer is given silently.
    `result`: a name for the output the tree computes: where the whole tree is of Python ints
    alone (`where(m, lo, hi)`), they meet the output's dtype, stored into it."""
    met: dict[str | int, set[str]] = {}

    def visit(node):
        """(kind, int scalars and literals in a weak int part, int tensors in a strong int part)."""
        if isinstance(node, ast.Constant):
            kind = _kind(node, names)
            return kind, {node.value} if kind.category == INT else set(), set()
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant) \
                and type(node.operand.value) is int:
            return Kind(INT, True), {-node.operand.value}, set()
        if isinstance(node, ast.Name):
            kind = names[node.id]
            if kind.category != INT:
                return kind, set(), set()
            return (kind, {node.id}, set()) if kind.weak else (kind, set(), {node.id})
        if isinstance(node, ast.UnaryOp):
            return visit(node.operand)
        if isinstance(node, ast.BinOp):
            if isinstance(node.op, ast.Pow):  # an exponent is not cast to the base's dtype
                visit(node.right)
                return visit(node.left)
            if isinstance(node.op, ast.Div):  # true division: float
                visit(node.left), visit(node.right)
                return Kind(FLOAT, False), set(), set()
            return combine([visit(node.left), visit(node.right)])
        if isinstance(node, ast.Compare):
            combine([visit(node.left), visit(node.comparators[0])])
            return Kind(BOOL, False), set(), set()
        if isinstance(node, ast.Call):
            name = node.func.id
            if name == "where":
                visit(node.args[0])
                return combine([visit(arg) for arg in node.args[1:]])
            if name in NUMERIC:
                return combine([visit(arg) for arg in node.args])
            for arg in node.args:
                visit(arg)
            return _kind(node, names), set(), set()
        raise AssertionError(f"unchecked node {type(node).__name__}")  # pragma: no cover

    def combine(parts):
        kind = _promote(*(part[0] for part in parts))
        scalars = set().union(*(part[1] for part in parts))
        tensors = set().union(*(part[2] for part in parts))
        if kind.category != INT:
            return kind, set(), set()
        if kind.weak:
            return kind, scalars, set()
        for scalar in scalars:
            met.setdefault(scalar, set()).update(tensors)
        return kind, set(), tensors

    kind, scalars, _ = visit(tree)
    if result is not None and kind.category == INT and kind.weak:
        for scalar in scalars:
            met.setdefault(scalar, set()).add(result)
    return met
