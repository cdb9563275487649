"""Symbolic differentiation of the expression language: the backward of an op, from its spec.

A checked expression tree becomes a graph of `Term`s (hash-consed tuples, so equal
subexpressions are one term), reverse-mode differentiation runs over that graph with one rule per
construct of the language, and the gradients come back as expressions of the same language:
the forward's emitters (Triton, the float64 oracle) emit them, through the same checks.

Conventions at non-differentiable points follow PyTorch's autograd, so gradients match it:
relu'(0) = 0 (and a NaN input passes the gradient, as threshold_backward does), abs'(0) = 0,
where() routes the gradient to the branch taken, and maximum/minimum split it evenly on a tie.
Where PyTorch selects rather than multiplies (relu, where, maximum), so does the rule, so that an
infinite gradient stays infinite where it is routed and never turns into NaN where it is not.
Scalars get no gradient; comparisons carry none.
"""

from __future__ import annotations

import ast
import math
import operator
from contextlib import contextmanager
from dataclasses import dataclass

from .categories import FLOAT
from .expressions import assignments, expression_of, int_math_literals
from .rows import ELEMENT, ROW, ROW_LENGTH, UNIFORM

# A term is a tuple: ("const", value), ("int", value), ("var", name), (operator, *terms),
# ("pow", term, n), ("call", function, *terms), ("cmp", operator, left, right). ("int", value) is
# an int literal of the spec's int math (`j - 3` of an int j): kept an int, so that the backward
# computes it as the forward does, exactly (a float 3.0 would turn j - 3 into float math, which
# rounds an int past 2**24 in float32); it never folds with the float constants. Every term is
# built by `_term`, which interns it: building a term that exists already yields that very term,
# so common subexpressions are one object, and comparing two terms compares their children by
# identity.


class Term(tuple):
    """An interned term that hashes once: a plain tuple rehashes its whole subtree on every
    lookup, through every path to a shared subterm, which grows exponentially with depth."""

    def __hash__(self):
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = self.__dict__["_hash"] = tuple.__hash__(self)
        return cached


_INTERNED: dict[Term, Term] = {}


def _term(*items) -> Term:
    term = Term(items)
    return _INTERNED.setdefault(term, term)


_COMPARE_SYMBOLS = {ast.Gt: ">", ast.GtE: ">=", ast.Lt: "<", ast.LtE: "<=", ast.Eq: "==", ast.NotEq: "!="}
_BINARY_NAMES = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div"}

ZERO, ONE = _term("const", 0.0), _term("const", 1.0)


def const(value: float) -> Term:
    return _term("const", float(value))


def var(name: str) -> Term:
    return _term("var", name)


def _is_const(term: Term, value: float | None = None) -> bool:
    return term[0] == "const" and (value is None or term[1] == value)


def _is_zero(term: Term) -> bool:
    """A literal 0, float or int."""
    return term[0] in ("const", "int") and term[1] == 0


# The names of one op's backward that hold ints or bools (an int scalar, a reduction's row length,
# a mask), set by _number_kinds, and which terms may hold such values (memo).
_NOT_FLOAT: set[str] = set()
_MAY_BE_INT: dict[Term, bool] = {}


def _may_be_int(term: Term) -> bool:
    """Whether `term` may hold an int or bool value (it may say so of one that cannot: that only
    keeps a 1.0 * that changes nothing). Where it does, a neutral float constant is no identity:
    1.0 * k is k made float, on which sqrt() is defined, as it is not on k."""
    if term[0] in ("const", "var", "cmp"):
        return term[0] == "cmp" or term[0] == "var" and term[1] in _NOT_FLOAT
    known = _MAY_BE_INT.get(term)
    if known is None:
        known = _MAY_BE_INT[term] = all(_may_be_int(operand) for operand in _operands(term))
    return known


@contextmanager
def _number_kinds(kinds: dict | None):
    """Within it, the names of `kinds` (name -> categories.Kind, Spec.number_kinds; None: no name
    known to hold ints) that hold ints or bools are the ones _may_be_int knows; restored after, so
    that one op's kinds never reach the terms of another's, nor of a later call (a build's output
    must not depend on the order its ops are lowered in)."""
    before = set(_NOT_FLOAT)
    _NOT_FLOAT.clear()
    _NOT_FLOAT.update(name for name, kind in (kinds or {}).items() if kind.category != FLOAT)
    _MAY_BE_INT.clear()
    try:
        yield
    finally:
        _NOT_FLOAT.clear()
        _NOT_FLOAT.update(before)
        _MAY_BE_INT.clear()


# Builders that simplify as they build: constants fold, and 0 and 1 drop out where they are
# neutral (x + 0, x * 1). A product with a literal zero is kept: 0 * f(a) has the gradient
# 0 * f'(a), which is NaN where f'(a) is infinite, as PyTorch computes it. A zero gradient is
# one that no path carries (a name the outputs do not read); PyTorch computes nothing there.
def add(x: Term, y: Term) -> Term:
    if _is_const(x) and _is_const(y):
        return const(x[1] + y[1])
    if _is_const(x, 0.0) and not _may_be_int(y):
        return y
    if _is_const(y, 0.0) and not _may_be_int(x):
        return x
    if y[0] == "neg":
        return sub(x, y[1])
    return _term("add", x, y)


def sub(x: Term, y: Term) -> Term:
    if _is_const(x) and _is_const(y):
        return const(x[1] - y[1])
    if _is_const(y, 0.0) and not _may_be_int(x):
        return x
    if _is_const(x, 0.0) and not _may_be_int(y):
        return neg(y)
    if y[0] == "neg":
        return add(x, y[1])
    return _term("sub", x, y)


def neg(x: Term) -> Term:
    if _is_const(x):
        return const(-x[1])
    if x[0] == "int":
        return _term("int", -x[1])
    if x[0] == "neg":
        return x[1]
    return _term("neg", x)


def mul(x: Term, y: Term) -> Term:
    if _is_const(x) and _is_const(y):
        return const(x[1] * y[1])
    if _is_const(x, 1.0) and not _may_be_int(y):
        return y
    if _is_const(y, 1.0) and not _may_be_int(x):
        return x
    if _is_const(x, -1.0) and not _may_be_int(y):
        return neg(y)
    if _is_const(y, -1.0) and not _may_be_int(x):
        return neg(x)
    if x[0] == "neg" and y[0] == "neg":
        return mul(x[1], y[1])
    if x[0] == "neg":
        return neg(mul(x[1], y))
    if y[0] == "neg":
        return neg(mul(x, y[1]))
    if _is_const(y):  # constants first: one spelling for c * x and x * c, so they share a term
        return _term("mul", y, x)
    return _term("mul", x, y)


def div(x: Term, y: Term) -> Term:
    if _is_const(x) and _is_const(y) and y[1] != 0.0:
        return const(x[1] / y[1])
    if _is_const(y, 1.0) and not _may_be_int(x):
        return x
    if x[0] == "neg":
        return neg(div(x[1], y))
    return _term("div", x, y)


def power(x: Term, n: int) -> Term:
    if n == 1:
        return x
    if _is_const(x):
        return const(x[1] ** n)
    return _term("pow", x, n)


def call(function: str, *args: Term) -> Term:
    return _term("call", function, *args)


def compare(symbol: str, left: Term, right: Term) -> Term:
    return _term("cmp", symbol, left, right)


def where(condition: Term, x: Term, y: Term) -> Term:
    if x == y:
        return x
    return _term("where", condition, x, y)


def from_tree(node: ast.AST, int_math: frozenset[int] = frozenset()) -> Term:
    """The term of a checked expression tree (`Expression.tree.body`); its int literals whose
    magnitudes `int_math` holds (expressions.int_math_literals) stay ints."""
    if isinstance(node, ast.Constant):
        if type(node.value) is int and abs(node.value) in int_math:
            return _term("int", node.value)
        return const(node.value)
    if isinstance(node, ast.Name):
        return var(node.id)
    if isinstance(node, ast.UnaryOp):
        operand = from_tree(node.operand, int_math)
        return neg(operand) if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.BinOp):
        if isinstance(node.op, ast.Pow):
            return power(from_tree(node.left, int_math), node.right.value)
        build = {"add": add, "sub": sub, "mul": mul, "div": div}[_BINARY_NAMES[type(node.op)]]
        return build(from_tree(node.left, int_math), from_tree(node.right, int_math))
    if isinstance(node, ast.Compare):
        return compare(_COMPARE_SYMBOLS[type(node.ops[0])], from_tree(node.left, int_math),
                       from_tree(node.comparators[0], int_math))
    if isinstance(node, ast.Call):
        args = [from_tree(arg, int_math) for arg in node.args]
        if node.func.id == "where":
            return where(*args)
        if node.func.id == "mean":  # the sum over the row's length, as the kernel computes it
            return div(call("sum", *args), var(ROW_LENGTH))
        return call(node.func.id, *args)
    raise AssertionError(f"unchecked node {type(node).__name__}")  # pragma: no cover


def normal_form(node: ast.AST, kinds: dict | None = None) -> str:
    """A key for the value of an expression tree: the same for trees the term builders simplify
    alike (a forward's `d * d` with d written out, and its backward's term for the same value),
    given the op's `kinds` (as differentiate's: `1.0 * k` is k made float where k is an int)."""
    with _number_kinds(kinds):
        return ast.dump(to_tree(from_tree(node)))


_SQRT_HALF = math.sqrt(0.5)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _sigmoid_slope(x: Term) -> Term:
    s = call("sigmoid", x)
    return mul(s, sub(ONE, s))


# One rule per function: the local derivative, multiplied into the incoming gradient `g`.
# Each is PyTorch's backward formula (torch/csrc/autograd/FunctionsManual.cpp, derivatives.yaml).
_SLOPES = {
    "exp": lambda x: call("exp", x),
    "rsqrt": lambda x: mul(const(-0.5), power(call("rsqrt", x), 3)),
    "sin": lambda x: call("cos", x),
    "cos": lambda x: neg(call("sin", x)),
    "erf": lambda x: mul(const(_TWO_OVER_SQRT_PI), call("exp", neg(mul(x, x)))),
    "sigmoid": _sigmoid_slope,
    "tanh": lambda x: sub(ONE, power(call("tanh", x), 2)),
    # silu'(x) = s(x) * (1 + x * (1 - s(x))), as silu_backward computes it.
    "silu": lambda x: mul(call("sigmoid", x), add(ONE, mul(x, sub(ONE, call("sigmoid", x))))),
    # gelu'(x) = Phi(x) + x * phi(x), the exact (erf) form the forward uses.
    "gelu": lambda x: add(mul(const(0.5), add(ONE, call("erf", mul(const(_SQRT_HALF), x)))),
                          mul(x, mul(const(_INV_SQRT_2PI), call("exp", mul(const(-0.5), mul(x, x)))))),
    # abs'(x) = sgn(x), with sgn(0) = sgn(NaN) = 0 as torch.sgn has them.
    "abs": lambda x: where(compare(">", x, ZERO), ONE, where(compare("<", x, ZERO), const(-1.0), ZERO)),
}


def _contributions(term: Term, g: Term) -> list[tuple[Term, Term]]:
    """(operand, its share of the gradient) for each differentiable operand of `term`, given the
    gradient `g` that reaches `term`."""
    kind = term[0]
    if kind in ("const", "int", "var", "cmp"):
        return []
    if kind == "add":
        return [(term[1], g), (term[2], g)]
    if kind == "sub":
        return [(term[1], g), (term[2], neg(g))]
    if kind == "neg":
        return [(term[1], neg(g))]
    if kind == "mul":
        x, y = term[1], term[2]
        return [(x, mul(g, y)), (y, mul(g, x))]
    if kind == "div":
        x, y = term[1], term[2]
        # d/dy as PyTorch forms it, -g * ((x / y) / y): y * y would underflow for tiny y.
        return [(x, div(g, y)), (y, neg(mul(g, div(div(x, y), y))))]
    if kind == "pow":
        x, n = term[1], term[2]
        return [(x, mul(g, mul(const(n), power(x, n - 1))))]
    if kind == "where":
        condition, x, y = term[1:]
        return [(x, where(condition, g, ZERO)), (y, where(condition, ZERO, g))]
    # A call.
    function, args = term[1], term[2:]
    if function == "relu":
        # threshold_backward: the gradient where the result is > 0 (NaN passes), else 0. Read
        # from the result, as PyTorch reads it: relu(x) <= 0 where x <= 0, NaN neither.
        return [(args[0], where(compare("<=", term, ZERO), ZERO, g))]
    if function in ("maximum", "minimum"):
        x, y = args
        # x loses where it is below y (above, for minimum); a tie splits the gradient evenly.
        losing = "<" if function == "maximum" else ">"
        winning = ">" if function == "maximum" else "<"
        half = mul(const(0.5), g)
        return [(x, where(compare("==", x, y), half, where(compare(losing, x, y), ZERO, g))),
                (y, where(compare("==", x, y), half, where(compare(winning, x, y), ZERO, g)))]
    if function == "detach":  # no gradient flows through it
        return []
    if function == "sum":  # each element of the row gets the row's gradient
        return [(args[0], g)]
    if function in ("max", "min"):
        # amax/amin's backward, PyTorch's formula: the gradient split evenly among the elements
        # equal to the result, g / count * (x == m). A row holding a NaN has a NaN result that no
        # element equals: 0 / 0 * 0, NaN over the row, as in PyTorch (a where() would give 0).
        hit = where(compare("==", args[0], term), ONE, ZERO)
        return [(args[0], mul(div(g, call("sum", hit)), hit))]
    if function == "log":  # g / x, not g * (1 / x): 1 / x overflows for tiny x where g / x need not
        return [(args[0], div(g, args[0]))]
    if function == "sqrt":
        return [(args[0], div(g, mul(const(2.0), term)))]
    return [(args[0], mul(g, _SLOPES[function](args[0])))]


def _operands(term: Term) -> tuple[Term, ...]:
    kind = term[0]
    if kind in ("const", "int", "var"):
        return ()
    if kind == "pow":
        return (term[1],)
    if kind == "call":
        return term[2:]
    if kind == "cmp":
        return term[2:]
    return term[1:]


def _postorder(roots: list[Term]) -> list[Term]:
    """Every term reachable from `roots`, each once, operands before the terms that use them
    (iterative: an expression is at most MAX_DEPTH deep, its derivative somewhat deeper)."""
    seen, order = set(), []
    for root in roots:
        stack = [(root, False)]
        while stack:
            term, expanded = stack.pop()
            if expanded:
                order.append(term)
                continue
            if term in seen:
                continue
            seen.add(term)
            stack.append((term, True))
            stack.extend((child, False) for child in reversed(_operands(term)) if child not in seen)
    return order


def _level_of(levels: dict[str, int]):
    """The level of a term (rows.py): UNIFORM for constants and names not in `levels`, ROW for a
    reduction, else the highest level among its operands."""
    memo: dict[Term, int] = {}

    def level(term: Term) -> int:
        found = memo.get(term)
        if found is None:
            if term[0] in ("const", "int"):
                found = UNIFORM
            elif term[0] == "var":
                found = levels.get(term[1], UNIFORM)
            elif term[0] == "call" and term[1] in ("sum", "max", "min"):
                found = ROW
            else:
                found = max((level(t) for t in _operands(term)), default=UNIFORM)
            memo[term] = found
        return found

    return level


def _row_sum(term: Term, level) -> Term:
    """The sum over the row of `term` (a value that varies along the row), with the factors the
    same along the row taken out of the sum: sum(a * r1 + b / r2) is sum(a) * r1 + sum(b) / r2
    when r1 and r2 are row values (each applied to its sum in the order it was to the element,
    so a division stays a division). A row program takes a sum in the pass where every value it
    reads is known; taken out of it, a row value computed late no longer holds the sum back to a
    pass of its own (LayerNorm's backward: three passes over a long row instead of four). Sums
    of the same part are one term, computed once.
    (rows._row_factors takes the factors out of one product a spec writes in a sum; the sums the
    backward builds are split here, while they are terms, before their parts are named.)"""
    total, rest = ZERO, ZERO  # rest: the parts with no element factor

    def split(t: Term) -> tuple[list[tuple[Term, bool]], Term | None]:
        """(row factors, each with whether it divides; the element part or None) of a product."""
        if level(t) != ELEMENT:
            return [(t, False)], None
        if t[0] == "mul":
            (fx, ex), (fy, ey) = split(t[1]), split(t[2])
            return fx + fy, ex if ey is None else ey if ex is None else mul(ex, ey)
        if t[0] == "div":
            fx, ex = split(t[1])
            if level(t[2]) != ELEMENT:
                return fx + [(t[2], True)], ex
            return fx, div(ONE if ex is None else ex, t[2])
        return [], t

    def parts(t: Term, negative: bool) -> None:
        nonlocal total, rest
        if level(t) == ELEMENT and t[0] in ("add", "sub"):
            parts(t[1], negative)
            parts(t[2], negative != (t[0] == "sub"))
            return
        if level(t) == ELEMENT and t[0] == "neg":
            parts(t[1], not negative)
            return
        factors, element = split(t)
        if element is None:
            rest = sub(rest, t) if negative else add(rest, t)
            return
        summed = call("sum", element)
        for factor, divides in factors:
            summed = div(summed, factor) if divides else mul(summed, factor)
        total = sub(total, summed) if negative else add(total, summed)

    parts(term, False)
    # The parts the same along the row are summed as the row's length times them (PyTorch's sum
    # over the row's axis of a value per row, its last axis 1 as eager code holds it, would take it
    # once: a per-row input's second derivatives, computed in PyTorch's ops, were 1/n of it), and
    # an empty row's sum is 0 whatever they hold (mean's share g / n is not finite there).
    if _is_const(rest, 0.0):
        return total
    return add(where(compare(">", var(ROW_LENGTH), ZERO), mul(rest, var(ROW_LENGTH)), ZERO), total)


def gradients(outputs: dict[str, Term], seeds: dict[str, Term], wrt: list[str],
              levels: dict[str, int] | None = None) -> dict[str, Term]:
    """Reverse mode: the gradient of sum(seeds[o] * outputs[o]) with respect to each name in
    `wrt` (a name that no output reads gets the constant zero).

    With `levels` (a reduction op: each name's level, rows.py), a row value read by values that
    vary along the row gets the sum over the row of their shares (one sum per row value, taken
    once every share is in); values the same for every row (scalars, constants) get none."""
    adjoint: dict[Term, Term] = {}
    along_row: dict[Term, Term] = {}  # a row value's shares that vary along the row, to be summed
    level = _level_of(levels) if levels is not None else None
    for name, term in outputs.items():
        if level is not None and level(seeds[name]) == ELEMENT and level(term) == ROW:
            # An output along the row whose value is one per row (`y: max(x)` of shape [..., N]):
            # its value gets the sum over the row of the incoming gradient.
            along_row[term] = add(along_row.get(term, ZERO), seeds[name])
        else:
            adjoint[term] = add(adjoint.get(term, ZERO), seeds[name])
    for term in reversed(_postorder(list(outputs.values()))):
        g = adjoint.get(term)
        if term in along_row:
            g = adjoint[term] = add(g if g is not None else ZERO, _row_sum(along_row[term], level))
        if g is None or _is_const(g, 0.0):
            continue
        for operand, share in _contributions(term, g):
            if level is None:
                adjoint[operand] = add(adjoint.get(operand, ZERO), share)
            elif level(operand) == UNIFORM:
                continue
            elif level(operand) == ROW and level(term) == ELEMENT:
                along_row[operand] = add(along_row.get(operand, ZERO), share)
            else:
                adjoint[operand] = add(adjoint.get(operand, ZERO), share)
    return {name: adjoint.get(var(name), ZERO) for name in wrt}


def _substituted(term: Term, defined: dict[str, Term]) -> Term:
    """`term` with each name in `defined` replaced by its term (rebuilt, so it simplifies)."""
    if not defined:
        return term
    return _rebuilt(term, lambda t: defined.get(t[1], t) if t[0] == "var" else None)


def _rebuilt(term: Term, replace) -> Term:
    """`term` rebuilt bottom-up (so it simplifies), each subterm `t` for which `replace(t)` is
    not None replaced by that."""
    memo: dict[Term, Term] = {}

    def rebuild(t: Term) -> Term:
        if t in memo:
            return memo[t]
        out = memo[t] = replace(t) or _rebuilt_parts(t, rebuild)
        return out

    return rebuild(term)


def _rebuilt_parts(t: Term, rebuild) -> Term:
    """`t` built again from its rebuilt operands."""
    kind = t[0]
    if kind in ("const", "int", "var"):
        return t
    if kind == "pow":
        return power(rebuild(t[1]), t[2])
    if kind == "cmp":
        return compare(t[1], rebuild(t[2]), rebuild(t[3]))
    if kind == "call":
        return call(t[1], *(rebuild(a) for a in t[2:]))
    if kind == "where":
        return where(*(rebuild(a) for a in t[1:]))
    return {"add": add, "sub": sub, "mul": mul, "div": div, "neg": neg}[kind](*(rebuild(a) for a in t[1:]))


def to_tree(term: Term, names: dict[Term, str] | None = None) -> ast.expr:
    """The expression tree of `term`; a term in `names` is read as that name (a shared temporary)."""
    names = names or {}
    if term in names:
        return ast.Name(names[term], ast.Load())
    kind = term[0]
    if kind in ("const", "int"):
        value = term[1]
        return ast.UnaryOp(ast.USub(), ast.Constant(-value)) if value < 0 else ast.Constant(value)
    if kind == "var":
        return ast.Name(term[1], ast.Load())
    sub_tree = lambda t: to_tree(t, names)  # noqa: E731
    if kind == "neg":
        return ast.UnaryOp(ast.USub(), sub_tree(term[1]))
    if kind in ("add", "sub", "mul", "div"):
        op = {"add": ast.Add, "sub": ast.Sub, "mul": ast.Mult, "div": ast.Div}[kind]()
        return ast.BinOp(sub_tree(term[1]), op, sub_tree(term[2]))
    if kind == "pow":
        return ast.BinOp(sub_tree(term[1]), ast.Pow(), ast.Constant(term[2]))
    if kind == "cmp":
        symbol = {v: k for k, v in _COMPARE_SYMBOLS.items()}[term[1]]
        return ast.Compare(sub_tree(term[2]), [symbol()], [sub_tree(term[3])])
    if kind == "where":
        return ast.Call(ast.Name("where", ast.Load()), [sub_tree(t) for t in term[1:]], [])
    return ast.Call(ast.Name(term[1], ast.Load()), [sub_tree(t) for t in term[2:]], [])


@dataclass(frozen=True)
class Backward:
    """The gradients of an op's math: `lines(target)` computes every gradient (named by
    `results`) from the names the forward reads and the incoming gradients (`seeds`)."""

    results: dict  # differentiable name -> the name its gradient is bound to
    seeds: dict  # output -> the name of its incoming gradient
    steps: tuple  # (name, Expression): shared temporaries, then the gradients, in order
    reads: tuple  # the forward names the gradients read (the rest need not be saved)
    zero: frozenset  # names whose gradient is identically zero
    aliases: dict  # name -> an earlier name whose gradient is the same term (computed once)
    passed: dict  # name -> the output whose incoming gradient is its gradient as it is
    decided: frozenset  # the names read that a decision reads other than by its sign (decided_beyond_sign)

    def lines(self, target: str, scalars: frozenset[str] = frozenset(), kinds: dict | None = None,
              differentiated: bool = False) -> list[str]:
        """The gradients' lines for `target` (expressions.assignments: `scalars`, `kinds` and
        `differentiated` as there)."""
        return assignments(list(self.steps), target, scalars, kinds=kinds, differentiated=differentiated)

    def computed(self) -> list[str]:
        """The names whose gradient the lines compute (not zero, an alias or an incoming gradient)."""
        return [name for name in self.results
                if name not in self.zero and name not in self.aliases and name not in self.passed]

    def readers(self) -> dict[str, tuple[str, ...]]:
        """{name read (`reads`, an incoming gradient): the differentiable names whose computed
        gradient reads it}, through the shared temporaries; an alias reads what its gradient's
        first name does. A value no gradient asked for in a call reads need not be kept for it,
        nor loaded (Gradients read_by, the kernel's gated loads)."""
        reaching: dict[str, frozenset] = {}
        for name, expression in self.steps:
            reaching[name] = frozenset().union(*(reaching.get(n, frozenset((n,))) for n in expression.names))
        computed = set(self.computed())
        by_result = {name: reaching[self.results[self.aliases.get(name, name)]] for name in self.results
                     if self.aliases.get(name, name) in computed}
        read = [*self.reads, *(s for s in self.seeds.values() if any(s in r for r in by_result.values()))]
        return {value: tuple(n for n, r in by_result.items() if value in r) for value in read}


def recorded_from(body: list, wrt: list[str], steps: list = ()) -> dict[str, frozenset]:
    """{output: the names of `wrt` it records a graph from}, for the outputs of `body` ((name,
    Expression)) as PyTorch's eager composition of the same math records them: an output reads
    a name (or a step that does) other than through detach() or a comparison (a bool). An output
    requires grad where one of those requires grad, and is a plain result otherwise (a where() of
    constants, a value of detached inputs, a count of comparisons; one read from an input that
    needs no gradient in this call), as PyTorch's would be: a loss on it alone raises. Decided by
    the expressions as written, not by their derivatives: x * 0 records a graph in PyTorch, whose
    gradient is zero."""
    reaching: dict[str, frozenset] = {name: frozenset((name,)) for name in wrt}

    def reads(node: ast.AST) -> frozenset:
        if isinstance(node, ast.Compare):
            return frozenset()
        if isinstance(node, ast.Name):
            return reaching.get(node.id, frozenset())
        if isinstance(node, ast.Call):
            children = [] if node.func.id == "detach" else node.args
        else:
            children = ast.iter_child_nodes(node)
        return frozenset().union(*(reads(child) for child in children))

    for name, expression in steps:
        reaching[name] = reads(expression.tree.body)
    return {name: reads(expression.tree.body) for name, expression in body}


def _reading_outputs(grads: dict[str, Term], outputs: dict[str, Term], avoided) -> dict[str, Term]:
    """`grads` with each output's term read as that output (a var of its name), where that way
    they read no name in `avoided` any more; else `grads` as they are. A matmul epilogue whose
    derivative needs only its result (relu, sigmoid, tanh, exp, sqrt as the last function) then
    needs no kept accumulator, as PyTorch's backward of those reads their result."""
    def names(terms):
        return {t[1] for t in _postorder(list(terms)) if t[0] == "var"}

    if not names(grads.values()) & set(avoided):
        return grads
    by_term = {}
    for name, term in outputs.items():
        if term[0] not in ("var", "const", "int"):
            by_term[term] = var(name)
            by_term.update(_threshold_condition(term, var(name)))
    rewritten = {name: _rebuilt(g, by_term.get) for name, g in grads.items()}
    if names(rewritten.values()) & set(avoided) or decided_beyond_sign(rewritten.values(), outputs):
        return grads
    return rewritten


def decided_beyond_sign(terms, names) -> frozenset:
    """The `names` that a decision of `terms` (a comparison: where's condition, relu's, abs's,
    maximum's, max's ties) reads other than as itself against 0.

    An output is kept in its own dtype, and a matmul's accumulator in its operands': rounded,
    where the forward decided on the float32 value. Rounding keeps a value's sign (but for an
    underflow to 0, where the rounded result is 0 too), so `o > 0` decides as the forward did;
    `o > 0.8`, `o + bias > 0` or `o == m` need not, and a gradient routed the other way at one
    element is off by the whole incoming gradient there (then dA = dZ @ B^T along its row)."""
    names = set(names)
    found = set()
    for term in _postorder(list(terms)):
        if term[0] != "cmp":
            continue
        left, right = term[2], term[3]
        if (left[0] == "var" and _is_zero(right)) or (right[0] == "var" and _is_zero(left)):
            continue
        found.update(t[1] for t in _postorder([left, right]) if t[0] == "var" and t[1] in names)
    return frozenset(found)


_HOLDS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le, "==": operator.eq,
          "!=": operator.ne}


def _threshold_condition(term: Term, output: Term) -> dict[Term, Term]:
    """{condition: the same condition on `output`} for an output `o = where(u > t, u, k)` (any
    comparison of u with a constant t, k a constant the comparison rejects; or `where(u > t, k,
    u)`, k one it accepts): `u > t` holds exactly where `o > t` does (a relu written as a where:
    its gradient, routed by `u > 0`, is routed by `o > 0`). NaN fails both. (A rounded o decides
    as u did against 0 only: _reading_outputs keeps the rewrite there alone, decided_beyond_sign.)"""
    if term[0] != "where" or term[1][0] != "cmp":
        return {}
    condition, chosen, other = term[1:]
    symbol, u, t = condition[1:]
    if not _is_const(t) or u[0] == "const":
        return {}
    if chosen == u and _is_const(other) and not _HOLDS[symbol](other[1], t[1]):
        return {condition: compare(symbol, output, t)}
    if other == u and _is_const(chosen) and _HOLDS[symbol](chosen[1], t[1]):
        return {condition: compare(symbol, output, t)}
    return {}


def differentiate(body: list, wrt: list[str], seed_name=lambda output: f"_g_{output}",
                  result_name=lambda name: f"_d_{name}", temp_prefix: str = "_s",
                  steps: list = (), levels: dict[str, int] | None = None, outputs_instead_of=(),
                  computed_always=(), output_levels: dict[str, int] | None = None,
                  kinds: dict | None = None) -> Backward:
    """The backward of the outputs `body` ((name, Expression) in spec order) with respect to
    the names `wrt` (the tensors; scalars are left out). Terms used more than once are bound
    once to temporaries `<temp_prefix><i>`; gradients that are the same term are computed once.

    A reduction op also passes its `steps` (named values the body reads, in order; each is
    substituted where it is read) and the `levels` of its inputs and scalars (rows.py); its
    gradients then hold row sums, and an incoming gradient passes as an input's gradient only
    where the two have the same level. `output_levels`: each output's own level where its shape
    says more than its value does (an output along the row of a value per row), which its
    incoming gradient has.

    `outputs_instead_of`: names the gradients should not read (a matmul's accumulator) where
    reading the op's outputs instead spares them (_reading_outputs); `reads` then holds those
    outputs' names.

    `computed_always`: names whose gradient the lines compute even where it is an incoming
    gradient as it is (a reduction's column inputs: the kernel sums it over the rows as it goes,
    where a sum after the kernel would read the whole gradient again).

    `kinds` (name -> categories.Kind, Spec.number_kinds): the int literals of int math stay ints
    in the gradients (from_tree), and neutral constants beside an int stay (_may_be_int)."""
    with _number_kinds(kinds):
        return _derived(body, wrt, seed_name, result_name, temp_prefix, steps, levels, outputs_instead_of,
                        computed_always, output_levels, kinds)


def _derived(body, wrt, seed_name, result_name, temp_prefix, steps, levels, outputs_instead_of, computed_always,
             output_levels, kinds) -> Backward:
    """differentiate's work, within its _number_kinds."""
    _INTERNED.clear()  # terms live for one op's backward: the table never outgrows the largest
    _INTERNED.update({ZERO: ZERO, ONE: ONE})
    defined: dict[str, Term] = {}
    def term_of(name, expression):
        int_math = int_math_literals(expression.tree.body, kinds, name) if kinds is not None else frozenset()
        return _substituted(from_tree(expression.tree.body, int_math), defined)

    for name, expression in steps:
        defined[name] = term_of(name, expression)
    outputs = {name: term_of(name, expression) for name, expression in body}
    seeds = {name: seed_name(name) for name in outputs}
    level = None
    if levels is not None:
        of_value = _level_of(levels)
        levels = {**levels, **{seeds[o]: (output_levels or {}).get(o, of_value(t)) for o, t in outputs.items()}}
        level = _level_of(levels)
    grads = gradients(outputs, {name: var(seed) for name, seed in seeds.items()}, wrt, levels)
    if outputs_instead_of:
        grads = _reading_outputs(grads, outputs, outputs_instead_of)
    results = {name: result_name(name) for name in wrt}
    zero = frozenset(name for name, term in grads.items() if _is_const(term, 0.0))
    seed_of = {var(seed): output for output, seed in seeds.items()}
    passed = {name: seed_of[grads[name]] for name in wrt if grads[name] in seed_of and name not in computed_always
              and (level is None or level(var(name)) == level(grads[name]))}
    aliases, first_of = {}, {}
    for name in wrt:
        if name in zero or name in passed:
            continue
        if grads[name] in first_of:
            aliases[name] = first_of[grads[name]]
        else:
            first_of[grads[name]] = name
    distinct = [grads[name] for name in first_of.values()]
    # Shared temporaries: every compound term read more than once, by terms or as a gradient.
    uses: dict = {}
    for term in _postorder(distinct):
        for operand in _operands(term):
            uses[operand] = uses.get(operand, 0) + 1
    for term in distinct:
        uses[term] = uses.get(term, 0) + 1
    temps: dict = {}
    steps = []
    for term in _postorder(distinct):
        if uses.get(term, 0) > 1 and term[0] not in ("const", "int", "var", "cmp"):
            steps.append((f"{temp_prefix}{len(temps)}", expression_of(to_tree(term, temps))))
            temps[term] = steps[-1][0]
    for name in first_of.values():
        steps.append((results[name], expression_of(to_tree(grads[name], temps))))
    read = set()
    for _, expression in steps:
        read.update(expression.names)
    internal = set(temps.values()) | set(results.values()) | set(seeds.values())
    reads = tuple(sorted(read - internal))
    return Backward(results, seeds, tuple(steps), reads, zero, aliases, passed, decided_beyond_sign(distinct, reads))
