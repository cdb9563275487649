"""The expression language: what it accepts, what it rejects, what it emits."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tilegen.expressions import FUNCTIONS, ExpressionError, parse_expression, tidy

NAMES = {"a", "b", "acc", "alpha"}


@pytest.mark.parametrize("source, triton, torch_", [
    ("a + b", "a + b", "a + b"),
    ("where(acc > 0, acc, 0)", "tl.where(acc > 0, acc, 0)",
     "torch.where(acc > 0.0, acc, torch.tensor(0.0, dtype=torch.float64))"),
    ("maximum(0, a)", "tl.maximum(0, a, propagate_nan=tl.PropagateNan.ALL)",
     "torch.maximum(torch.tensor(0.0, dtype=torch.float64), a)"),
    ("alpha * silu(a) * b", "alpha * (a * tl.sigmoid(a)) * b", "alpha * torch.nn.functional.silu(a) * b"),
    ("a ** 3", "a * a * a", "a * a * a"),
    ("-a", "-a", "-a"),
    ("gelu(acc + a)", "0.5 * (acc + a) * (1.0 + tl.erf((acc + a) * 0.7071067811865476))",
     "torch.nn.functional.gelu(acc + a)"),
    ("tanh(a)", "precise_tanh(a)", "torch.tanh(a)"),
    # A where() of numbers alone, one of them no float32: typed by the math's dtype (`compute`).
    ("where(a > 0, 0.1, 1 / 3)", "tl.where(a > 0, tl.full([], 0.1, compute), 1 / 3)",
     "torch.where(a > 0.0, torch.tensor(0.1, dtype=torch.float64), torch.tensor(1.0 / 3.0, dtype=torch.float64))"),
    ("where(a > 0, 1.0, -0.5)", "tl.where(a > 0, 1.0, -0.5)",
     "torch.where(a > 0.0, torch.tensor(1.0, dtype=torch.float64), torch.tensor(-0.5, dtype=torch.float64))"),
    # An int past 32 bits in float math is a float (3000000000 ** 3 overflows int64).
    ("a * 3000000000 ** 3", "a * (3000000000.0 * 3000000000.0 * 3000000000.0)",
     "a * (3000000000.0 * 3000000000.0 * 3000000000.0)"),
])
def test_emits_triton_and_torch(source, triton, torch_):
    expression = parse_expression(source, NAMES)
    assert tidy(expression.to_triton()) == triton
    assert tidy(expression.to_torch()) == torch_


def test_records_the_names_it_reads():
    assert parse_expression("alpha * a + 1", NAMES).names == ("a", "alpha")


def test_every_function_lowers_to_valid_python():
    for name, function in FUNCTIONS.items():
        args = ", ".join(["a > b" if name == "where" and i == 0 else "a" for i in range(function.arity)])
        expression = parse_expression(f"{name}({args})", NAMES)
        compile(expression.to_triton(), "<triton>", "eval")
        compile(expression.to_torch(), "<torch>", "eval")


def test_every_unknown_name_and_function_is_reported_once():
    with pytest.raises(ExpressionError) as info:
        parse_expression("a + bb + softplus(a) + bb * zz(cc)", NAMES)
    messages = [problem.message for problem in info.value.all()]
    assert messages == ["unknown name 'bb'", "function 'softplus' is not allowed", "function 'zz' is not allowed",
                        "unknown name 'cc'"]


@pytest.mark.parametrize("source, spelling", [
    ("m & n", "of two bools write m * n"), ("m and n", "of two bools write m * n"),
    ("where(a > 0 or b > 0, a, b)", "nest where(): where(p, x, where(q, x, y))"),
    ("m | n", "of two bools write m + n"), ("m ^ n", "of two bools write m != n"),
    ("~m", "of a bool write m == 0"), ("where(not m, a, b)", "swap where()'s branches"),
])
def test_a_refused_logical_operator_says_how_the_language_writes_it(source, spelling):
    with pytest.raises(ExpressionError) as info:
        parse_expression(source, NAMES | {"m", "n"})
    what, _, how = info.value.message.partition(" is not allowed: ")
    assert what.startswith("operator ") and spelling in how


@pytest.mark.parametrize("spelling", ["m * n", "m + n", "m != n", "m == 0", "where(a > 0, where(b > 0, a, b), b)",
                                      "where(a > 0, a, where(b > 0, a, b))"])
def test_the_spellings_a_refused_operator_suggests_are_accepted(spelling):
    parse_expression(spelling, NAMES | {"m", "n"})


@pytest.mark.parametrize("source, message", [
    ("__import__('os')", "function '__import__' is not allowed"),
    ("a.__class__", "an attribute (x.name) is not allowed"),
    ("a[0]", "indexing (x[...]) is not allowed"),
    ("(lambda: 1)()", "only plain function calls"),
    ("{x: 1 for x in a}", "a comprehension is not allowed"),
    ("a if b else a", "a conditional expression (a if c else b: write where(c, a, b)) is not allowed"),
    ("a and b", "operator 'and' is not allowed"),
    ("where(a > 0 or b > 0, a, b)", "operator 'or' is not allowed"),
    ("a @ b", "operator '@' is not allowed"),
    ("a // b", "operator '//' is not allowed"),
    ("a % 2", "operator '%' is not allowed"),
    ("a & b", "operator '&' is not allowed"),
    ("~a", "operator '~' is not allowed"),
    ("not a", "operator 'not' is not allowed"),
    ("where(a is b, a, b)", "operator 'is' is not allowed"),
    ("where(a in b, a, b)", "operator 'in' is not allowed"),
    ("where(a < b < 1, a, b)", "use one comparison (a > b), not a chain"),
    ("[a, b]", "a list is not allowed"),
    ("(a, b)", "a tuple is not allowed"),
    ("(c := a)", "an assignment (:=) is not allowed"),
    ("abs()", "abs() takes 1 argument(s), got 0"),
    ("maximum(1.0)", "maximum() takes 2 argument(s), got 1"),
    ("a + 1e400", "literal 1e400 is out of range"),
    ("a ** b", "exponent of ** must be an integer literal"),
    ("a ** 9", "exponent of ** must be an integer literal"),
    ("1e31", "out of range"),
    ("True", "is not a number"),
    ("zz", "unknown name 'zz'"),
    ("", "expression is empty"),
    ("a; b", "invalid syntax"),
    ("(" * 500 + "a" + ")" * 500, ""),
    ("a / (1 - 1)", "division by a constant zero"),
    ("b / (0.5 * 2 - 1.0) + a", "division by a constant zero"),
])
def test_rejects(source, message):
    with pytest.raises(ExpressionError) as info:
        parse_expression(source, NAMES)
    assert message in info.value.message
    assert info.value.allowed


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=80))
def test_any_text_is_accepted_or_cleanly_rejected(text):
    try:
        expression = parse_expression(text, NAMES)
    except ExpressionError as exc:
        assert exc.message
        return
    compile(expression.to_triton(), "<triton>", "eval")
    compile(expression.to_torch(), "<torch>", "eval")


_atoms = st.sampled_from(["a", "b", "acc", "alpha", "1", "2.5", "0"])


@st.composite
def _expressions(draw, depth=0):
    if depth > 3 or draw(st.booleans()):
        return draw(_atoms)
    kind = draw(st.sampled_from(["bin", "neg", "call", "pow"]))
    if kind == "bin":
        op = draw(st.sampled_from(["+", "-", "*", "/"]))
        return f"({draw(_expressions(depth + 1))} {op} {draw(_expressions(depth + 1))})"
    if kind == "neg":
        return f"-{draw(_expressions(depth + 1))}"
    if kind == "pow":
        return f"({draw(_expressions(depth + 1))}) ** {draw(st.integers(1, 8))}"
    name = draw(st.sampled_from(sorted(FUNCTIONS)))
    args = [draw(_expressions(depth + 1)) for _ in range(FUNCTIONS[name].arity)]
    args[-1] = f"({args[-1]}) + a"  # (a call of numbers alone is folded, or refused: each reads a)
    if name == "where":
        args[0] = f"{args[0]} > {draw(_atoms)}"
    return f"{name}({', '.join(args)})"


@settings(max_examples=300, deadline=None)
@given(_expressions())
def test_generated_expressions_round_trip(source):
    try:
        expression = parse_expression(source, NAMES)
    except ExpressionError as error:  # the one refusal a generated expression can meet
        assert error.message == "division by a constant zero", error.message
        return
    compile(expression.to_triton(), "<triton>", "eval")
    compile(expression.to_torch(), "<torch>", "eval")


@pytest.mark.parametrize("source, eager", [
    ("where(acc > 0, acc, 0)", "torch.where(acc > 0, acc, 0)"),
    ("maximum(acc, 0)", "torch.clamp(acc, min=0)"),
    ("minimum(1, a)", "torch.clamp(a, max=1)"),
    ("maximum(a, b)", "torch.maximum(a, b)"),
    ("a * 2 + 0.5", "a * 2 + 0.5"),  # an int as written: int math stays int, as PyTorch keeps it
])
def test_eager_form_keeps_python_scalars(source, eager):
    assert tidy(parse_expression(source, NAMES).to_eager()) == eager


@pytest.mark.parametrize("source, number", [
    ("sqrt(2.0 / 3.141592653589793)", math.sqrt(2 / math.pi)),
    ("tanh(sqrt(2.0))", math.tanh(math.sqrt(2))),
    ("exp(-1.0) * 2", math.exp(-1) * 2),
    ("sigmoid(-1000.0)", 0.0),  # (no overflow on the way)
    ("gelu(1.0) + silu(2) + rsqrt(4) + erf(0.5) + log(2.0) + sin(1.0) + cos(1.0)",
     0.5 * (1 + math.erf(1 / math.sqrt(2))) + 2 / (1 + math.exp(-2)) + 0.5 + math.erf(0.5) + math.log(2)
     + math.sin(1) + math.cos(1)),
])
def test_a_function_of_numbers_alone_is_folded_into_its_number(source, number):
    expression = parse_expression(f"a * ({source})", NAMES)
    for emitted in (expression.to_triton(), expression.to_torch(), expression.to_eager()):
        assert not any(name in emitted for name in ("exp", "log", "sqrt", "sin", "cos", "erf", "sigmoid", "tanh",
                                                     "silu", "gelu")), emitted  # no call is left
    value = eval(expression.to_torch(), {"torch": torch, "a": torch.tensor(1.0, dtype=torch.float64)})
    assert value.item() == pytest.approx(number, rel=1e-15, abs=1e-300)


@pytest.mark.parametrize("source, message", [
    ("a + log(0.0)", "log() of constants has no finite value here"),
    ("a + sqrt(-1.0)", "sqrt() of constants has no finite value here"),
    ("a / rsqrt(0.0)", "rsqrt() of constants has no finite value here"),
    ("a + exp(100.0)", "exp() of constants is out of range (2.68812e+43)"),
    ("a / sin(0.0)", "division by a constant zero"),
    ("a + abs(-2.0)", "abs() of constants only"),
    ("a + maximum(0.5, 1.0)", "maximum() of constants only"),
])
def test_a_function_of_numbers_alone_without_a_finite_value_or_spelled_otherwise_is_refused(source, message):
    with pytest.raises(ExpressionError) as info:
        parse_expression(source, NAMES)
    assert info.value.message == message


def test_eager_form_treats_scalar_names_as_numbers():
    expression = parse_expression("maximum(a, alpha * 2)", NAMES)
    assert tidy(expression.to_eager(frozenset({"alpha"}))) == "torch.clamp(a, min=alpha * 2)"


@pytest.mark.parametrize("source, want", [
    ("a * sqrt(alpha)", lambda a, alpha: a * alpha ** 0.5),
    ("maximum(a, rsqrt(alpha)) + exp(alpha * 2)", lambda a, alpha: torch.clamp(a, min=alpha ** -0.5) + torch.exp(torch.tensor(alpha * 2.0))),
    ("where(a > gelu(alpha), a, sigmoid(alpha))", lambda a, alpha: torch.where(a > 0.5 * alpha * (1 + torch.erf(torch.tensor(alpha / 2 ** 0.5))), a, torch.sigmoid(torch.tensor(alpha)))),
    ("a + abs(minimum(alpha, 0))", lambda a, alpha: a + abs(min(alpha, 0.0))),
    ("where(alpha > 1, 1.0, 2.0) * a", lambda a, alpha: a * (1.0 if alpha > 1 else 2.0)),
    # A condition on scalars alone, the branches tensors: torch.where takes a tensor condition.
    ("where(alpha > 1, a, 2.0) + where(alpha < 1, a, -a)", lambda a, alpha: torch.full_like(a, 2.0) + a),
])
def test_eager_form_computes_a_function_of_scalars_alone_as_a_number(source, want):
    # PyTorch's functions take tensors: torch.sqrt(alpha) of a Python number raises TypeError,
    # which the benchmark's eager side did for a spec writing sqrt(eps) (and torch.where for a
    # condition on scalars alone).
    a, alpha = torch.randn(16, dtype=torch.float32), 0.7
    got = eval(parse_expression(source, NAMES).to_eager(frozenset({"alpha"})), {"torch": torch, "a": a, "alpha": alpha})
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want(a, alpha).to(torch.float32))


def test_eager_form_keeps_int_math_int():
    # An int literal written as a float (a * 2.0 + 1.0) made the benchmark's eager side of an int
    # op compute in float32: neither what a user writes nor the op's output dtype.
    a = torch.arange(-3, 3, dtype=torch.int32)
    got = eval(parse_expression("maximum(a * 2 + 1, 0)", NAMES).to_eager(), {"torch": torch, "a": a})
    assert got.dtype == torch.int32 and got.tolist() == [0, 0, 0, 1, 3, 5]


def test_eager_form_keeps_an_int_scalars_kind_through_a_function():
    from tilegen.categories import FLOAT, INT, Kind
    from tilegen.expressions import assignments

    kinds = {"a": Kind(INT, False), "alpha": Kind(INT, True), "b": Kind(FLOAT, False), "acc": Kind(FLOAT, False)}
    line, = assignments([("c", parse_expression("a + abs(alpha)", NAMES))], "eager", frozenset({"alpha"}), kinds=kinds)
    a = torch.arange(4, dtype=torch.int32)
    env = {"torch": torch, "a": a, "alpha": -3}
    exec(line, env)  # noqa: S102 - a line emitted from a checked tree
    assert env["c"].dtype == torch.int32 and env["c"].tolist() == [3, 4, 5, 6]


def test_eager_steps_of_scalars_alone_are_numbers_to_the_steps_that_read_them():
    # A step that reads only scalars (a spec's `floor: eps * 2`, a derivative's shared `-alpha`)
    # is a Python number in eager code: maximum of a tensor and it is a clamp, a where() on it
    # takes its condition as a tensor; torch.maximum(tensor, float) would raise.
    from tilegen.expressions import assignments

    steps = [("s", parse_expression("-alpha * 2.0", NAMES)), ("t", parse_expression("s > 0.0", NAMES | {"s"})),
             ("c", parse_expression("maximum(a, s) + minimum(s, b) + where(t, a, b)", NAMES | {"s", "t"}))]
    lines = assignments(steps, "eager", frozenset({"alpha"}))
    a, b = torch.tensor([-2.0, 0.5, 3.0]), torch.tensor([1.0, -4.0, 0.0])
    for alpha in (-0.75, 0.75):
        env = {"torch": torch, "a": a, "b": b, "alpha": alpha}
        exec("\n".join(lines), env)  # noqa: S102 - lines emitted from a checked tree
        s = torch.tensor(-alpha * 2.0)
        want = torch.maximum(a, s) + torch.minimum(s, b) + torch.where(s > 0, a, b)
        assert torch.equal(env["c"], want), (alpha, lines)


def test_eager_form_of_maximum_and_minimum_of_bools_beside_a_bool_scalar_is_or_and():
    # torch.clamp takes no bool tensor: maximum(m, flag) of a bool scalar is m | flag.
    from tilegen.categories import BOOL, Kind
    from tilegen.expressions import assignments

    kinds = {"m": Kind(BOOL, False), "flag": Kind(BOOL, True), "off": Kind(BOOL, True)}
    expression = parse_expression("minimum(maximum(m, flag), off) + maximum(minimum(off, m), flag)", set(kinds))
    line, = assignments([("y", expression)], "eager", frozenset({"flag", "off"}), kinds=kinds)
    m = torch.tensor([True, False, True, False])
    for flag in (False, True):
        for off in (False, True):
            env = {"torch": torch, "m": m, "flag": flag, "off": off}
            exec(line, env)  # noqa: S102 - a line emitted from a checked tree
            want = torch.minimum(torch.maximum(m, torch.tensor(flag)), torch.tensor(off)) \
                + torch.maximum(torch.minimum(torch.tensor(off), m), torch.tensor(flag))
            assert env["y"].dtype == torch.bool and env["y"].tolist() == want.tolist(), (flag, off)


@pytest.mark.parametrize("wrap", ["relu({})", "silu({})", "gelu({})", "({}) ** 8", "tanh({}) ** 2"])
def test_emitted_code_grows_with_the_expression_not_exponentially(wrap):
    from tilegen.expressions import assignments

    source = "a + b"
    for _ in range(12):  # 12 levels: 5**12 copies of the innermost operand without shared temporaries
        source = wrap.format(source)
    expression = parse_expression(source, NAMES)
    for target in ("triton", "torch", "eager"):
        lines = assignments([("c", expression)], target)
        assert sum(len(line) for line in lines) < 200 * 13, (target, len(lines))
        assert lines[-1].startswith("c = ")


def test_shared_temporaries_compute_what_the_expression_says():
    from tilegen.expressions import assignments

    expression = parse_expression("relu(gelu(a + b) ** 3) + silu(a + b)", NAMES)
    a, b = torch.randn(64, dtype=torch.float64), torch.randn(64, dtype=torch.float64)
    scope = {"torch": torch, "a": a, "b": b}
    exec("\n".join(assignments([("c", expression)], "torch")), scope)
    want = torch.relu(torch.nn.functional.gelu(a + b) ** 3) + torch.nn.functional.silu(a + b)
    torch.testing.assert_close(scope["c"], want)


def test_inf_is_a_number_every_target_writes():
    # `inf` (and `-inf`): the one named number, for masking (`where(keep, x, -inf)`); it is not
    # a name the expression reads, and each target's code computes it.
    from tilegen.expressions import assignments

    expression = parse_expression("where(k > 0, x, -inf) + inf * 0.0", {"k", "x"})
    assert expression.names == ("k", "x")
    k, x = torch.tensor([1.0, -1.0], dtype=torch.float64), torch.tensor([2.0, 3.0], dtype=torch.float64)
    for target in ("torch", "eager"):
        [line] = assignments([("y", expression)], target)
        scope = {"torch": torch, "k": k, "x": x}
        exec(line, scope)  # noqa: S102 - code the emitter wrote from a checked tree
        assert torch.isinf(scope["y"][1]) or torch.isnan(scope["y"][1])
    [line] = assignments([("y", parse_expression("where(k > 0, x, -inf)", {"k", "x"}))], "triton")
    assert "float('inf')" in line or 'float("inf")' in line
    # A literal too large for a float is no infinity; Python's float("-inf") is pointed at inf.
    with pytest.raises(ExpressionError, match="out of range"):
        parse_expression("x + 1e400", {"x"})
    with pytest.raises(ExpressionError, match="infinity as inf"):
        parse_expression('where(k > 0, x, float("-inf"))', {"k", "x"})
