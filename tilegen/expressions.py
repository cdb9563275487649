"""The spec expression language: parsed with `ast`, checked node by node, re-emitted.

An expression is untrusted text. It is parsed, every node is checked against a
closed allow-list, and two programs are emitted from the checked tree with
`ast.unparse`: Triton code for the kernel and PyTorch code for the test oracle.
The raw string never reaches a template.
"""

from __future__ import annotations

import ast
import copy
import math
import struct
from dataclasses import dataclass
from typing import Callable

from .categories import BOOL, FLOAT, FLOAT_ONLY, INT, category_of, int_scalars_met

MAX_EXPRESSION_CHARS = 2000
MAX_NODES = 400
MAX_DEPTH = 40
MAX_LITERAL = 1e30
# The one named number: infinity (`where(keep, x, -inf)`: a masked element that no max picks and
# whose exp is 0), reserved as a value name.
INFINITY = "inf"
INTEGER_POWERS = range(1, 9)
# The name a backward's math in PyTorch's ops (differentiated eager code) holds its math's dtype
# in: float64 where a tensor it reads is, else the spec's compute dtype (rt.in_precision).
MATH_DTYPE = "_math"


@dataclass(frozen=True)
class Function:
    """One callable of the language: its arity and how it lowers to Triton and to PyTorch."""

    arity: int
    triton: str  # a format string over {0}, {1}, ... (already-emitted argument source)
    torch: str


# Each lowering reads like the code it emits; `{0}` is the first argument.
FUNCTIONS: dict[str, Function] = {
    "where": Function(3, "tl.where({0}, {1}, {2})", "torch.where({0}, {1}, {2})"),
    "maximum": Function(2, "tl.maximum({0}, {1}, propagate_nan=tl.PropagateNan.ALL)", "torch.maximum({0}, {1})"),
    "minimum": Function(2, "tl.minimum({0}, {1}, propagate_nan=tl.PropagateNan.ALL)", "torch.minimum({0}, {1})"),
    "abs": Function(1, "tl.abs({0})", "torch.abs({0})"),
    "exp": Function(1, "tl.exp({0})", "torch.exp({0})"),
    "log": Function(1, "tl.log({0})", "torch.log({0})"),
    "sqrt": Function(1, "tl.sqrt({0})", "torch.sqrt({0})"),
    "rsqrt": Function(1, "tl.rsqrt({0})", "torch.rsqrt({0})"),
    "sin": Function(1, "tl.sin({0})", "torch.sin({0})"),
    "cos": Function(1, "tl.cos({0})", "torch.cos({0})"),
    "erf": Function(1, "tl.erf({0})", "torch.erf({0})"),
    "sigmoid": Function(1, "tl.sigmoid({0})", "torch.sigmoid({0})"),
    # tilegen.runtime.kernel_math's: Triton's portable ops have no tanh accurate near 0.
    "tanh": Function(1, "precise_tanh({0})", "torch.tanh({0})"),
    # relu keeps NaN, as torch.relu does (a plain `x > 0` test would turn NaN into 0).
    "relu": Function(1, "tl.where(({0}) != ({0}), ({0}), tl.where(({0}) > 0, ({0}), 0.0))",
                     "torch.relu({0})"),
    "silu": Function(1, "(({0}) * tl.sigmoid({0}))", "torch.nn.functional.silu({0})"),
    # The exact (erf) GELU, PyTorch's default.
    "gelu": Function(1, "(0.5 * ({0}) * (1.0 + tl.erf(({0}) * 0.7071067811865476)))",
                     "torch.nn.functional.gelu({0})"),
    # Its argument's value, through which no gradient flows (Tensor.detach): for a value the
    # result does not depend on, such as the max a softmax subtracts. (as_tensor: a scalar's
    # argument may be a Python number in eager code.)
    "detach": Function(1, "({0})", "torch.as_tensor({0}).detach()"),
}

# Row reductions (kind: reduction): a value per row from an expression along it. They never reach
# Triton as calls: the reduction lowering (rows.py) computes each into a name first.
REDUCTIONS: dict[str, Function] = {
    "sum": Function(1, "", "{0}.sum(-1, keepdim=True)"),
    "mean": Function(1, "", "{0}.mean(-1, keepdim=True)"),
    "max": Function(1, "", "{0}.amax(-1, keepdim=True)"),
    "min": Function(1, "", "{0}.amin(-1, keepdim=True)"),
}
# PyTorch's own row ops, for the `reference` (the test oracle and the benchmark's eager
# counterpart) of a reduction op only: a kernel never computes them.
ORACLES: dict[str, Function] = {
    "softmax": Function(1, "", "torch.softmax({0}, -1)"),
    "log_softmax": Function(1, "", "torch.log_softmax({0}, -1)"),
    "rms_norm": Function(3, "", "torch.nn.functional.rms_norm({0}, {0}.shape[-1:], {1}, float({2}))"),
    "layer_norm": Function(4, "", "torch.nn.functional.layer_norm({0}, {0}.shape[-1:], {1}, {2}, float({3}))"),
}
_EVERY_FUNCTION = {**FUNCTIONS, **REDUCTIONS, **ORACLES}

_BINARY = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Pow: "**"}
_COMPARE = {ast.Gt: ">", ast.GtE: ">=", ast.Lt: "<", ast.LtE: "<=", ast.Eq: "==", ast.NotEq: "!="}

# Python's other operators and constructs, named as a spec author writes them (an error names
# what was written, not the parser's node class).
_REFUSED_OPERATORS = {
    ast.FloorDiv: "'//'", ast.Mod: "'%'", ast.MatMult: "'@'", ast.BitAnd: "'&'", ast.BitOr: "'|'",
    ast.BitXor: "'^'", ast.LShift: "'<<'", ast.RShift: "'>>'", ast.Invert: "'~'", ast.Not: "'not'",
    ast.And: "'and'", ast.Or: "'or'", ast.Is: "'is'", ast.IsNot: "'is not'", ast.In: "'in'",
    ast.NotIn: "'not in'",
}
# What a refused logical operator is written as in the language: of two bools + is or and * is
# and; a comparison stands only as where()'s condition, so two of them nest.
_AND = "of two bools write m * n; of two conditions nest where(): where(p, where(q, x, y), y)"
_OR = "of two bools write m + n; of two conditions nest where(): where(p, x, where(q, x, y))"
_NOT = "of a bool write m == 0, or swap where()'s branches"
_LOGIC_SPELLINGS = {ast.BitAnd: _AND, ast.And: _AND, ast.BitOr: _OR, ast.Or: _OR, ast.BitXor: "of two bools write m != n",
                    ast.Invert: _NOT, ast.Not: _NOT}
_REFUSED_CONSTRUCTS = {
    ast.IfExp: "a conditional expression (a if c else b: write where(c, a, b))",
    ast.Subscript: "indexing (x[...])", ast.Attribute: "an attribute (x.name)", ast.Lambda: "a lambda",
    ast.List: "a list", ast.Tuple: "a tuple", ast.Set: "a set", ast.Dict: "a dict",
    ast.JoinedStr: "an f-string", ast.ListComp: "a comprehension", ast.SetComp: "a comprehension",
    ast.DictComp: "a comprehension", ast.GeneratorExp: "a comprehension",
    ast.NamedExpr: "an assignment (:=)", ast.Starred: "a starred argument",
}


def _allowed(functions) -> str:
    return ("numbers, inf, declared names, + - * / ** (integer power 1..8), unary -, one comparison "
            "(where()'s first argument or a bool output's whole expression), and calls to " + ", ".join(sorted(functions)))


_ALLOWED = _allowed(FUNCTIONS)


class ExpressionError(ValueError):
    """A rejected expression; `allowed` says what the language accepts. `others` holds further
    independent problems of the same expression (each unknown name or function once)."""

    def __init__(self, message: str, allowed: str = _ALLOWED, others: tuple["ExpressionError", ...] = (),
                 unknown_name: str | None = None):
        super().__init__(message)
        self.message = message
        self.allowed = allowed
        self.others = others
        self.unknown_name = unknown_name  # the name, where the problem is a name not declared

    def all(self) -> list["ExpressionError"]:
        return [self, *self.others]


@dataclass(frozen=True)
class Expression:
    """A checked expression: the names it reads, and its two emitted forms."""

    source: str
    tree: ast.Expression
    names: tuple[str, ...]

    def renamed(self, mapping: dict[str, str]) -> "Expression":
        """This expression reading mapping[name] for each name it reads (function names stay)."""
        if all(mapping.get(name, name) == name for name in self.names):
            return self
        tree = copy.deepcopy(self.tree)
        for node in value_name_nodes(tree):
            node.id = mapping.get(node.id, node.id)
        return Expression(self.source, tree, tuple(sorted(mapping.get(n, n) for n in self.names)))

    def sharing(self, steps: dict[str, "Expression"]) -> "Expression":
        """This expression reading a step's name wherever it repeats that step's whole expression
        (a reference `rms_norm(x + residual, ...)` beside a step `s: x + residual`): the eager
        benchmark then computes the step once, as a PyTorch user would write it."""
        shapes = {ast.dump(step.tree.body): name for name, step in steps.items()}

        class Share(ast.NodeTransformer):
            def visit(self, node):
                name = shapes.get(ast.dump(node)) if isinstance(node, ast.expr) else None
                return ast.Name(id=name, ctx=ast.Load()) if name is not None else super().visit(node)

        tree = Share().visit(copy.deepcopy(self.tree))
        if ast.dump(tree) == ast.dump(self.tree):
            return self
        return Expression(self.source, tree, tuple(sorted(value_names(tree))))

    def to_triton(self) -> str:
        return _Emitter("triton").emit(self.tree.body)

    def to_torch(self) -> str:
        """PyTorch code for the float64 test oracle (constant arguments become float64 tensors)."""
        return _Emitter("torch").emit(self.tree.body)

    def to_eager(self, scalars: frozenset[str] = frozenset()) -> str:
        """PyTorch code as a user would write it eagerly, in the tensors' own dtype (benchmarks).

        `scalars` are the names bound to Python numbers rather than tensors.
        """
        return _Emitter("eager", scalars).emit(self.tree.body)


def parse_expression(source: object, names: set[str], reductions: bool = False, oracles: bool = False) -> Expression:
    """Parse and check `source`; `names` are the identifiers it may read. `reductions` allows the
    row reductions (sum, mean, max, min: a reduction op's math), `oracles` PyTorch's row ops too
    (its reference)."""
    if isinstance(source, bool) or not isinstance(source, (str, int, float)):
        raise ExpressionError(f"expected an expression string, got {type(source).__name__}")
    text = str(source)
    if len(text) > MAX_EXPRESSION_CHARS:
        raise ExpressionError(f"expression is {len(text)} characters long",
                              f"at most {MAX_EXPRESSION_CHARS}")
    if not text.strip():
        raise ExpressionError("expression is empty")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise ExpressionError(f"invalid syntax: {exc.msg}") from None
    except (RecursionError, MemoryError, ValueError):
        raise ExpressionError("expression is nested too deeply", f"at most {MAX_DEPTH} levels") from None
    tree = _Infinity().visit(tree)
    functions = {**FUNCTIONS, **(REDUCTIONS if reductions else {}), **(ORACLES if oracles else {})}
    checker = _Checker(names, functions, text.strip())
    try:
        # A comparison may be a whole expression (a bool output's; the validator checks the output).
        checker.check(tree.body, depth=0, in_condition=True)
    except ExpressionError as exc:  # a problem that stops the check, after those noted before it
        raise ExpressionError(exc.message, exc.allowed, tuple(checker.problems)) from None
    if checker.problems:
        first, *others = checker.problems
        raise ExpressionError(first.message, first.allowed, tuple(others), first.unknown_name)
    return Expression(text, _FoldConstants().visit(tree), tuple(sorted(checker.used)))


class _Infinity(ast.NodeTransformer):
    """`inf` (the language's one named number; `-inf` is its negation) as a float constant,
    marked so that the checker tells it from a literal too large for a float (`1e400`)."""

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id != INFINITY:
            return node
        constant = ast.copy_location(ast.Constant(float("inf")), node)
        constant.infinity = True
        return constant


class _Checker:
    def __init__(self, names: set[str], functions: dict[str, Function] = FUNCTIONS, text: str = ""):
        self.names = names
        self.text = text  # the source, to quote a literal as written (1e400, not inf)
        self.functions = functions
        self.allowed = _allowed(functions)
        self.reducing: str | None = None  # the reduction whose argument is being checked
        self.used: set[str] = set()
        self.count = 0
        # Unknown names and functions are independent of each other: all are reported, each once.
        # Other problems stop the check at once.
        self.problems: list[ExpressionError] = []

    def note(self, problem: ExpressionError) -> None:
        if all(p.message != problem.message for p in self.problems):
            self.problems.append(problem)

    def check(self, node: ast.AST, depth: int, in_condition: bool) -> None:
        self.count += 1
        if self.count > MAX_NODES:
            raise ExpressionError(f"expression has more than {MAX_NODES} nodes", self.allowed)
        if depth > MAX_DEPTH:
            raise ExpressionError("expression is nested too deeply", f"at most {MAX_DEPTH} levels")
        if isinstance(node, ast.Constant):
            value = node.value
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ExpressionError(f"literal {value!r} is not a number", self.allowed)
            if getattr(node, "infinity", False):
                return
            if abs(value) > MAX_LITERAL or value != value:
                written = ast.get_source_segment(self.text, node) or repr(value)
                raise ExpressionError(f"literal {written} is out of range", f"|x| <= {MAX_LITERAL:g}, or inf")
            return
        if isinstance(node, ast.Name):
            if node.id.startswith("_"):
                raise ExpressionError(f"name {node.id!r} is not allowed (underscore names are reserved)", self.allowed)
            if node.id not in self.names:
                known = ", ".join(sorted(self.names)) or "none"
                self.note(ExpressionError(f"unknown name {node.id!r}", f"declared names: {known}", unknown_name=node.id))
                return
            self.used.add(node.id)
            return
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            self.check(node.operand, depth + 1, False)
            return
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            if isinstance(node.op, ast.Pow):
                exponent = node.right
                if not (isinstance(exponent, ast.Constant) and type(exponent.value) is int
                        and exponent.value in INTEGER_POWERS):
                    raise ExpressionError("the exponent of ** must be an integer literal from 1 to 8",
                                          "use sqrt() or exp()/log() for other powers")
            self.check(node.left, depth + 1, False)
            self.check(node.right, depth + 1, False)
            if isinstance(node.op, ast.Div) and _constant_value(node.right) == 0:
                raise ExpressionError("division by a constant zero", "a divisor that is not the constant 0")
            return
        if isinstance(node, ast.Compare):
            if not in_condition:
                raise ExpressionError("a comparison may only be the first argument of where(), or a bool "
                                      "output's whole expression")
            refused = [op for op in node.ops if type(op) in _REFUSED_OPERATORS]
            if refused:
                raise ExpressionError(_refused_operator(type(refused[0])), self.allowed)
            if len(node.ops) != 1:
                raise ExpressionError("use one comparison (a > b), not a chain", self.allowed)
            self.check(node.left, depth + 1, False)
            self.check(node.comparators[0], depth + 1, False)
            return
        if isinstance(node, ast.Call):
            func = node.func
            if not isinstance(func, ast.Name):
                raise ExpressionError("only plain function calls are allowed", self.allowed)
            if func.id == "float":  # float("-inf"), as Python writes it
                raise ExpressionError("function 'float' is not allowed: write numbers as literals, and "
                                      "infinity as inf (-inf)", self.allowed)
            if func.id not in self.functions:
                what = "is PyTorch's own row op, allowed in a reduction's reference only: write its math in " \
                    "steps" if func.id in ORACLES else "is not allowed"
                self.note(ExpressionError(f"function {func.id!r} {what}", self.allowed))
                for name in (n for arg in node.args for n in value_name_nodes(arg)):
                    self.check(name, depth + 1, in_condition=False)  # its arguments' names still count
                return
            if node.keywords:
                raise ExpressionError(f"{func.id}() takes no keyword arguments", self.allowed)
            spec = self.functions[func.id]
            if func.id in REDUCTIONS:
                self.check_reduction(node, depth)
                return
            if len(node.args) != spec.arity:
                raise ExpressionError(f"{func.id}() takes {spec.arity} argument(s), got {len(node.args)}", self.allowed)
            constant = not any(value_names(arg) for arg in node.args)
            if constant and func.id not in _FOLDED:
                raise ExpressionError(f"{func.id}() of constants only", "write its value as a number")
            for index, arg in enumerate(node.args):
                if isinstance(arg, ast.Starred):
                    raise ExpressionError("starred arguments are not allowed", self.allowed)
                self.check(arg, depth + 1, in_condition=(func.id == "where" and index == 0))
            if constant:  # (folded into its number after the check: _FoldConstants)
                value = _constant_value(node)
                if value is None:
                    raise ExpressionError(f"{func.id}() of constants has no finite value here",
                                          f"a constant argument in {func.id}()'s domain")
                if abs(value) > MAX_LITERAL:
                    raise ExpressionError(f"{func.id}() of constants is out of range ({value:g})", f"|x| <= {MAX_LITERAL:g}")
            return
        raise ExpressionError(_refusal(node), self.allowed)

    def check_reduction(self, node: ast.Call, depth: int) -> None:
        name = node.func.id
        if self.reducing is not None:
            raise ExpressionError(f"{name}() inside {self.reducing}(): a reduction inside a reduction",
                                  "compute the inner one as a step of its own and use its name")
        if node.keywords or len(node.args) != 1 or isinstance(node.args[0], ast.Starred):
            raise ExpressionError(f"{name}() takes 1 argument, the values along the row", self.allowed)
        self.reducing = name
        try:
            self.check(node.args[0], depth + 1, in_condition=False)
        finally:
            self.reducing = None


def reductions_in(expression: "Expression") -> list[str]:
    """The names of the row reductions `expression` calls, outermost first."""
    return [node.func.id for node in ast.walk(expression.tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in REDUCTIONS]


def assignments(outputs: list[tuple[str, "Expression"]], target: str,
                scalars: frozenset[str] = frozenset(), temp_prefix: str = "_t", kinds: dict | None = None,
                differentiated: bool = False) -> list[str]:
    """The lines that compute each output (`name = code`) for `target` ("triton", "torch" for the
    float64 oracle, "eager" for the benchmark). A subexpression that the emitted code would
    write more than once (the argument of relu, silu or gelu, the base of a power) is bound once
    to a temporary `<temp_prefix><i>` (spec names cannot start with an underscore), shared by every output
    that computes it; so the emitted size grows with the expression's, never exponentially.
    `kinds` (name -> categories.Kind) gives the kinds of number the names hold where some are not
    float: Triton code then spells relu for integers as it is for them, and writes the int
    literals of int math as ints (int_math_literals). `differentiated`: eager code that autograd
    differentiates again (a backward's math, for a second derivative or torch.func), where each
    function keeps its own gradient (_Emitter)."""
    temps: dict[str, str] = {}
    lines: list[str] = []
    scalars = set(scalars)

    def bind(code: str) -> str:
        name = temps.get(code)
        if name is None:
            name = temps[code] = f"{temp_prefix}{len(temps)}"
            lines.append(f"{name} = {tidy(code)}")
        return name

    for name, expression in outputs:
        int_math = int_math_literals(expression.tree.body, kinds, name) if kinds is not None else frozenset()
        code = _Emitter(target, frozenset(scalars), bind, kinds, int_math, differentiated).emit(expression.tree.body)
        lines.append(f"{name} = {tidy(code)}")
        if set(expression.names) <= scalars:
            # A step of scalars alone (a derivative's shared `-alpha`) is a number in eager code
            # too: the steps that read it take it as one (a clamp's bound, not a tensor argument).
            scalars.add(name)
    return lines


def int_math_literals(tree: ast.AST, kinds: dict, result: str) -> frozenset[int]:
    """The magnitudes of the int literals of `tree` (computing `result`) that take part in int
    math: they meet int tensors (categories.int_scalars_met), or are ints alone stored into the
    result. The others meet float math, as floats."""
    return frozenset(abs(value) for value, met in int_scalars_met(tree, kinds, result=result).items()
                     if isinstance(value, int) and met)


def _repeats(template: str) -> bool:
    return template.count("{0}") > 1


class _Emitter:
    """Emits checked trees; only node kinds the checker accepted can reach it. With `bind`, an
    operand the emitted code would repeat is bound to a temporary first (see assignments)."""

    def __init__(self, target: str, scalars: frozenset[str] = frozenset(),
                 bind: Callable[[str], str] | None = None, kinds: dict | None = None,
                 int_math: frozenset[int] = frozenset(), differentiated: bool = False):
        self.target = target
        self.scalars = scalars
        self.bind = bind
        self.kinds = kinds
        self.int_math = int_math  # int literals (magnitudes) of int math: int_math_literals
        self.differentiated = differentiated  # (assignments)

    def _is_integer(self, node: ast.AST) -> bool:
        return self.kinds is not None and category_of(node, self.kinds) == INT

    def _number_dtype(self, node: ast.AST, function: str) -> str:
        """The dtype argument of a 0-dim tensor holding the Python number `node` computes for
        `function`: float64 for a float or a float-only function (torch.tensor's default would
        round to float32), none for an int or a bool (a comparison), whose own kind torch.tensor
        keeps."""
        exact = isinstance(node, ast.Compare) or (self.kinds is not None and category_of(node, self.kinds) != FLOAT)
        return "" if exact and function not in FLOAT_ONLY else ", dtype=torch.float64"

    def _tensor_dtype(self, node: ast.AST, call: ast.Call) -> str:
        """The dtype argument of the oracle's 0-dim tensor of the constant `node`, an argument of
        `call`: none for an int literal of int math (int64, exact) and for a comparison (a bool:
        where()'s condition on numbers alone); float32 for a float whose neighbours in the call
        are int or bool tensors' values (`where(m, 0.1, j)`, `maximum(j, 0.1)`): PyTorch takes a
        Python float beside those in its default dtype, and so do the kernel (Triton's float
        literal) and the eager code, as in `j * 0.1`; float64 for the others."""
        if isinstance(node, ast.Compare):
            return ""
        literal = node.operand if isinstance(node, ast.UnaryOp) else node
        if isinstance(literal, ast.Constant) and type(literal.value) is int and abs(literal.value) in self.int_math:
            return ""
        neighbours = [arg for arg in _values(call) if arg is not node]
        if self.kinds is not None and _float_valued(node) and neighbours and all(
                self._reads_tensors(arg) and category_of(arg, self.kinds) in (INT, BOOL) for arg in neighbours):
            return ", dtype=torch.float32"
        return ", dtype=torch.float64"

    def _number_typed_by_the_math(self, call: ast.Call) -> int | None:
        """The index of the argument of a where(), maximum() or minimum() call that Triton code
        gives the math's dtype (`compute`, which every kernel's math defines), or None. Triton
        types a float literal float32 where no tensor of the call gives it a type: beside another
        literal, a bool or an int scalar (an int kernel argument). Where the call's values read no
        tensor, they are numbers in the math's dtype (docs/spec.md), so the first float number is
        made a 0-d tensor of it, which takes the others along exactly: in float64 math 0.1 would
        be rounded to float32, and in an op with int or bool tensors even a float32 one (0.5) would make
        its int neighbour's math float32 (`where(x > 0, n, 0.5)` beside an int64 j)."""
        values = _values(call)
        if call.func.id not in ("where", "maximum", "minimum") or any(self._reads_tensors(v) for v in values):
            return None
        first = len(call.args) - len(values)
        numbers = [index for index, v in enumerate(values, first) if not value_names(v) and _float_valued(v)]
        int_tensors = self.kinds is not None and any(k.category != FLOAT and not k.weak for k in self.kinds.values())
        if numbers and (int_tensors or _rounded_by_float32(values)):
            return numbers[0]
        return None

    def _branch_typed_by_the_math(self, call: ast.Call) -> int | None:
        """The index of where()'s first branch that eager code makes a 0-d tensor of the math's
        dtype, or None: where both branches are numbers and scalars alone (the condition reads
        tensors), one of them a float, they are numbers in the math's dtype (docs/spec.md), as the
        kernels compute them (_number_typed_by_the_math)."""
        branches = call.args[1:]
        if any(_reads_names(branch, self.scalars) for branch in branches):
            return None
        floats = [index for index, branch in enumerate(branches, 1)
                  if (category_of(branch, self.kinds) == FLOAT if self.kinds is not None else _float_valued(branch))]
        return floats[0] if floats else None

    def _reads_tensors(self, node: ast.AST) -> bool:
        """Whether `node` reads a tensor's values, not only numbers and scalars (Python numbers
        in eager code, the kernel's arguments: `kinds` says which names are scalars, weak)."""
        names = value_names(node) - self.scalars
        return any(self.kinds is None or name not in self.kinds or not self.kinds[name].weak for name in names)

    def _division(self, node: ast.BinOp, left: str, right: str) -> tuple[str, str]:
        """Triton divides a bool (int1) by an int, or an int by a bool, not at all (their
        signedness differs); PyTorch's true division takes the bool as its 1 or 0, so the bool
        side is made an int32 first (`flag / j`)."""
        if self.kinds is None:
            return left, right
        categories = [category_of(side, self.kinds) for side in (node.left, node.right)]
        if sorted(categories) != sorted([BOOL, INT]):
            return left, right
        return tuple(f"({code}).to(tl.int32)" if kind == BOOL else code
                     for code, kind in zip((left, right), categories))

    def _operand(self, node: ast.AST, repeated: bool) -> str:
        """`node` emitted, or the temporary bound to it where the code repeats it."""
        code = self.emit(node)
        if repeated and self.bind is not None and not isinstance(node, (ast.Name, ast.Constant)):
            return self.bind(code)
        return code

    def emit(self, node: ast.AST) -> str:
        if isinstance(node, ast.Constant):
            value = node.value
            # Eager code writes an int as an int, as a user would: PyTorch keeps int math int
            # (a * 2 + 1 on int32 stays int32) and takes it as a float beside floats.
            if self.target == "eager" and isinstance(value, int) and -2**63 <= value < 2**63:
                return repr(value)
            # Int math (an int literal meeting int tensors) is exact in kernels and the oracle, as
            # PyTorch's: an int in the oracle (beside its int64 tensors), in Triton one of 32 bits
            # or an int64 (a bare one past 32 bits is typed uint32 or int64 by its value: where()
            # of 3000000000 and -5 would be a uint32). Float math takes literals as floats (the
            # oracle's float64; Triton's float32 beside float32 tensors), and so do kernels any int
            # that fits 32 bits, which Triton promotes exactly.
            if isinstance(value, int) and abs(value) in self.int_math:
                if self.target == "triton" and not -2**31 <= value < 2**31:
                    return f"tl.full([], {value!r}, tl.int64)"
                return repr(value)
            if self.target == "triton" and isinstance(value, int) and -2**31 <= value < 2**31:
                return repr(value)
            if value == float("inf"):  # (Python, Triton and PyTorch code alike)
                return 'float("inf")'
            return repr(float(value))
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.UnaryOp):
            operand = self.emit(node.operand)
            return f"(-{operand})" if isinstance(node.op, ast.USub) else operand
        if isinstance(node, ast.BinOp):
            if isinstance(node.op, ast.Pow):
                left = self._operand(node.left, repeated=node.right.value > 1)
                return "(" + " * ".join([f"({left})"] * node.right.value) + ")"
            left, right = self.emit(node.left), self.emit(node.right)
            if self.target == "triton" and isinstance(node.op, ast.Div):
                left, right = self._division(node, left, right)
            return f"({left} {_BINARY[type(node.op)]} {right})"
        if isinstance(node, ast.Compare):
            return f"({self.emit(node.left)} {_COMPARE[type(node.ops[0])]} {self.emit(node.comparators[0])})"
        if isinstance(node, ast.Call):
            spec = _EVERY_FUNCTION[node.func.id]
            if self.target == "triton":
                assert node.func.id in FUNCTIONS, f"{node.func.id}() reaches Triton as a call"
                if node.func.id == "relu" and self._is_integer(node.args[0]):
                    return f"tl.maximum({self.emit(node.args[0])}, 0)"  # no NaN to keep, and an int 0
                typed = self._number_typed_by_the_math(node)
                return spec.triton.format(*(f"tl.full([], {self.emit(arg)}, compute)" if index == typed
                                            else self._operand(arg, repeated=_repeats(spec.triton) and index == 0)
                                            for index, arg in enumerate(node.args)))
            name = node.func.id
            if self.target == "eager" and not _reads_names(node, self.scalars):
                # A function of Python numbers alone (sqrt(eps)): PyTorch's functions take
                # tensors, so it runs on 0-dim ones (float64 for a float, else the number's own
                # kind) and hands its number back, which the math around it takes as a scalar.
                return spec.torch.format(*(f"torch.tensor({self.emit(arg)}{self._number_dtype(arg, name)})"
                                           for arg in node.args)) + ".item()"
            if self.target == "eager" and name == "where" and not _reads_names(node.args[0], self.scalars):
                # A condition on Python numbers alone (alpha > 0): torch.where takes a tensor,
                # made on the device of a tensor the branches read.
                tensor = min(value_names(node) - self.scalars)
                condition = f"torch.tensor({self.emit(node.args[0])}, device={tensor}.device)"
                return spec.torch.format(condition, *(self.emit(arg) for arg in node.args[1:]))
            if self.target == "eager" and self.differentiated and name == "where":
                typed = self._branch_typed_by_the_math(node)
                if typed is not None:
                    # torch.where makes Python numbers a tensor of the default dtype, float32: a
                    # float64 op's derivative where(x > 0, s, -s) would lose s's digits, where
                    # the kernels take both in the math's dtype.
                    tensor = min(value_names(node.args[0]) - self.scalars)
                    return spec.torch.format(*(f"torch.full((), {self.emit(arg)}, dtype={MATH_DTYPE}, device={tensor}.device)"
                                               if index == typed else self.emit(arg) for index, arg in enumerate(node.args)))
            if self.target == "eager":
                constant = [not _reads_names(arg, self.scalars) for arg in node.args]
                # Eager code keeps Python scalars, where PyTorch takes them, so no tensor is made per call.
                # (An argument the call repeats, a norm's input for its shape, is computed once.)
                args = [self._operand(arg, repeated=_repeats(spec.torch) and index == 0)
                        for index, arg in enumerate(node.args)]
                if name in ("maximum", "minimum") and any(constant):
                    tensor, scalar = (args[1], args[0]) if constant[0] else (args[0], args[1])
                    if self.kinds is not None and all(category_of(arg, self.kinds) == BOOL for arg in node.args):
                        # Of bools, an or/and (PyTorch's clamp takes no bool tensor).
                        return f"({tensor} {'|' if name == 'maximum' else '&'} {scalar})"
                    if self.differentiated and not self._is_integer(node.args[1 if constant[0] else 0]):
                        # clamp's gradient differs from maximum's at a tie (all of it, not half)
                        # and at NaN (none, not all): the bound as a 0-dim float64 tensor, which
                        # leaves the result in the tensor's dtype, as the number would.
                        return f"torch.{name}({tensor}, torch.tensor({scalar}, dtype=torch.float64))"
                    bound = "min" if name == "maximum" else "max"
                    return f"torch.clamp({tensor}, {bound}={scalar})"
                return spec.torch.format(*args)
            # PyTorch functions take tensors: constant arguments become float64 scalar tensors, an
            # int of int math an int64 one, a float beside int tensors alone a float32 one (_tensor_dtype).
            return spec.torch.format(*(self._operand(arg, repeated=_repeats(spec.torch) and index == 0)
                                       if _reads_names(arg) else f"torch.tensor({self.emit(arg)}{self._tensor_dtype(arg, node)})"
                                       for index, arg in enumerate(node.args)))
        raise AssertionError(f"unchecked node {type(node).__name__}")  # pragma: no cover


def _refused_operator(operator: type) -> str:
    """The error of a refused operator, with what the language writes for it where it has a way:
    `operator '|' is not allowed: of two bools write m + n; ...`."""
    spelling = _LOGIC_SPELLINGS.get(operator)
    return f"operator {_REFUSED_OPERATORS[operator]} is not allowed" + (f": {spelling}" if spelling else "")


def _refusal(node: ast.AST) -> str:
    """The error of a node the language refuses, naming what a spec author wrote: `operator '//'
    is not allowed`, `a list is not allowed`."""
    operator = type(getattr(node, "op", None))
    if operator in _REFUSED_OPERATORS:
        return _refused_operator(operator)
    return _REFUSED_CONSTRUCTS.get(type(node), f"Python's {type(node).__name__}") + " is not allowed"


def _sigmoid(v: float) -> float:
    return 1.0 / (1.0 + math.exp(-v)) if v >= 0 else math.exp(v) / (1.0 + math.exp(v))


# The functions a spec may call on constants alone, for a number it would rather not write out
# (sqrt(2.0 / 3.141592653589793), exp(-1.0)): folded into that number at the build, in float64, so
# that the kernel, the oracle and the eager code read the same literal. (Of the others, abs(-2.0) or
# maximum(0.5, 1.0) is a number written another way: refused.)
_FOLDED: dict[str, Callable[[float], float]] = {
    "exp": math.exp, "log": math.log, "sqrt": math.sqrt, "rsqrt": lambda v: 1.0 / math.sqrt(v),
    "sin": math.sin, "cos": math.cos, "erf": math.erf, "tanh": math.tanh, "sigmoid": _sigmoid,
    "silu": lambda v: v * _sigmoid(v), "gelu": lambda v: 0.5 * v * (1.0 + math.erf(v / math.sqrt(2.0))),
}


class _FoldConstants(ast.NodeTransformer):
    """Each call of a _FOLDED function on constants alone (checked: its value is finite) as its number."""

    def visit_Call(self, node: ast.Call) -> ast.AST:
        value = _constant_value(node)
        if value is None:
            return self.generic_visit(node)
        return ast.copy_location(ast.Constant(value), node)


def _constant_value(node: ast.AST) -> float | None:
    """The value of a checked subtree of numbers, arithmetic and _FOLDED functions alone, or None
    where it reads a name, calls another function, or has no finite value (a constant division
    by zero inside it, an overflow, an argument outside a function's domain)."""
    try:
        if isinstance(node, ast.Constant):
            return float(node.value)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FOLDED:
            if len(node.args) != 1 or (argument := _constant_value(node.args[0])) is None:
                return None
            value = _FOLDED[node.func.id](argument)
            return value if math.isfinite(value) else None
        if isinstance(node, ast.UnaryOp):
            value = _constant_value(node.operand)
            return None if value is None else (-value if isinstance(node.op, ast.USub) else value)
        if isinstance(node, ast.BinOp):
            left, right = _constant_value(node.left), _constant_value(node.right)
            if left is None or right is None:
                return None
            if isinstance(node.op, ast.Pow):
                return left ** node.right.value
            return {ast.Add: left + right, ast.Sub: left - right, ast.Mult: left * right}.get(
                type(node.op), left / right if right else None)
    except (OverflowError, ZeroDivisionError, ValueError):  # (ValueError: outside math's domain)
        return None
    return None


def expression_of(tree: ast.expr) -> Expression:
    """The Expression of a tree built by tilegen itself (a derivative, a row program's part),
    its source the tree unparsed."""
    wrapped = ast.fix_missing_locations(ast.Expression(tree))
    return Expression(ast.unparse(wrapped), wrapped, tuple(sorted(value_names(tree))))


def written_out(tree: ast.AST, defined: dict[str, ast.AST]) -> ast.AST:
    """`tree` (a copy) with every name in `defined` replaced by its tree, recursively: a value
    written out down to the names nothing defines (inputs, scalars)."""
    class WriteOut(ast.NodeTransformer):
        def visit_Name(self, node):
            return self.visit(copy.deepcopy(defined[node.id])) if node.id in defined else node

    return ast.fix_missing_locations(WriteOut().visit(copy.deepcopy(tree)))


def value_name_nodes(tree: ast.AST) -> list[ast.Name]:
    """The Name nodes of `tree` that read values: all but the functions it calls."""
    functions = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    return [node for node in ast.walk(tree) if isinstance(node, ast.Name) and id(node) not in functions]


def value_names(tree: ast.AST) -> set[str]:
    """The names of the values `tree` reads (not the functions it calls)."""
    return {node.id for node in value_name_nodes(tree)}


def _reads_names(node: ast.AST, ignoring: frozenset[str] = frozenset()) -> bool:
    return bool(value_names(node) - ignoring)


def _values(call: ast.Call) -> list[ast.AST]:
    """The arguments of `call` that its result takes its values from: where()'s two branches,
    every argument of another function."""
    return call.args[1:] if call.func.id == "where" else call.args


def _rounded_by_float32(nodes) -> bool:
    """Whether `nodes` are numbers alone (no name read) of which one is no float32 (0.1, 1 / 3,
    1e30 * 1e30): Triton code takes such numbers as float32 where no tensor gives them a type."""
    values = [_constant_value(node) for node in nodes]
    floats = [value for node, value in zip(nodes, values) if _float_valued(node)]
    return None not in values and any(_as_float32(value) != value for value in floats)


def _float_valued(node: ast.AST) -> bool:
    """Whether a tree of numbers computes a float (holds one, or divides: 1 / 3), not an int."""
    return any(isinstance(n, ast.Div) or (isinstance(n, ast.Constant) and isinstance(n.value, float))
               for n in ast.walk(node))


def _as_float32(value: float) -> float | None:
    """`value` rounded to float32, or None past its range."""
    try:
        return struct.unpack("f", struct.pack("f", value))[0]
    except OverflowError:
        return None


def tidy(source: str) -> str:
    """Re-emit generated source through `ast.unparse` so it is canonical and minimal."""
    return ast.unparse(ast.parse(source, mode="eval"))
