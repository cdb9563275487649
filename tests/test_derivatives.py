"""Symbolic differentiation: each rule against PyTorch's autograd, at ordinary and at
non-differentiable points, and random expressions of the language against autograd of the oracle."""

import math

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tilegen.derivatives import differentiate, recorded_from
from tilegen.expressions import FUNCTIONS, parse_expression

NAN, INF = math.nan, math.inf
# Ordinary points, the non-differentiable ones (0, ties), and NaN and infinities.
POINTS = [-3.0, -1.5, -1.0, -0.25, 0.0, 0.3, 0.5, 1.0, 2.0, 4.0, NAN, INF, -INF]


def _tilegen_grads(source, wrt, values, seeds, scalars=None):
    """Gradients from tilegen's backward, emitted for the float64 oracle and run."""
    names = set(values) | set(scalars or {})
    backward = differentiate([("out", parse_expression(source, names))], wrt)
    scope = {"torch": torch, **values, **(scalars or {}), "_g_out": seeds}
    exec("\n".join(backward.lines("torch")), scope)
    grads = {}
    for name in wrt:
        if name in backward.zero:
            grads[name] = torch.zeros_like(values[name])
        elif name in backward.passed:  # the incoming gradient itself
            grads[name] = seeds.expand_as(values[name])
        else:
            grads[name] = scope[backward.results[backward.aliases.get(name, name)]].expand_as(values[name])
    return grads


def _autograd_grads(source, wrt, values, seeds, scalars=None):
    """Gradients from PyTorch's autograd of the oracle expression."""
    names = set(values) | set(scalars or {})
    leaves = {k: v.clone().requires_grad_(k in wrt) for k, v in values.items()}
    scope = {"torch": torch, **leaves, **(scalars or {})}
    out = eval(parse_expression(source, names).to_torch(), scope)
    if not isinstance(out, torch.Tensor) or not out.requires_grad:
        return {name: torch.zeros_like(values[name]) for name in wrt}
    got = torch.autograd.grad(out.expand_as(seeds), [leaves[n] for n in wrt], seeds, allow_unused=True)
    return {n: torch.zeros_like(values[n]) if g is None else g for n, g in zip(wrt, got)}


def _check(source, values, scalars=None, finite_only=False):
    """Our gradients of `source` against autograd's, at every element; with `finite_only`, where
    autograd's is finite: at a point where a factor is infinite, the order in which a chain's
    factors are multiplied decides between inf and NaN (autograd: 0 * inf = NaN down a branch
    whose gradient is 0, then summed; ours may add the branches first), and both are the limit's
    stand-ins (the rule tests hold each rule's NaN and infinities to autograd's)."""
    wrt = sorted(values)
    seeds = torch.linspace(-1.5, 2.0, next(iter(values.values())).numel(), dtype=torch.float64)
    seeds = seeds.reshape(next(iter(values.values())).shape)
    ours = _tilegen_grads(source, wrt, values, seeds, scalars)
    theirs = _autograd_grads(source, wrt, values, seeds, scalars)
    for name in wrt:
        got, want = ours[name], theirs[name]
        if finite_only:
            kept = torch.isfinite(want)
            got, want = got[kept], want[kept]
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-12, equal_nan=True,
                                   msg=lambda m: f"d({source})/d{name}: {m}")


def _grid(count=2):
    """Every pair of POINTS, as float64 tensors (ties included)."""
    x = torch.tensor(POINTS, dtype=torch.float64)
    if count == 1:
        return {"x": x}
    xs, ys = torch.meshgrid(x, x, indexing="ij")
    return {"x": xs.flatten(), "y": ys.flatten()}


@pytest.mark.parametrize("function", sorted(f for f, spec in FUNCTIONS.items() if spec.arity == 1))
def test_each_unary_rule_matches_autograd(function):
    _check(f"{function}(x)", _grid(1))


@pytest.mark.parametrize("function", ["maximum", "minimum"])
def test_maximum_and_minimum_split_ties_as_pytorch_does(function):
    _check(f"{function}(x, y)", _grid())


@pytest.mark.parametrize("source", ["x + y", "x - y", "x * y", "x / y", "-x", "x ** 1", "x ** 2", "x ** 5",
                                    "where(x > y, x, y)", "where(x <= 0, x * y, 2 * y)",
                                    "where(x > 0, x, 0)", "2.5 * x - y / 3",
                                    "x * detach(x * y)", "exp(x - detach(y)) + y"])
def test_each_operator_rule_matches_autograd(source):
    _check(source, _grid())


@pytest.mark.parametrize("source, point, expected", [
    ("relu(x)", 0.0, 0.0),       # relu'(0) = 0
    ("abs(x)", 0.0, 0.0),        # abs'(0) = 0
    ("where(x > 0, x, 0)", 0.0, 0.0),  # the branch taken gets the gradient
    ("maximum(x, 1)", 1.0, 0.5),  # a tie splits it
])
def test_conventions_at_non_differentiable_points(source, point, expected):
    values = {"x": torch.tensor([point], dtype=torch.float64)}
    grad = _tilegen_grads(source, ["x"], values, torch.ones(1, dtype=torch.float64))["x"]
    assert grad.item() == expected


def test_scalars_get_no_gradient_and_unread_inputs_a_zero_one():
    e = parse_expression("alpha * x", {"x", "y", "alpha"})
    backward = differentiate([("out", e)], ["x", "y"])
    assert "alpha" not in backward.results
    assert backward.zero == {"y"}
    _check("alpha * x + 0 * y", _grid(), scalars={"alpha": 1.75})


def test_common_subexpressions_are_computed_once():
    e = parse_expression("gelu(acc + bias)", {"acc", "bias"})
    backward = differentiate([("c", e)], ["acc", "bias"])
    # A bias added to the accumulator has the accumulator's gradient: computed once, aliased.
    assert backward.aliases == {"bias": "acc"}
    lines = backward.lines("triton")
    assert sum(line.count("acc + bias") for line in lines) == 1, lines
    assert backward.reads == ("acc", "bias")


def test_an_input_added_to_an_output_passes_its_gradient_on_uncomputed():
    backward = differentiate([("c", parse_expression("a + 2 * b", {"a", "b"}))], ["a", "b"])
    assert backward.passed == {"a": "c"} and backward.computed() == ["b"]


@pytest.mark.parametrize("body, wrt, readers", [
    # d(a*b)/da reads b alone, d/db a alone: each is kept only for the other's gradient.
    ({"c": "a * b"}, ["a", "b"], {"a": ("b",), "b": ("a",), "_g_c": ("a", "b")}),
    # Through a shared temporary (exp(a), read by a's and b's gradients); dz is read by a's and c's.
    ({"y": "a + b * exp(a)", "z": "a - 2 * c"}, ["a", "b", "c"],
     {"a": ("a", "b"), "b": ("a",), "_g_y": ("a", "b"), "_g_z": ("a", "c")}),
    # An alias (bias's gradient is acc's) reads what its first name's does.
    ({"c": "gelu(acc + bias)"}, ["acc", "bias"], {"acc": ("acc", "bias"), "bias": ("acc", "bias"), "_g_c": ("acc", "bias")}),
    # A passed gradient reads nothing: x's incoming gradient is read by w's alone.
    ({"y": "x + w * w"}, ["x", "w"], {"w": ("w",), "_g_y": ("w",)}),
])
def test_each_value_a_gradient_reads_names_the_gradients_that_read_it(body, wrt, readers):
    names = {"a", "b", "c", "acc", "bias", "x", "w"}
    backward = differentiate([(o, parse_expression(e, names)) for o, e in body.items()], wrt)
    assert backward.readers() == readers


def test_linear_math_reads_no_saved_value():
    e = parse_expression("alpha * acc + beta * residual", {"acc", "residual", "alpha", "beta"})
    backward = differentiate([("d", e)], ["acc", "residual"])
    assert backward.reads == ("alpha", "beta")


def test_several_outputs_add_their_gradients():
    values = {"x": torch.linspace(-2, 2, 9, dtype=torch.float64), "v": torch.linspace(0.5, 3, 9, dtype=torch.float64)}
    names = {"x", "v", "eps"}
    body = [("y", parse_expression("x * rsqrt(v + eps)", names)), ("z", parse_expression("exp(-abs(x))", names))]
    backward = differentiate(body, ["x", "v"])
    gy, gz = torch.full((9,), 0.5, dtype=torch.float64), torch.linspace(1, 2, 9, dtype=torch.float64)
    scope = {"torch": torch, **values, "eps": 1e-6, "_g_y": gy, "_g_z": gz}
    exec("\n".join(backward.lines("torch")), scope)
    leaves = {k: v.clone().requires_grad_() for k, v in values.items()}
    y = leaves["x"] * torch.rsqrt(leaves["v"] + 1e-6)
    z = torch.exp(-leaves["x"].abs())
    dx, dv = torch.autograd.grad((y, z), (leaves["x"], leaves["v"]), (gy, gz))
    torch.testing.assert_close(scope["_d_x"], dx)
    torch.testing.assert_close(scope["_d_v"], dv)


def test_gradients_grow_with_the_expression_not_exponentially():
    source = "x"
    for _ in range(12):
        source = f"silu({source}) * x"
    backward = differentiate([("out", parse_expression(source, {"x"}))], ["x"])
    assert sum(len(line) for line in backward.lines("triton")) < 20_000
    _check(source, {"x": torch.linspace(-1, 1, 7, dtype=torch.float64)})


_atoms = st.sampled_from(["a", "b", "alpha", "1", "2.5", "0.5"])


@st.composite
def _expressions(draw, depth=0):
    if depth > 3 or draw(st.booleans()):
        return draw(_atoms)
    kind = draw(st.sampled_from(["bin", "neg", "call", "pow", "where"]))
    if kind == "bin":
        op = draw(st.sampled_from(["+", "-", "*", "/"]))
        return f"({draw(_expressions(depth + 1))}) {op} ({draw(_expressions(depth + 1))})"
    if kind == "neg":
        return f"-({draw(_expressions(depth + 1))})"
    if kind == "pow":
        return f"({draw(_expressions(depth + 1))}) ** {draw(st.integers(1, 4))}"
    if kind == "where":
        cmp = draw(st.sampled_from([">", ">=", "<", "<=", "==", "!="]))
        side = draw(st.sampled_from(["a", "b"]))  # a condition of constants alone is no test
        return (f"where(({side}) {cmp} ({draw(_expressions(depth + 1))}), "
                f"{draw(_expressions(depth + 1))}, {draw(_expressions(depth + 1))})")
    name = draw(st.sampled_from(sorted(f for f in FUNCTIONS if f != "where")))
    args = ", ".join(draw(_expressions(depth + 1)) for _ in range(FUNCTIONS[name].arity))
    return f"{name}({args})"


# Ordinary points (and 0): the rule tests above cover NaN, infinities and ties. Near-underflow
# values would only test the order in which rounding errors cancel.
_points = st.floats(-3, 3).filter(lambda v: v == 0 or abs(v) > 1e-3)


@settings(max_examples=300, deadline=None)
@given(_expressions(), st.lists(_points, min_size=4, max_size=4))
@example("(abs(sqrt(a))) + (sqrt(a))", [0.0, 0.0, 0.0, 0.0])  # autograd NaN (0 * inf down abs), ours inf
def test_random_expressions_match_autograd_of_the_oracle(source, points):
    names = {"a", "b", "alpha"}
    try:
        parse_expression(source, names)
    except ValueError:
        return  # e.g. abs() of numbers alone: not an expression the language accepts
    a = torch.tensor(points + [0.0, 1.0], dtype=torch.float64)
    b = torch.tensor(points[::-1] + [0.0, 1.0], dtype=torch.float64)
    # Scalars reach the oracle as float64 tensors, as in the generated tests.
    _check(source, {"a": a, "b": b}, scalars={"alpha": torch.tensor(0.75, dtype=torch.float64)}, finite_only=True)


@settings(max_examples=200, deadline=None)
@given(_expressions(), _expressions(), st.lists(_points, min_size=4, max_size=4))
def test_a_gradient_is_unchanged_by_any_value_its_readers_leave_out(first, second, points):
    # What read_by and a kernel's gated loads rely on: a gradient that readers() does not list
    # as reading a value gives the same result whatever that value holds (a stand-in's is
    # unset), through every shared temporary.
    names = {"a", "b", "alpha"}
    try:
        body = [("y", parse_expression(first, names)), ("z", parse_expression(second, names))]
    except ValueError:
        return
    backward = differentiate(body, ["a", "b"])
    values = {"a": torch.tensor(points, dtype=torch.float64), "b": torch.tensor(points[::-1], dtype=torch.float64),
              "alpha": torch.tensor(0.75, dtype=torch.float64),
              "_g_y": torch.linspace(-1, 2, 4, dtype=torch.float64), "_g_z": torch.linspace(0.5, 1.5, 4, dtype=torch.float64)}

    def gradients(changed):
        scope = {"torch": torch, **values, **changed}
        exec("\n".join(backward.lines("torch")), scope)
        return {n: scope[backward.results[n]] for n in backward.computed()}

    before = gradients({})
    for value, readers in backward.readers().items():
        if value == "alpha":
            continue  # (a scalar: always passed)
        after = gradients({value: torch.full_like(values[value], 123.25)})
        for name in backward.computed():
            if name not in readers:
                torch.testing.assert_close(after[name], before[name], equal_nan=True, msg=f"{name} reads {value}")


@settings(max_examples=200, deadline=None)
@given(_expressions(), st.lists(_points, min_size=4, max_size=4))
# A shared step of scalars alone (-alpha) is a number to the steps that read it: a clamp's bound.
@example(source="abs(maximum(a, (-(alpha)) ** 1))", points=[0.0, 0.0, 0.0, 0.0])
def test_the_gradients_in_pytorchs_ops_differentiate_again_as_autograd_of_the_oracle(source, points):
    # A backward under create_graph=True runs the gradients' lines in PyTorch's eager ops
    # (tilegen.torch_gradients): autograd differentiates them again. Their Hessian-vector product
    # (through the inputs and the incoming gradient alike) against autograd's twice of the oracle.
    names = {"a", "b", "alpha"}
    try:
        backward = differentiate([("out", parse_expression(source, names))], ["a", "b"])
    except ValueError:
        return
    a = torch.tensor(points, dtype=torch.float64, requires_grad=True)
    b = torch.tensor(points[::-1], dtype=torch.float64, requires_grad=True)
    seeds = torch.linspace(-1.5, 2.0, 4, dtype=torch.float64, requires_grad=True)
    directions = torch.linspace(0.25, 1.25, 4, dtype=torch.float64), torch.linspace(1.0, -0.5, 4, dtype=torch.float64)
    scope = {"torch": torch, "a": a, "b": b, "alpha": 0.75, "_g_out": seeds}
    exec("\n".join(backward.lines("eager", frozenset({"alpha"}))), scope)
    ours = [torch.zeros(4, dtype=torch.float64) if n in backward.zero else seeds if n in backward.passed
            else scope[backward.results[backward.aliases.get(n, n)]].expand(4) for n in ("a", "b")]
    oracle = eval(parse_expression(source, names).to_torch(), {"torch": torch, "a": a, "b": b,
                                                              "alpha": torch.tensor(0.75, dtype=torch.float64)})
    if not isinstance(oracle, torch.Tensor) or not oracle.requires_grad:
        return  # (no gradient to differentiate)
    theirs = torch.autograd.grad(oracle.expand(4), (a, b), seeds, create_graph=True, allow_unused=True)
    theirs = [torch.zeros(4, dtype=torch.float64) if g is None else g for g in theirs]

    def product(grads):
        total = sum((g * d).sum() for g, d in zip(grads, directions))
        if not total.requires_grad:
            return [torch.zeros(4, dtype=torch.float64)] * 3
        return [torch.zeros(4, dtype=torch.float64) if h is None else h
                for h in torch.autograd.grad(total, (a, b, seeds), allow_unused=True, retain_graph=True)]

    for name, got, want in zip(("a", "b", "the incoming gradient"), product(ours), product(theirs)):
        kept = torch.isfinite(want) & torch.isfinite(got)
        torch.testing.assert_close(got[kept], want[kept], rtol=1e-7, atol=1e-9,
                                   msg=lambda m: f"second derivative of {source} through {name}: {m}")


@settings(max_examples=200, deadline=None)
@given(_expressions(), st.lists(_points, min_size=4, max_size=4))
def test_forward_mode_tangents_transpose_the_gradients_as_jvp_of_the_oracle(source, points):
    # Forward mode (runtime.autograd.Gradients.tangents) transposes the gradients' lines in
    # PyTorch's ops: they are linear in the incoming gradient, and a vjp of them at zero, applied
    # to the inputs' tangents, is the JVP. Against torch.func.jvp of the oracle, at kinks and
    # ties too (where PyTorch's forward-mode and reverse-mode conventions must agree with ours).
    names = {"a", "b", "alpha"}
    try:
        backward = differentiate([("out", parse_expression(source, names))], ["a", "b"])
    except ValueError:
        return
    a = torch.tensor(points, dtype=torch.float64)
    b = torch.tensor(points[::-1], dtype=torch.float64)
    tangents = torch.linspace(0.25, 1.25, 4, dtype=torch.float64), torch.linspace(1.0, -0.5, 4, dtype=torch.float64)
    oracle_math = parse_expression(source, names).to_torch()

    def oracle(a, b):
        result = eval(oracle_math, {"torch": torch, "a": a, "b": b, "alpha": torch.tensor(0.75, dtype=torch.float64)})
        return result.expand(4) if isinstance(result, torch.Tensor) else torch.full((4,), float(result), dtype=torch.float64)

    def gradients(seeds):
        scope = {"torch": torch, "a": a, "b": b, "alpha": 0.75, "_g_out": seeds}
        exec("\n".join(backward.lines("eager", frozenset({"alpha"}))), scope)
        return tuple(torch.zeros(4, dtype=torch.float64) if n in backward.zero else seeds if n in backward.passed
                     else scope[backward.results[backward.aliases.get(n, n)]].expand(4) for n in ("a", "b"))

    _, transpose = torch.func.vjp(gradients, torch.zeros(4, dtype=torch.float64))
    (ours,) = transpose(tangents)
    _, theirs = torch.func.jvp(oracle, (a, b), tangents)
    kept = torch.isfinite(theirs) & torch.isfinite(ours)
    torch.testing.assert_close(ours[kept], theirs[kept], rtol=1e-7, atol=1e-9,
                               msg=lambda m: f"tangent of {source}: {m}")


@pytest.mark.parametrize("source, reads_output", [
    ("where(acc > 0, acc, 0)", True),       # relu as the example matmul_relu writes it
    ("relu(acc)", True),
    ("where(acc <= 0, 0, acc)", True),      # the threshold's other form: k = 0 passes `<= 0`
    ("where(acc >= 1.5, acc, -2.0)", False),  # o >= 1.5 on a rounded o: more than its sign
    ("sigmoid(acc + bias)", True),          # sigmoid's slope is read from its result
    ("tanh(acc) ", True),
    ("exp(acc + bias)", True),
    ("exp(acc * bias)", False),             # d/dbias = g * c * acc: the accumulator is read anyway
    ("where(acc > 0, acc, 0.5)", False),    # 0.5 > 0: o > 0 does not tell where acc > 0
    ("where(acc > bias, acc, 0)", False),   # a threshold that is no constant
    ("gelu(acc + bias)", False),            # gelu's slope needs its argument
    ("relu(acc) * 2.0", False),             # relu's result is no output
])
def test_a_gradient_reads_the_output_instead_of_the_accumulator_where_that_spares_it(source, reads_output):
    # A matmul epilogue `c = f(acc, ...)` whose derivative needs only c (as PyTorch's backward of
    # relu, sigmoid, tanh and exp reads the result) keeps no accumulator: its backward reads c.
    # The gradients, computed from c, match autograd's at every point (ties, NaN, infinities).
    names = {"acc", "bias"}
    backward = differentiate([("c", parse_expression(source, names))], ["acc", "bias"], outputs_instead_of=("acc",))
    assert ("acc" not in backward.reads and "c" in backward.reads) == reads_output, backward.reads
    values = _grid()
    values = {"acc": values["x"], "bias": values["y"]}
    scope = {"torch": torch, **values}
    out = eval(parse_expression(source, names).to_torch(), scope)
    seeds = torch.linspace(-1.5, 2.0, out.numel(), dtype=torch.float64)
    scope.update(c=out, _g_c=seeds)
    exec("\n".join(backward.lines("torch")), scope)
    theirs = _autograd_grads(source, ["acc", "bias"], values, seeds)
    for name in ("acc", "bias"):
        if name in backward.zero:
            continue
        ours = scope[backward.results[backward.aliases.get(name, name)]]
        torch.testing.assert_close(ours.expand_as(values[name]), theirs[name], rtol=1e-9, atol=1e-12, equal_nan=True,
                                   msg=lambda m: f"d({source})/d{name}: {m}")
    # Without the request, the gradients read the forward's names as before.
    assert "c" not in differentiate([("c", parse_expression(source, names))], ["acc", "bias"]).reads


@pytest.mark.parametrize("body, reads, decided", [
    # A threshold on a value that is also an output (h, kept rounded): read from the accumulator.
    ([("c", "where(acc + bias > t, acc + bias, 0)"), ("h", "acc + bias")], {"acc", "bias"}, {"acc", "bias"}),
    ([("c", "relu(acc + bias)")], {"c"}, set()),                 # relu's kink is c's sign
    ([("c", "where(acc > 0, acc, 0) * 2.0")], {"acc"}, set()),   # the accumulator's own sign
    ([("c", "maximum(acc, bias)")], {"acc", "bias"}, {"acc", "bias"}),  # a tie: more than a sign
    ([("c", "abs(acc - bias)")], {"acc", "bias"}, {"acc", "bias"}),
    ([("c", "sigmoid(acc + bias)")], {"c"}, set()),              # no decision at all
])
def test_a_decision_reads_a_rounded_value_by_its_sign_alone(body, reads, decided):
    # The forward decides a kink on the float32 accumulator; an output (kept in its own dtype) or
    # an accumulator kept in the operands' dtype is rounded: the sign of a rounded value is the
    # forward's, `o > t`, `o + bias > 0` or `o == m` need not be. The backward reads an output
    # only where every decision reads its sign alone, and `decided` names the values a decision
    # reads more of (a matmul keeps its accumulator in float32 for them).
    names = {"acc", "bias", "t"}
    parsed = [(name, parse_expression(source, names)) for name, source in body]
    backward = differentiate(parsed, ["acc", "bias"], outputs_instead_of=("acc",))
    assert set(backward.reads) - {"t"} == reads
    assert set(backward.decided) - {"t"} == decided


def test_an_output_along_the_row_of_a_value_per_row_gets_the_rows_sum_of_its_gradient():
    # y = max(x) with shape [..., N]: every element of the row is the max, so the max's gradient
    # is the row's sum of y's incoming gradient (routed to the elements equal to it). Without the
    # output's own level the backward handed it the element's own incoming gradient.
    from tilegen.rows import ELEMENT

    body = [("y", parse_expression("max(x)", {"x"}, reductions=True))]
    backward = differentiate(body, ["x"], levels={"x": ELEMENT}, output_levels={"y": ELEMENT})
    x = torch.randn(3, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    x[1, 2] = x[1, 5] = x[1].max() + 1  # (a tie: split evenly, as amax's gradient is)
    scope = {"torch": torch, "x": x, "_g_y": torch.randn(3, 8, dtype=torch.float64)}
    exec("\n".join(backward.lines("torch")), scope)
    leaf = x.clone().requires_grad_()
    want, = torch.autograd.grad(leaf.amax(-1, keepdim=True).expand(3, 8), leaf, scope["_g_y"])
    torch.testing.assert_close(scope["_d_x"], want)


@settings(max_examples=300, deadline=None)
@given(_expressions())
def test_an_output_records_a_graph_where_pytorchs_composition_does(source):
    # An output requires grad exactly where PyTorch's eager composition of the same math does,
    # for each input that requires grad alone: where it reads that input other than through
    # detach() or a comparison.
    names = {"a", "b", "alpha"}
    try:
        expression = parse_expression(source, names)
    except ValueError:
        return
    recorded = recorded_from([("out", expression)], ["a", "b"])["out"]
    for grad_input in ("a", "b"):
        leaves = {name: torch.linspace(-1, 1, 4, dtype=torch.float64).requires_grad_(name == grad_input)
                  for name in ("a", "b")}
        out = eval(expression.to_torch(), {"torch": torch, **leaves, "alpha": torch.tensor(0.75, dtype=torch.float64)})
        want = isinstance(out, torch.Tensor) and out.requires_grad
        assert (grad_input in recorded) == want, (source, grad_input)


def test_a_step_read_only_detached_records_no_graph():
    names = {"a", "b"}
    steps = [("s", parse_expression("detach(a) * 2.0", names)), ("t", parse_expression("s + a", names | {"s"}))]
    body = [(name, parse_expression(source, names | {"s", "t"}))
            for name, source in [("o1", "s + 1.0"), ("o2", "s * b"), ("o3", "where(t > 0, 1.0, s)"), ("o4", "t")]]
    assert recorded_from(body, ["a", "b"], steps) == {"o1": set(), "o2": {"b"}, "o3": set(), "o4": {"a"}}
    assert recorded_from(body, ["b"], steps)["o4"] == set()  # (a needs no gradient: an int, say)


@pytest.mark.parametrize("source", ["x * sqrt(1.0 * k)", "x * sqrt(k / 1.0)", "x * sqrt(k + 0.0)",
                                    "x * sqrt(0.0 - k + 2 * k)", "x * sqrt(-1.0 * -k)"])
def test_a_float_constant_that_makes_an_int_float_is_kept(source):
    # 1.0 * k is k made float: dropped as a neutral factor, sqrt() would meet an int, which a
    # kernel cannot take (Triton's sqrt of an int scalar) and the kinds check refuses. A float's
    # neutral constants still drop out.
    from tilegen.categories import FLOAT, INT, Kind, category_of

    kinds = {"x": Kind(FLOAT, False), "k": Kind(INT, True)}
    backward = differentiate([("y", parse_expression(source, {"x", "k"}))], ["x"], kinds=kinds)
    for _, expression in backward.steps:
        category_of(expression.tree.body, kinds | {"_g_y": Kind(FLOAT, False)})  # (raises where sqrt() meets an int)
    x = torch.linspace(0.5, 2.0, 4, dtype=torch.float64)
    k = torch.tensor(3.0, dtype=torch.float64)  # (the oracle's int scalar in float math: testgen)
    got = _tilegen_grads(source, ["x"], {"x": x}, torch.ones(4, dtype=torch.float64), {"k": k})["x"]
    torch.testing.assert_close(got, torch.full((4,), math.sqrt(3), dtype=torch.float64))
    plain = differentiate([("y", parse_expression("x * 1.0 + 0.0", {"x"}))], ["x"], kinds=kinds)
    assert plain.passed == {"x": "y"}
