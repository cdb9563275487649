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
# Functions defined for numbers, not for bool values (PyTorch refuses abs and relu of a bool tensor).
NUMERIC = frozenset({"abs", "relu"})
# Functions of their arguments' promoted kind, bools included: PyTorch's maximum and minimum of two
# bools are a logical or/and, and beside a number a bool is its 1 or 0.
PROMOTING = frozenset({"maximum", "minimum"})
# A reduction's row reductions: float math over numbers (a bool value, a comparison such as a
# step `keep: x > m`, is counted with where(): PyTorch's mean of a bool tensor is an error).
ROW_REDUCTIONS = frozenset({"sum", "mean", "max", "min"})


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
    return _Walk(names).visit(tree).kind.category


@dataclass(frozen=True)
class _Part:
    kind: Kind
    ints: frozenset = frozenset()  # a weak int part's Python ints: scalars by name, literals by value
    tensors: frozenset = frozenset()  # a strong int part's int tensors


class _Walk:
    """One walk of a tree: each node's kind of number (raising CategoryError where the math is
    not defined for it) and, in `met`, which int tensors each Python int meets (int_scalars_met)."""

    def __init__(self, names: dict[str, Kind]):
        self.names = names
        self.met: dict[str | int, set[str]] = {}

    def visit(self, node: ast.AST) -> _Part:
        if isinstance(node, ast.Constant):
            kind = Kind(INT if type(node.value) is int else FLOAT, True)
            return _Part(kind, frozenset({node.value}) if kind.category == INT else frozenset())
        if isinstance(node, ast.Name):
            kind = self.names[node.id]
            if kind.category != INT:
                return _Part(kind)
            return _Part(kind, frozenset({node.id})) if kind.weak else _Part(kind, tensors=frozenset({node.id}))
        if isinstance(node, ast.UnaryOp):
            operand = self.visit(node.operand)
            if operand.kind.category == BOOL and isinstance(node.op, ast.USub):
                raise CategoryError("negation of a bool value", "negate a number, or use where()")
            if isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant) and operand.ints:
                return _Part(operand.kind, frozenset({-node.operand.value}))  # a negative literal's value
            return operand
        if isinstance(node, ast.BinOp):
            left, right = self.visit(node.left), self.visit(node.right)
            if isinstance(node.op, ast.Pow):
                if left.kind.category == BOOL:
                    raise CategoryError("** of a bool value", "raise a number to a power")
                return left  # (an exponent is not cast to the base's dtype)
            if left.kind.category == BOOL and right.kind.category == BOOL:
                if isinstance(node.op, (ast.Add, ast.Mult)):  # PyTorch's logical or/and (see as_logic)
                    return _Part(Kind(BOOL, False))
                if isinstance(node.op, ast.Sub):
                    raise CategoryError("- of two bool values", "compute on numbers, or select with where()")
            if isinstance(node.op, ast.Sub) and BOOL in (left.kind.category, right.kind.category):
                # (PyTorch refuses it: "Subtraction ... with a bool tensor is not supported")
                raise CategoryError("- with a bool value", "select with where(): where(m, x - 1.0, x)")
            if isinstance(node.op, ast.Div):  # true division, as in PyTorch
                return _Part(Kind(FLOAT, left.kind.weak and right.kind.weak))
            return self.combine([left, right])
        if isinstance(node, ast.Compare):
            self.combine([self.visit(node.left), self.visit(node.comparators[0])])
            return _Part(Kind(BOOL, False))
        if isinstance(node, ast.Call):
            name = node.func.id
            args = [self.visit(arg) for arg in node.args]
            if name == "where":
                if args[0].kind.category != BOOL:
                    raise CategoryError(f"the condition of where() is {args[0].kind.category}, not bool",
                                        "a comparison (x > 0) or a bool input")
                return self.combine(args[1:])
            if name in FLOAT_ONLY:
                for arg in args:
                    if arg.kind.category != FLOAT:
                        article = "an" if arg.kind.category == INT else "a"
                        raise CategoryError(f"{name}() of {article} {arg.kind.category} value: {name}() is defined "
                                            "for float values", "float inputs, or an int one made float first (x * 1.0)")
                return _Part(_promote(*(arg.kind for arg in args)))
            if name in ROW_REDUCTIONS:
                if args[0].kind.category == BOOL:
                    raise CategoryError(f"{name}() of a bool value", "reduce numbers, e.g. where(keep, 1.0, 0.0)")
                return _Part(Kind(FLOAT, False))
            if name in NUMERIC:
                for arg in args:
                    if arg.kind.category == BOOL:
                        raise CategoryError(f"{name}() of a bool value", "numbers, or where() on the bool value")
                return self.combine(args)
            if name in PROMOTING:
                return self.combine(args)
            return _Part(_promote(*(arg.kind for arg in args)))  # reductions and oracles: float ops, their inputs checked elsewhere
        raise AssertionError(f"unchecked node {type(node).__name__}")  # pragma: no cover

    def combine(self, parts: list[_Part]) -> _Part:
        """The promoted part of operands computed together: where it is a strong int, the Python
        ints of its weak int operands meet the int tensors of its strong ones."""
        kind = _promote(*(part.kind for part in parts))
        if kind.category != INT:
            return _Part(kind)
        ints = frozenset().union(*(part.ints for part in parts))
        tensors = frozenset().union(*(part.tensors for part in parts))
        if kind.weak or not tensors:
            # Python ints alone, or beside bool tensors only (m * k, maximum(m, k): an int result
            # that no int tensor gives a dtype): they meet what the result meets next, or the
            # output it is stored into (int_scalars_met's `result`).
            return _Part(kind, ints)
        for value in ints:
            self.met.setdefault(value, set()).update(tensors)
        return _Part(kind, tensors=tensors)


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
    alone (`where(m, lo, hi)`), or of Python ints beside bool tensors alone (`m * k`), they meet
    the output's dtype, stored into it."""
    walk = _Walk(names)
    whole = walk.visit(tree)
    if result is not None and whole.kind.category == INT and not whole.tensors:
        for value in whole.ints:
            walk.met.setdefault(value, set()).add(result)
    return walk.met


def as_logic(tree: ast.AST, names: dict[str, Kind]) -> ast.AST:
    """A checked tree with each `+` and `*` of two bool values written as what PyTorch computes
    for them, a logical or and and: maximum(m, n) and minimum(m, n), which every emitter (Triton,
    the float64 oracle, eager PyTorch) and the derivation already spell right for bools. Written
    as they are, Triton would add two 1-bit ints modulo 2 (True + True is False)."""

    class Logic(ast.NodeTransformer):
        def visit_BinOp(self, node):
            self.generic_visit(node)  # (inner ones first: (m + n) * k reads the or as a bool)
            if isinstance(node.op, (ast.Add, ast.Mult)) and \
                    category_of(node.left, names) == BOOL == category_of(node.right, names):
                function = "maximum" if isinstance(node.op, ast.Add) else "minimum"
                return ast.copy_location(ast.Call(ast.Name(function, ast.Load()), [node.left, node.right], []), node)
            return node

    return Logic().visit(tree)
