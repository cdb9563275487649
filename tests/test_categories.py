"""Integer and bool values in elementwise specs: PyTorch's promotion by kind of number, the math
that is not defined for a kind (one error naming it), and what an output can hold."""

from __future__ import annotations

import ast

import pytest

from tilegen.categories import BOOL, FLOAT, INT, CategoryError, Kind, as_logic, can_hold, category_of, int_scalars_met
from tilegen.expressions import assignments, parse_expression
from tests.conftest import assert_generated_tests_pass, built_package, kernel_device, validated

NAMES = {"i": Kind(INT, False), "j": Kind(INT, False), "f": Kind(FLOAT, False), "m": Kind(BOOL, False),
         "k": Kind(INT, True), "alpha": Kind(FLOAT, True), "flag": Kind(BOOL, True)}


def _category(source):
    return category_of(parse_expression(source, set(NAMES)).tree.body, NAMES)


@pytest.mark.parametrize("source, expected", [
    ("i + j", INT), ("i * 3", INT), ("i + k", INT), ("i * 0.5", FLOAT), ("i * alpha", FLOAT), ("i + f", FLOAT),
    ("i / j", FLOAT), ("i ** 2", INT), ("-i", INT), ("abs(i - j)", INT), ("maximum(i, k)", INT), ("relu(i)", INT),
    ("where(m, i, j)", INT), ("where(m, i, f)", FLOAT), ("where(i > 0, i, 0)", INT), ("i > j", BOOL),
    ("where(m, 1, 0)", INT), ("exp(f) * i", FLOAT),
    # maximum/minimum take bools as PyTorch's do: of two a bool, beside a number the number's kind
    ("maximum(m, m)", BOOL), ("minimum(m, m)", BOOL), ("maximum(m, f)", FLOAT), ("minimum(m, i)", INT),
    ("maximum(m, 1)", INT), ("maximum(m, 0.5)", FLOAT), ("maximum(m, alpha)", FLOAT),
    # + and * of two bools are PyTorch's logical or/and (a bool), beside a number arithmetic
    ("m + m", BOOL), ("m * m", BOOL), ("(m + m) * m", BOOL), ("m + m + k", INT), ("(m * m) * f", FLOAT),
    ("m / m", FLOAT), ("m / 2", FLOAT),  # true division, as PyTorch's
    # a bool scalar is a Python bool: a bool beside bools, the number's 1 or 0 beside a number
    ("where(flag, f, -f)", FLOAT), ("flag * f", FLOAT), ("flag * i", INT), ("i + flag", INT), ("m * flag", BOOL),
    ("m + flag", BOOL), ("maximum(flag, k)", INT), ("flag * alpha", FLOAT), ("where(flag, m, m * m)", BOOL),
])
def test_kinds_promote_as_in_pytorch(source, expected):
    assert _category(source) == expected


@pytest.mark.parametrize("source, words", [
    ("exp(i)", "exp() of an int value"), ("sqrt(i + j)", "sqrt() of an int value"), ("gelu(m)", "gelu() of a bool"),
    ("where(f, i, j)", "the condition of where() is float"), ("where(i, i, j)", "the condition of where() is int"),
    ("m - m", "- of two bool values"), ("-m", "negation of a bool value"), ("abs(m)", "abs() of a bool value"),
    ("m ** 2", "** of a bool value"), ("f - m", "- with a bool value"), ("m - 1", "- with a bool value"),
    ("relu(m)", "relu() of a bool value"),
    ("-flag", "negation of a bool value"), ("exp(flag)", "exp() of a bool"), ("flag - f", "- with a bool value"),
])
def test_math_not_defined_for_a_kind_is_one_error_naming_it(source, words):
    with pytest.raises(CategoryError, match=words.replace("(", r"\(").replace(")", r"\)").replace("*", r"\*")
                       .replace("+", r"\+")):
        _category(source)


@pytest.mark.parametrize("source, expected", [
    ("i + k", {"k": {"i"}}), ("maximum(i + j, k)", {"k": {"i", "j"}}), ("i > k", {"k": {"i"}}),
    ("where(m, k, i)", {"k": {"i"}}), ("i * (k + 1)", {"k": {"i"}, 1: {"i"}}), ("abs(k) - j", {"k": {"j"}}),
    ("maximum(i, -5)", {-5: {"i"}}),  # literals by value, for the validator
    ("f + i + k", {}),  # computed in float: any int fits
    ("i ** 2 - k", {"k": {"i"}}), ("f + i + 7", {}), ("i / k", {}), ("f * k", {}), ("where(m, k, 2) * 3", {}),  # float; no int tensor
])
def test_int_scalars_meet_the_int_tensors_they_are_computed_with(source, expected):
    # The wrapper checks each such scalar against those tensors' dtype (test_runtime).
    assert int_scalars_met(parse_expression(source, set(NAMES)).tree.body, NAMES) == expected


def test_int_scalars_beside_bool_tensors_alone_meet_what_the_result_meets():
    # m * k is an int that no int tensor gives a dtype: its ints meet the int tensor it is computed
    # with next, else the output it is stored into (whose dtype the wrapper checks them against).
    def met(source, result=None):
        return int_scalars_met(parse_expression(source, set(NAMES)).tree.body, NAMES, result)

    assert met("maximum(m, k)", "y") == {"k": {"y"}} and met("m * k + 1", "y") == {"k": {"y"}, 1: {"y"}}
    assert met("m * k + i", "y") == {"k": {"i"}} and met("minimum(m, k) * 0.5", "y") == {}
    assert met("maximum(m, k)") == {}


def test_an_int_literal_beside_bool_tensors_alone_must_fit_the_output(tmp_path):
    _, errors = validated(tmp_path, PICK.replace("  y: where(m, lo, hi)", "  y: maximum(m, 3000000000)"))
    assert any(": compute.y: " in e and "the literal 3000000000 does not fit in int32, a dtype of output 'y'" in e
               for e in errors), errors


def test_an_int_scalar_beside_bool_tensors_alone_is_checked_against_the_output(tmp_path):
    # maximum(m, hi) is computed in 64 bits and stored into y (int32): 2**32 would wrap to 0.
    import torch

    text = PICK.replace("  y: where(m, lo, hi)", "  y: maximum(m, hi) * lo")
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "pick.yaml").write_text(text)
    device = kernel_device()
    with built_package(tmp_path, "pick_bool_ops") as package:
        m = torch.tensor([True, False], device=device)
        y, _ = package.pick(m, torch.zeros(2, dtype=torch.int64, device=device), lo=3, hi=-4)
        assert y.tolist() == [3, 0]
        with pytest.raises(ValueError, match=r"pick: argument 'hi' = 4294967296 does not fit in int32, "
                                             r"the dtype of output y it is computed with"):
            package.pick(m, torch.zeros(2, dtype=torch.int64, device=device), lo=1, hi=2**32)


def test_outputs_hold_their_kind_and_the_kinds_below_it():
    assert can_hold(FLOAT, INT) and can_hold(FLOAT, BOOL) and can_hold(INT, BOOL) and can_hold(BOOL, BOOL)
    assert not can_hold(INT, FLOAT) and not can_hold(BOOL, INT)


def test_relu_of_an_integer_keeps_integers_in_triton():
    expression = parse_expression("relu(i - j) + relu(f)", set(NAMES))
    line, = assignments([("y", expression)], "triton", kinds=NAMES)
    assert line.startswith("y = tl.maximum(i - j, 0) + tl.where(")



@pytest.mark.parametrize("source, triton, torch_", [
    # Int math: exact ints, int64 in Triton past 32 bits (a bare one would be typed by its value).
    ("i + 3000000000", "y = i + tl.full([], 3000000000, tl.int64)", "y = i + 3000000000"),
    ("i * 3 - 2", "y = i * 3 - 2", "y = i * 3 - 2"),
    ("where(m, 5, 3000000001)", "y = tl.where(m, 5, tl.full([], 3000000001, tl.int64))",
     "y = torch.where(m, torch.tensor(5), torch.tensor(3000000001))"),
    ("i - -3000000000", "y = i - -tl.full([], 3000000000, tl.int64)", "y = i - -3000000000"),
    # Float math: floats, as before (3000000000 ** 3 would overflow int64).
    ("f * 3000000000 ** 3", "y = f * (3000000000.0 * 3000000000.0 * 3000000000.0)",
     "y = f * (3000000000.0 * 3000000000.0 * 3000000000.0)"),
    ("f + 3", "y = f + 3", "y = f + 3.0"),
])
def test_int_literals_of_int_math_are_ints_and_of_float_math_floats(source, triton, torch_):
    expression = parse_expression(source, set(NAMES))
    assert assignments([("y", expression)], "triton", kinds=NAMES) == [triton]
    assert assignments([("y", expression)], "torch", kinds=NAMES) == [torch_]


SPEC = """\
op: int_op
kind: elementwise
inputs:
  a: {dtype: [int32, int64]}
  b: {dtype: a}
  x: {dtype: [float32]}
outputs:
  y: {dtype: a}
compute:
  y: a + b
tiles:
  N: {block: BLOCK, sizes: [1024]}
"""



@pytest.mark.parametrize("old, new, key, words", [
    ("y: a + b", "y: a * x", "compute.y", "output 'y' holds int values but its expression gives float values"),
    ("y: a + b", "y: exp(a)", "compute.y", "exp() of an int value"),
    ("y: a + b", "y: a > b", "compute.y", "a comparison gives bool values, but output 'y' holds int values"),
    ("a: {dtype: [int32, int64]}", "a: {dtype: [int32, float32]}", "inputs.a.dtype", "mixes float and int dtypes"),
    ("y: a + b", "y: a + 3000000000", "compute.y", "the literal 3000000000 does not fit in int32, a dtype of input 'a'"),
    ("y: a + b", "y: maximum(a, -2147483649)", "compute.y", "the literal -2147483649 does not fit in int32"),
    ("y: a + b", "y: where(x > 0, 1, 3000000000)", "compute.y", "the literal 3000000000 does not fit in int32, a dtype of output 'y'"),
    ("kind: elementwise", "kind: reduction", "inputs.a.dtype.0", "unknown or unsupported dtype 'int32'"),
])
def test_bad_integer_specs_get_one_line(tmp_path, old, new, key, words):
    assert old in SPEC
    text = SPEC.replace(old, new)
    if new == "kind: reduction":
        text = text.replace("  a: {dtype: [int32, int64]}", "  a: {dtype: [int32, int64], shape: [..., N]}")
    spec, errors = validated(tmp_path, text)
    assert spec is None
    assert any(f": {key}: " in e and words in e for e in errors), errors


@pytest.mark.parametrize("new", ["y: a * 2 + b", "y: relu(a - b)", "y: where(x > 0, a, b)", "y: maximum(a, -2147483648)",
                                 "y: a * x * 3000000000"])  # (the last in float)
def test_integer_math_into_an_integer_output_is_accepted(tmp_path, new):
    spec, errors = validated(tmp_path, SPEC.replace("y: a + b", new).replace(
        "  y: {dtype: a}", "  y: {dtype: x}" if "x *" in new else "  y: {dtype: a}"))
    assert errors == [] and spec is not None


def test_a_literal_past_int32_is_accepted_beside_int64_inputs_only(tmp_path):
    spec, errors = validated(tmp_path, SPEC.replace("y: a + b", "y: a + 3000000000").replace(
        "a: {dtype: [int32, int64]}", "a: {dtype: [int64]}"))
    assert errors == [] and spec is not None


BIG_LITERALS = """\
op: big_literals
kind: elementwise
doc: int64 math with literals past 32 bits.
inputs:
  a: {dtype: [int64]}
outputs:
  y: {dtype: a}
  z: {dtype: a}
  w: {dtype: a}
compute:
  y: where(a > 0, a, 5000000001)
  z: a + 5000000001 - 3000000000
  w: where(a > 5, 3000000000, -5)
tiles:
  N: {block: BLOCK, sizes: [256]}
"""


def test_literals_past_int32_compute_exactly_in_int64(tmp_path):
    # They reached kernels as floats (a + 5000000001 rounded to float32) and the oracle's int
    # math as float32 too; Triton would type a bare 3000000000 as uint32 (so where() of it and -5
    # a uint32).
    import torch

    device = kernel_device()
    with built_package(tmp_path, "big_literal_ops", {"big_literals.yaml": BIG_LITERALS}) as package:
        a = torch.tensor([-7, 3, 6, 2**40 + 1, -(2**41)], dtype=torch.int64, device=device)
        y, z, w = package.big_literals(a)
    values = a.tolist()
    assert y.tolist() == [v if v > 0 else 5000000001 for v in values]
    assert z.tolist() == [v + 5000000001 - 3000000000 for v in values]
    assert w.tolist() == [3000000000 if v > 5 else -5 for v in values]
    assert_generated_tests_pass(tmp_path, {"big_literals.yaml": BIG_LITERALS}, ["big_literals"], "matches_reference")


INT_MATH_IN_GRADIENTS = """\
op: offsets_scale
kind: elementwise
inputs:
  j: {dtype: [int64]}
  x: {dtype: [float32, float64]}
outputs:
  z: {dtype: x}
compute:
  z: where(j - 16777219 > 0, x * x, -x) + x * (j - 16777219)
tiles:
  N: {block: BLOCK, sizes: [256]}
"""


def test_the_int_math_of_a_gradient_is_exact_as_the_forwards(tmp_path):
    # The backward held `j - 16777219` as `j - 16777219.0`: float32 math, where j = 16777220 and
    # 16777219 both round to 16777220 (the branch not taken, and a gradient of 0 for x * 1), and
    # 2**40 + 1 - 2**40 to 0.
    import torch

    device = kernel_device()
    with built_package(tmp_path, "int_math_gradients", {"offsets_scale.yaml": INT_MATH_IN_GRADIENTS}) as package:
        j = torch.tensor([16777220, 16777219, 16777218, 2**40 + 16777220, 3], dtype=torch.int64, device=device)
        x = torch.tensor([1.5, -2.0, 0.25, 1.0, 2.0], dtype=torch.float32, device=device, requires_grad=True)
        (got,) = torch.autograd.grad(package.offsets_scale(j, x).sum(), x)
    offsets = [v - 16777219 for v in j.tolist()]
    want = [(2 * v if o > 0 else -1.0) + o for v, o in zip(x.tolist(), offsets)]
    assert got.tolist() == [float(torch.tensor(w, dtype=torch.float32)) for w in want]


def test_a_bool_output_takes_a_comparison_and_a_float_one_an_int_result(tmp_path):
    text = SPEC.replace("  y: {dtype: a}", "  y: {dtype: [bool]}\n  z: {dtype: x}").replace(
        "  y: a + b", "  y: a > b\n  z: a + b")
    spec, errors = validated(tmp_path, text)
    assert errors == [] and spec is not None
    assert isinstance(dict(spec.body)["y"].tree.body, ast.Compare)


PICK = """\
op: pick
kind: elementwise
inputs:
  m: {dtype: [bool]}
  a: {dtype: [int32, int64]}
scalars:
  lo: {type: int, default: 0}
  hi: {type: int, default: 1}
outputs:
  y: {dtype: [int32]}
  z: {dtype: a}
compute:
  y: where(m, lo, hi)
  z: where(m, hi, lo) * 2
tiles:
  N: {block: BLOCK, sizes: [1024]}
"""


def test_an_int_scalar_stored_alone_into_an_int_output_must_fit_its_dtype(tmp_path):
    # where(m, lo, hi) meets no int tensor, but its value is stored into y (int32) and z (a's dtype).
    import torch

    from tilegen.build import load_specs
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "pick.yaml").write_text(PICK)
    spec, = [item.spec for item in load_specs([tmp_path / "specs"], tmp_path)]
    assert spec.int_scalars_met() == {scalar: ([], [("y", "torch.int32"), ("z", "a")]) for scalar in ("lo", "hi")}
    device = kernel_device()
    with built_package(tmp_path, "pick_ops") as package:
        m = torch.tensor([True, False, True], device=device)
        a = torch.zeros(3, dtype=torch.int64, device=device)
        y, z = package.pick(m, a, lo=-5, hi=7)
        assert y.tolist() == [-5, 7, -5] and z.tolist() == [14, -10, 14]
        with pytest.raises(ValueError, match=r"pick: argument 'hi' = 4294967296 does not fit in int32, "
                                             r"the dtype of output y it is computed with"):
            package.pick(m, a, lo=0, hi=2**32)


MIXED_KINDS = """\
op: mixed_kinds
kind: elementwise
inputs:
  i: {dtype: [int32, int64]}
  x: {dtype: [float32, float64]}
scalars:
  k: {type: int, default: 3}
outputs:
  y: {dtype: x}
  j: {dtype: i}
  big: {dtype: [bool]}
compute:
  y: x * i + k
  j: i * k - abs(i)
  big: x > i
tiles:
  N: {block: BLOCK, sizes: [1024]}
"""


def test_an_op_whose_first_input_is_an_int_checks_its_float_gradients_at_their_own_tolerance(tmp_path):
    """The generated tests run such an op in its int dtypes; the float input's gradient is
    compared at its own dtype's tolerance, not the int's (exact), and the int outputs exactly."""
    assert_generated_tests_pass(tmp_path, {"mixed_kinds.yaml": MIXED_KINDS}, ["mixed_kinds"],
                                "gradients or reference or broadcast")


HALF_BESIDE_BOOL = """\
op: half_beside_bool
kind: elementwise
inputs:
  m: {dtype: [bool]}
  n: {dtype: [bool]}
  j: {dtype: [int32, int64]}
  x: {dtype: [float16, float32]}
scalars:
  alpha: {type: float, default: 0.3}
outputs:
  y: {dtype: j}
  z: {dtype: x}
compute:
  y: maximum(j, 5) * n
  z: tanh(where(m, x, 0.5) * where(m, 0.5, alpha))
tiles:
  N: {block: BLOCK, sizes: [256]}
"""


def test_an_op_whose_first_input_is_a_bool_checks_its_half_second_derivatives_at_their_own_tolerance(tmp_path):
    """Run in its bool dtype, such an op's float input takes its first dtype, float16: the second
    derivatives (create_graph=True) come back in float16 and are held to float16's tolerance, not
    float32's."""
    assert_generated_tests_pass(tmp_path, {"half_beside_bool.yaml": HALF_BESIDE_BOOL}, ["half_beside_bool"],
                                "second_derivatives")


BOOL_EXTREMES = """\
op: bool_extremes
kind: elementwise
inputs:
  m: {dtype: [bool]}
  n: {dtype: [bool]}
  i: {dtype: [int32, int64]}
  x: {dtype: [float32, float64]}
outputs:
  either: {dtype: [bool]}
  both: {dtype: [bool]}
  j: {dtype: i}
  y: {dtype: x}
  plus: {dtype: [bool]}
  times: {dtype: [bool]}
  h: {dtype: i}
  z: {dtype: x}
  q: {dtype: x}
scalars:
  k: {type: int, default: 2}
compute:
  either: maximum(m, n)
  both: minimum(m, n)
  j: minimum(m, i) + maximum(n, 1)
  y: maximum(m, x) * x + minimum(x, n) + maximum(m, 0.5)
  plus: m + n
  times: m * n * m
  h: (m + n) * i + m * k + m * n
  z: where(m + n, x * (m * n), -x) + (m + n) * x
  q: m / n
tiles:
  N: {block: BLOCK, sizes: [1024]}
"""


def test_maximum_minimum_plus_and_times_of_bools_are_pytorchs(tmp_path):
    """Of two bools maximum and + are a logical or, minimum and * an and (True is 1, above False: a
    kernel that took it for the signed 1-bit -1 would swap them; one that added them as 1-bit ints
    would make True + True False), alone and inside arithmetic, where a number beside a bool takes
    its 1 or 0; the gradients reach x alone."""
    import torch

    device = kernel_device()
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "bool_extremes.yaml").write_text(BOOL_EXTREMES)
    with built_package(tmp_path, "bool_extremes_ops") as package:
        m = torch.tensor([True, True, False, False], device=device)
        n = torch.tensor([True, False, True, False], device=device)
        i = torch.tensor([-3, 5, -3, 5], dtype=torch.int32, device=device)
        x = torch.tensor([-2.0, 0.25, 3.0, float("nan")], device=device, requires_grad=True)
        either, both, j, y, plus, times, h, z, q = package.bool_extremes(m, n, i, x, k=3)
        torch.testing.assert_close(q, (m / n).to(q.dtype), equal_nan=True)  # 1, inf, 0, NaN: true division
        assert either.tolist() == [True, True, True, False] and both.tolist() == [True, False, False, False]
        assert j.dtype == torch.int32 and j.tolist() == (torch.minimum(m, i) + torch.maximum(n, torch.tensor(1))).tolist()
        assert plus.dtype == times.dtype == torch.bool
        assert plus.tolist() == (m + n).tolist() == either.tolist() and times.tolist() == (m * n * m).tolist()
        assert h.dtype == torch.int32 and h.tolist() == ((m + n) * i + m * 3 + m * n).tolist()
        want = torch.maximum(m, x) * x + torch.minimum(x, n) + torch.clamp(m, min=0.5)
        want_z = torch.where(m + n, x * (m * n), -x) + (m + n) * x
        torch.testing.assert_close(y, want, equal_nan=True)
        torch.testing.assert_close(z, want_z, equal_nan=True)
        # (A loss reading both: one reading z alone would take y's gradient as zeros, and 0 times
        # y's derivative at the NaN is NaN, where PyTorch's separate graph for z adds nothing.)
        g, = torch.autograd.grad((y + z)[:3].sum(), x)
        w, = torch.autograd.grad((want + want_z)[:3].sum(), x)
        torch.testing.assert_close(g, w, equal_nan=True)
    assert_generated_tests_pass(tmp_path, {"bool_extremes.yaml": BOOL_EXTREMES}, ["bool_extremes"],
                                "reference or broadcast or gradients")


@pytest.mark.parametrize("source, expected", [
    ("m + m", "maximum(m, m)"), ("m * m", "minimum(m, m)"), ("(m + m) * m", "minimum(maximum(m, m), m)"),
    ("where(m * m, f, -f) + (m + m) * f", "where(minimum(m, m), f, -f) + maximum(m, m) * f"),
    ("m + i", "m + i"), ("m * k", "m * k"), ("m * f", "m * f"), ("i + j", "i + j"),  # arithmetic beside a number
])
def test_plus_and_times_of_two_bools_are_written_as_or_and_and(source, expected):
    """Triton adds two 1-bit ints modulo 2 (True + True would be False): the spec's tree spells
    PyTorch's or/and as maximum/minimum, which every emitter spells right for bools."""
    tree = as_logic(parse_expression(source, set(NAMES)).tree, NAMES)
    assert ast.unparse(tree) == expected


BOOL_SCALARS = """\
op: bool_scalars
kind: elementwise
inputs:
  x: {dtype: [float32, float64]}
  m: {dtype: [bool]}
  i: {dtype: [int32, int64]}
scalars:
  neg: {type: bool, default: false}
  keep: {type: bool, default: true}
outputs:
  y: {dtype: x}
  both: {dtype: [bool]}
  j: {dtype: i}
compute:
  y: where(neg, -x, x) * keep + maximum(keep, x) + x * (m + neg)
  both: m * keep + neg
  j: i * keep + neg
tiles:
  N: {block: BLOCK, sizes: [1024]}
"""


@pytest.mark.parametrize("default, words", [("1", "1 is not a valid bool (true or false)"),
                                            ("0.0", "0.0 is not a valid bool"), ("'no'", "'no' is not a valid bool")])
def test_a_bool_scalars_default_is_true_or_false(tmp_path, default, words):
    spec, errors = validated(tmp_path, BOOL_SCALARS.replace("default: false", f"default: {default}"))
    assert spec is None
    assert any(": scalars.neg.default: " in e and words in e for e in errors), errors


def test_bool_scalars_select_and_count_as_pythons_bools_in_pytorch(tmp_path):
    """A bool scalar is a condition of where() and, beside bool values, an operand of their or/and;
    beside a number it is its 1 or 0, as a Python bool in PyTorch's math. Each value of each
    scalar gives PyTorch's result and gradient; a number where a bool belongs is refused."""
    import torch

    device = kernel_device()
    with built_package(tmp_path, "bool_scalar_ops", {"bool_scalars.yaml": BOOL_SCALARS}) as package:
        x = torch.tensor([-2.0, 0.25, 3.0, 0.5], device=device, requires_grad=True)
        m = torch.tensor([True, False, True, False], device=device)
        i = torch.tensor([-3, 5, 7, 0], dtype=torch.int32, device=device)
        for neg in (False, True):
            for keep in (False, True):
                y, both, j = package.bool_scalars(x, m, i, neg=neg, keep=keep)
                want = torch.where(torch.tensor(neg), -x, x) * keep + torch.clamp(x, min=keep) + x * (m + neg)
                torch.testing.assert_close(y, want)
                assert both.dtype == torch.bool and both.tolist() == (m * keep + neg).tolist()
                assert j.dtype == torch.int32 and j.tolist() == (i * keep + neg).tolist()
                g, = torch.autograd.grad(y.square().sum(), x)
                w, = torch.autograd.grad(want.square().sum(), x)
                torch.testing.assert_close(g, w)
        if device == "cuda":  # a repeat call is served by the compiled call path, the bool a byte there
            from tilegen import runtime as rt
            from tilegen.runtime import callpath

            if callpath.load(wait=True) is not None:
                with torch.no_grad():
                    for keep in (False, True):  # each value's signature learned (if the calls above did not)
                        package.bool_scalars(x, m, i, neg=True, keep=keep)
                    hits = rt.op_of("bool_scalar_ops.bool_scalars").call_path.table.hits
                    for keep in (False, True, False):
                        y, _, _ = package.bool_scalars(x, m, i, neg=True, keep=keep)
                        torch.testing.assert_close(y, -x * keep + torch.clamp(x, min=keep) + x)
                assert rt.op_of("bool_scalar_ops.bool_scalars").call_path.table.hits - hits == 3
        with pytest.raises(TypeError, match="bool_scalars: argument 'neg' must be a Python bool, got int"):
            package.bool_scalars(x, m, i, neg=1)
        with pytest.raises(TypeError, match="bool_scalars: argument 'keep' must be a Python bool, got Tensor"):
            package.bool_scalars(x, m, i, keep=torch.tensor(True))
    assert_generated_tests_pass(tmp_path, {"bool_scalars.yaml": BOOL_SCALARS}, ["bool_scalars"],
                                "reference or scalar or gradients or compile")


BOOLS_DIVIDED = """\
op: bools_divided
kind: elementwise
inputs:
  x: {dtype: [float32]}
  j: {dtype: [int32, int64]}
  m: {dtype: [bool]}
scalars:
  flag: {type: bool, default: true}
outputs:
  a: {dtype: x}
  b: {dtype: x}
  c: {dtype: x}
  d: {dtype: x}
compute:
  a: flag / j
  b: m / j
  c: j / m
  d: j / flag + m / x
tiles:
  N: {block: BLOCK, sizes: [256]}
"""


@pytest.mark.parametrize("int_dtype", ["int32", "int64"])
def test_a_bool_divides_an_int_and_an_int_a_bool(tmp_path, int_dtype):
    # Triton refuses a division of an int1 and a signed int ("different signedness"): every call
    # of such an op raised. PyTorch's true division takes the bool as its 1 or 0.
    import torch

    device = kernel_device()
    j = torch.tensor([-3, -1, 0, 1, 2, 7], dtype=getattr(torch, int_dtype), device=device)
    m = torch.tensor([True, False, True, False, True, True], device=device)
    x = torch.tensor([0.5, -2.0, 0.0, 3.0, -0.25, 1.0], device=device)
    with built_package(tmp_path, f"bools_divided_{int_dtype}", {"bools_divided.yaml": BOOLS_DIVIDED}) as package:
        for flag in (True, False):
            got = package.bools_divided(x, j, m, flag=flag)
            want = (flag / j, m / j, j / m, j / flag + m / x)
            for one, expected in zip(got, want, strict=True):
                torch.testing.assert_close(one, expected.to(one.dtype), equal_nan=True, rtol=0, atol=0)


FLOATS_BESIDE_INTS = """\
op: floats_beside_ints
kind: elementwise
inputs:
  x: {dtype: [float64]}
  j: {dtype: [int64]}
  m: {dtype: [bool]}
scalars:
  flag: {type: bool, default: true}
  n: {type: int, default: -3}
outputs:
  beside_int: {dtype: x}
  beside_bool: {dtype: x}
  numbers: {dtype: x}
  numbers_meet_int: {dtype: x}
  scalar_and_number: {dtype: x}
compute:
  beside_int: where(m, 0.1, j) + maximum(j, 0.1)
  beside_bool: minimum(0.1, m) * j
  numbers: where(m, 0.1, 2) * x
  numbers_meet_int: where(x > 0, j, where(x < 0, 0.5, -0.25)) * 0.001
  scalar_and_number: where(flag, 0.1, n) + maximum(n, 0.3) + n * j
tiles:
  N: {block: BLOCK, sizes: [256]}
"""


def test_a_float_number_beside_ints_takes_the_dtype_its_neighbours_give_it(tmp_path):
    # In float64 math: a float literal beside int or bool tensors alone is a Python float beside
    # them in PyTorch, float32 (the kernel and the oracle disagreed: the oracle took it as
    # float64); numbers alone, and numbers beside scalars, are float64 (the kernel made
    # `where(x < 0, 0.5, -0.25)` a float32 tensor, which took j's math to float32, and
    # `where(flag, 0.1, n)` float32, n being an int argument of the kernel).
    import torch

    device = kernel_device()
    j = torch.tensor([3, -7, 123456789, 5, 16777217, -2], dtype=torch.int64, device=device)
    m = torch.tensor([True, False, True, False, True, False], device=device)
    x = torch.tensor([0.5, -2.0, 0.0, 3.0, -0.25, 1.0], dtype=torch.float64, device=device)
    with built_package(tmp_path, "floats_beside_ints", {"floats_beside_ints.yaml": FLOATS_BESIDE_INTS}) as package:
        got = package.floats_beside_ints(x, j, m, n=-3)
    f64 = torch.float64
    inner = torch.where(x < 0, torch.tensor(0.5, dtype=f64), torch.tensor(-0.25, dtype=f64))
    want = (
        (torch.where(m, 0.1, j) + torch.clamp(j, min=0.1)).to(f64),  # float32, as PyTorch's
        (torch.clamp(m, max=0.1) * j).to(f64),
        torch.where(m, torch.tensor(0.1, dtype=f64), torch.tensor(2.0, dtype=f64)) * x,
        torch.where(x > 0, j.to(f64), inner) * 0.001,
        torch.full_like(x, 0.1 + 0.3) + (-3 * j).to(f64),
    )
    for one, expected in zip(got, want, strict=True):
        torch.testing.assert_close(one, expected, rtol=1e-15, atol=0)


def test_the_oracle_types_float_numbers_beside_ints_as_the_kernels_do(tmp_path):
    # The generated tests' float64 oracle took a float beside int tensors as float64 where
    # PyTorch, the kernel and the eager code take float32: every test of such an op failed.
    assert_generated_tests_pass(tmp_path, {"floats_beside_ints.yaml": FLOATS_BESIDE_INTS,
                                           "bools_divided.yaml": BOOLS_DIVIDED},
                                ["floats_beside_ints", "bools_divided"], "matches_reference or scalars")


INT_RESULTS_IN_HALF_OUTPUTS = {
    "int_to_half.yaml": """\
op: int_to_half
kind: elementwise
inputs:
  x: {dtype: [bfloat16, float16, float32, float64]}
  j: {dtype: [int32, int64]}
  m: {dtype: [bool]}
outputs:
  y: {dtype: x}
  z: {dtype: x}
  w: {dtype: x}
compute:
  y: 7 - j
  z: m + m
  w: j * m
tiles:
  N: {block: BLOCK, sizes: [256]}
""",
    "bools_of_rows.yaml": """\
op: bools_of_rows
kind: reduction
inputs:
  x: {dtype: [bfloat16, float16, float32], shape: [..., N]}
  keep: {dtype: [bool], shape: [..., N]}
steps:
  big: x > mean(x)
outputs:
  y: {dtype: x, shape: [..., N]}
  z: {dtype: x, shape: [..., N]}
compute:
  y: keep * big
  z: big + keep
tiles:
  N: {block: BLOCK_N, sizes: [32]}
""",
}


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32", "float64"])
def test_int_and_bool_results_are_stored_in_half_outputs_as_pytorch_converts_them(tmp_path, dtype):
    # Triton's interpreter turned an int into bfloat16 by taking its bits as a float's (7 - 1
    # stored as 5.5e-40), and a bool into bfloat16 not at all (an error): the stores now go by
    # way of float32, as PyTorch's conversion does. (The interpreter rounds float32 to bfloat16
    # toward zero, the GPU to nearest: within one bfloat16 step there.)
    import torch

    device = kernel_device()
    dt = getattr(torch, dtype)
    step = {"bfloat16": 2 ** -7}.get(dtype, 0.0)
    j = torch.tensor([1, -5, 300, 40000, 2**24 + 1, -(2**31) + 8], dtype=torch.int64, device=device)
    m = torch.tensor([True, False, True, True, False, True], device=device)
    with built_package(tmp_path, f"int_results_{dtype}", INT_RESULTS_IN_HALF_OUTPUTS) as package:
        for ints in (j.to(torch.int32), j):
            got = package.int_to_half(torch.zeros(6, dtype=dt, device=device), ints, m)
            want = ((7 - ints).to(dt), (m | m).to(dt), (ints * m).to(dt))
            for one, expected in zip(got, want, strict=True):
                torch.testing.assert_close(one, expected, rtol=step, atol=0)
        if dtype != "float64":
            x = torch.randn(3, 70, device=device).to(dt)
            keep = torch.rand(3, 70, device=device) > 0.5
            big = x.double() > x.double().mean(-1, keepdim=True)
            y, z = package.bools_of_rows(x, keep)
            assert torch.equal(y, (keep & big).to(dt)) and torch.equal(z, (keep | big).to(dt))
