"""Specs at the edges of what the language says, built and run through their generated tests (in
Triton's interpreter without a GPU): a matmul output that reads no accumulator, float64 math
asked for beside bfloat16 tensors, a matmul whose output dtype is not its operands', a matmul
listing bfloat16 first or alone (the interpreter runs none of its bfloat16), reduction outputs
along the row of a value per row or of a weight alone, a softmax with a temperature per row (whose gradient, at a temperature near zero, PyTorch's own float32
math gets to a few digits only), a float32-only input of an op run in float64."""

from __future__ import annotations

import math
import os

import pytest
import torch

from tests.conftest import REPO, assert_generated_tests_pass, built_package, generated_tests_run

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
needs_backend = pytest.mark.skipif(not INTERPRET and not torch.cuda.is_available(),
                                   reason="needs a CUDA GPU, or TRITON_INTERPRET=1")

# `d` reads no accumulator: given a 0-d `r`, PyTorch's r * 2 is 0-d where the op writes [M, N].
NO_ACC = """
op: mm_no_acc
kind: matmul
doc: c = acc + r, and d = r * 2 beside it.
inputs:
  a: {dtype: [float32], shape: [M, K]}
  b: {dtype: a, shape: [K, N]}
  r: {dtype: a, shape: [M, N]}
outputs:
  c: {dtype: a, shape: [M, N]}
  d: {dtype: a, shape: [M, N]}
epilogue:
  c: acc + r
  d: r * 2
tiles:
  M: {block: BM, sizes: [32]}
  N: {block: BN, sizes: [32]}
  K: {block: BK, sizes: [32]}
"""

# Outputs that read an [N] or an [M] epilogue input alone are a row or a column of the tile: a
# tensor descriptor's store takes the whole tile (it refused them before they were widened).
PART_OF_A_TILE = """
op: mm_part_tile
kind: matmul
doc: c = acc * s + bias, beside 2 * bias and s * alpha spread over the output.
inputs:
  a: {dtype: [float32], shape: [M, K]}
  b: {dtype: a, shape: [K, N]}
  s: {dtype: a, shape: [M]}
  bias: {dtype: a, shape: [N]}
scalars:
  alpha: {type: float, default: 0.5}
outputs:
  c: {dtype: a, shape: [M, N]}
  e: {dtype: a, shape: [M, N]}
  f: {dtype: a, shape: [M, N]}
epilogue:
  c: acc * s + bias
  e: bias * 2.0
  f: s * alpha
tiles:
  M: {block: BM, sizes: [32]}
  N: {block: BN, sizes: [32]}
  K: {block: BK, sizes: [32]}
"""

# Half-precision operands, a float32 output: its backward keeps the product in the operands' dtype
# (where(): the kink is decided on it), as eager PyTorch's reads its product's rounded result.
WIDER_OUT = """
op: mm_wider_out
kind: matmul
doc: c = leaky(acc + r), in float32 from half-precision operands.
inputs:
  a: {dtype: [float16, float32], shape: [M, K]}
  b: {dtype: a, shape: [K, N]}
  r: {dtype: a, shape: [M, N]}
outputs:
  c: {dtype: [float32], shape: [M, N]}
epilogue:
  c: where(acc + r > 0.0, acc + r, 0.1 * (acc + r))
tiles:
  M: {block: BM, sizes: [32]}
  N: {block: BN, sizes: [32]}
  K: {block: BK, sizes: [32]}
"""

WIDE = """
op: wide_exp
kind: elementwise
doc: y = exp(a) - exp(b), in float64 whatever the inputs.
inputs:
  a: {dtype: [bfloat16, float32]}
  b: {dtype: a}
outputs:
  y: {dtype: a}
dtypes:
  compute: float64
compute:
  y: exp(a) - exp(b) + 1e-7 * a
tiles:
  N: {block: BLOCK, sizes: [256]}
"""

# t's gradient sums the row's terms, each scaled by 1/t^2: at a temperature near 0.015 they reach
# 1171 where their sum is -2.98, and any float32 computation strays by their rounding (1.2e-4 on
# the H200, where the float32 tolerance of the sum would allow 4.6e-5; PyTorch's own float32 on
# the CPU 3e-4 at t = 0.0085). The generated tests hold each element of such a gradient to the
# size of its terms, and to PyTorch's own float32 error where that is larger.
TEMPERATURE = """
op: temp_softmax
kind: reduction
doc: y = softmax(x / t) with a temperature t per row.
inputs:
  x: {dtype: [float16, float32], shape: [..., N]}
  t: {dtype: x, shape: [...]}
outputs:
  y: {dtype: x, shape: [..., N]}
steps:
  z: x / t
  m: detach(max(z))
  e: exp(z - m)
compute:
  y: e / sum(e)
tiles:
  N: {block: BLOCK_N, sizes: [64, 128]}
"""

# c is float32 whatever x is: run in float64, its gradient is a float32 tensor, held to float32's
# tolerance and not perturbed by gradcheck (whose finite differences would measure its rounding).
FLOAT32_BESIDE_FLOAT64 = """
op: scaled_by_float32
kind: elementwise
doc: y = x * s + c over [B, M, N], s [N] in x's dtype and c [B, 1, 1] in float32.
inputs:
  x: {dtype: [float32, float64], shape: [B, M, N]}
  s: {dtype: x, shape: [N]}
  c: {dtype: [float32], shape: [B, 1, 1]}
outputs:
  y: {dtype: x}
compute:
  y: x * s + c * x
tiles:
  N: {block: BLOCK, sizes: [256]}
"""


# Constants written as functions of numbers (folded at the build): GELU's tanh form in an
# elementwise op, and a matmul epilogue's and a reduction's.
FOLDED_CONSTANTS = {
    "gelu_tanh.yaml": """
op: gelu_tanh
kind: elementwise
doc: GELU's tanh approximation, its constant written as sqrt(2 / pi).
inputs:
  x: {dtype: [float16, float32]}
outputs:
  y: {dtype: x}
compute:
  y: 0.5 * x * (1.0 + tanh(sqrt(2.0 / 3.141592653589793) * (x + 0.044715 * x ** 3)))
tiles:
  N: {block: BLOCK, sizes: [1024]}
""",
    "mm_folded.yaml": """
op: mm_folded
kind: matmul
doc: c = acc * rsqrt(2.0) + erf(0.5)
inputs:
  a: {shape: [M, K], dtype: [float32]}
  b: {shape: [K, N], dtype: a}
outputs:
  c: {shape: [M, N], dtype: a}
tiles:
  M: {block: BM, sizes: [32]}
  N: {block: BN, sizes: [32]}
  K: {block: BK, sizes: [32]}
epilogue:
  c: acc * rsqrt(2.0) + erf(0.5)
""",
    "softmax_folded.yaml": """
op: softmax_folded
kind: reduction
doc: softmax of x * rsqrt(64), shifted by log(2) too.
inputs:
  x: {dtype: [float32], shape: [..., N]}
outputs:
  y: {dtype: x, shape: [..., N]}
steps:
  s: x * rsqrt(64.0)
  m: max(s)
  e: exp(s - m - log(2.0))
compute:
  y: e / sum(e)
tiles:
  N: {block: BLOCK_N, sizes: [64]}
""",
}


@needs_backend
def test_functions_of_numbers_alone_are_folded_in_each_kind(tmp_path):
    assert_generated_tests_pass(tmp_path, FOLDED_CONSTANTS, ["gelu_tanh", "mm_folded", "softmax_folded"],
                                "matches_reference or gradients_match_autograd")


def test_a_float32_input_of_an_op_run_in_float64_gets_its_gradient_tests(tmp_path):
    assert_generated_tests_pass(tmp_path, {"scaled_by_float32.yaml": FLOAT32_BESIDE_FLOAT64}, ["scaled_by_float32"],
                                "gradients_match or gradcheck")


def test_a_matmul_output_that_reads_no_accumulator_has_the_output_shape_in_the_oracle(tmp_path):
    assert_generated_tests_pass(tmp_path, {"mm_no_acc.yaml": NO_ACC}, ["mm_no_acc"],
                                "epilogue_inputs_broadcast or matches_reference")


def test_matmul_outputs_of_a_row_or_a_column_of_the_tile_are_stored_whole(tmp_path):
    assert_generated_tests_pass(tmp_path, {"mm_part_tile.yaml": PART_OF_A_TILE}, ["mm_part_tile"],
                                "tensor_descriptor_stores or matches_reference or gradients_match_autograd or "
                                "require_grad_as_the_oracles")


def test_a_matmul_with_a_wider_output_keeps_its_product_in_the_operands_dtype(tmp_path):
    assert_generated_tests_pass(tmp_path, {"mm_wider_out.yaml": WIDER_OUT}, ["mm_wider_out"],
                                "training_variant or gradients_match or matches_reference")


@needs_backend
def test_float64_math_beside_bfloat16_is_right_on_a_gpu_and_refused_by_the_interpreter(tmp_path):
    """Triton's interpreter converts float64 to bfloat16 wrongly (garbage): the op refuses there,
    and its generated tests skip bfloat16 there; float32 runs everywhere."""
    with built_package(tmp_path, "wide_ops", {"wide_exp.yaml": WIDE}) as package:
        device = "cpu" if INTERPRET else "cuda"
        a, b = (torch.randn(300, device=device, dtype=torch.bfloat16) for _ in range(2))
        if INTERPRET:
            with pytest.raises(TypeError, match="wide_exp: bfloat16 tensors with float64 math, which Triton's "
                                                "interpreter converts to bfloat16 wrongly"):
                package.wide_exp(a, b)
        else:
            want = (a.double().exp() - b.double().exp() + 1e-7 * a.double()).to(torch.bfloat16)
            torch.testing.assert_close(package.wide_exp(a, b), want, rtol=1e-2, atol=1e-2)
        x, y = a.float(), b.float()
        torch.testing.assert_close(package.wide_exp(x, y), (x.double().exp() - y.double().exp() + 1e-7 * x.double()).float())


def test_the_generated_tests_of_float64_math_beside_bfloat16_pass(tmp_path):
    run = assert_generated_tests_pass(tmp_path, {"wide_exp.yaml": WIDE}, ["wide_exp"], "matches_reference")
    if INTERPRET or not torch.cuda.is_available():
        assert "converts float64 math to bfloat16 wrongly" in run.stdout or " skipped" in run.stdout


def test_a_per_row_temperatures_gradient_is_held_to_the_size_of_its_terms(tmp_path):
    assert_generated_tests_pass(tmp_path, {"temp_softmax.yaml": TEMPERATURE}, ["temp_softmax"],
                                "gradients or reduced_axis")


def test_the_float32_allowance_still_fails_a_wrong_gradient():
    # The allowance is PyTorch's float32 error of the same math, element by element: a gradient 1e-4
    # off where float32 math is exact still fails.
    from tilegen import testing as s

    want = torch.linspace(-2, 2, 50, dtype=torch.float64)
    slack = torch.zeros(50, dtype=torch.float64)
    slack[7] = 1e-3  # (one ill-conditioned element)
    got = want.clone()
    got[7] += 9e-4
    s.assert_same_gradients([got], [want], torch.float32, "within", slack=[slack])
    got[20] *= 1.0001
    got[20] += 1e-4
    with pytest.raises(AssertionError, match="Mismatched elements: 1 / 50"):
        s.assert_same_gradients([got], [want], torch.float32, "beyond", slack=[slack])
    got = want.clone()
    got[7] += 2e-3  # (beyond the allowance there)
    with pytest.raises(AssertionError, match="Mismatched elements: 1 / 50"):
        s.assert_same_gradients([got], [want], torch.float32, "beyond", slack=[slack])


OVERFLOWING = """
op: big_exp
kind: elementwise
doc: y = exp(a) * 30000, past float16's range wherever a > 0.78.
inputs:
  a: {dtype: [float16, float32]}
outputs:
  y: {dtype: a}
compute:
  y: exp(a) * 30000.0
tiles:
  N: {block: BLOCK, sizes: [256]}
"""


def test_a_half_result_past_its_range_is_its_infinity_to_the_generated_tests(tmp_path):
    # The float64 oracle's 60000 * e is no float16: the op's inf is the right float16 result, in
    # the output, its gradient and its second derivative alike.
    assert_generated_tests_pass(tmp_path, {"big_exp.yaml": OVERFLOWING}, ["big_exp"],
                                "matches_reference or gradients_match or second_derivatives")


# The branch not taken overflows float32 wherever x > 0.89: its zero gradient times exp(100 x) is
# NaN in PyTorch's float32 autograd of the same math, as in the op's, where the float64 oracle's
# exp(100 x) is finite.
UNTAKEN_OVERFLOW = """
op: untaken_overflow
kind: elementwise
doc: y = x where x > 0, else exp(100 x).
inputs:
  x: {dtype: [float32, float64]}
outputs:
  y: {dtype: x}
compute:
  y: where(x > 0, x, exp(100.0 * x))
tiles:
  N: {block: BLOCK, sizes: [256]}
"""


def test_a_gradient_that_overflows_in_float32_math_as_in_pytorchs_passes_its_generated_tests(tmp_path):
    assert_generated_tests_pass(tmp_path, {"untaken_overflow.yaml": UNTAKEN_OVERFLOW}, ["untaken_overflow"],
                                "gradients or tangents or jvp")


# A backward that reruns the forward's sums (relu of a centred value) has no math in PyTorch's ops:
# torch.func refuses it by name. jvp takes tangents of the float inputs alone (the mask has none):
# the test called it with None for the mask's, which jvp itself refused first.
MASKED_CENTRED = """
op: masked_centred
kind: reduction
doc: y = relu(x - mean(x)) where keep, else 0.
inputs:
  x: {dtype: [float32], shape: [..., N]}
  keep: {dtype: [bool], shape: [..., N]}
outputs:
  y: {dtype: x, shape: [..., N]}
steps:
  m: mean(x)
compute:
  y: where(keep, relu(x - m), 0.0)
tiles:
  N: {block: BLOCK_N, sizes: [64]}
"""


def test_torch_func_refuses_by_name_an_op_with_a_mask_whose_backward_is_a_kernels(tmp_path):
    assert_generated_tests_pass(tmp_path, {"masked_centred.yaml": MASKED_CENTRED}, ["masked_centred"],
                                "refused_by_name")


def test_the_overflow_allowance_takes_a_non_finite_result_there_alone():
    # Where float32 math of the oracle is not finite and the float64 oracle is, the op's NaN or inf
    # is float32's; a finite result there is still held to the oracle, and elsewhere a NaN fails.
    from tilegen import testing as s

    # (the last: the oracle's 1e300, past float32's range, is held as inf; float32 math got NaN)
    exact = torch.tensor([1.0, 2.0, 3.0, 4.0, 1e300], dtype=torch.float64)
    yardsticks = [torch.tensor([1.0, float("nan"), 3.0, float("inf"), float("nan")])] * 2 + [exact.clone()]
    allowance = s.float32_error(yardsticks, exact)
    assert torch.isinf(allowance[[1, 3, 4]]).all() and allowance[0] == 0
    want = s.held_by(exact, torch.float32)
    s.assert_same_gradients([torch.tensor([1.0, float("nan"), 3.0, -float("inf"), float("nan")], dtype=torch.float64)],
                            [want], torch.float32, "overflowed", slack=[allowance])
    for wrong in ([1.0, 2.5, 3.0, 4.0, float("inf")], [float("nan"), 2.0, 3.0, 4.0, float("inf")]):
        with pytest.raises(AssertionError, match="Mismatched elements: 1 / 5"):
            s.assert_same_gradients([torch.tensor(wrong, dtype=torch.float64)], [want], torch.float32, "wrong",
                                    slack=[allowance])


def test_an_infinity_where_the_dtype_holds_the_value_still_fails():
    from tilegen import testing as s

    want = torch.tensor([60000.0, 65400.0, 70000.0, -1e6, 65509.0, 65509.0], dtype=torch.float64)
    got = torch.tensor([60000.0, 65400.0, float("inf"), -float("inf"), 65504.0, float("inf")], dtype=torch.float16,
                       device=s.DEVICE)
    # (65509 is a float16 65504, and within float16's tolerance of its edge, 65520: a result
    # rounded within the tolerance may pass it, and its inf is held as right there.)
    s.assert_matches(got, want, torch.float16, "held")
    for wrong in (0, 1):  # (60000 and 65400 are float16 numbers, far from its edge: inf there is wrong)
        bad = got.clone()
        bad[wrong] = float("inf")
        with pytest.raises(AssertionError, match="Mismatched elements: 1 / 6"):
            s.assert_matches(bad, want, torch.float16, "wrong")
    bad = got.clone()
    bad[5] = -float("inf")  # (the other infinity)
    with pytest.raises(AssertionError, match="Mismatched elements: 1 / 6"):
        s.assert_matches(bad, want, torch.float16, "wrong sign")


CANCELLING = """
op: cancelling
kind: elementwise
doc: y = 0.75 / ((a^3 + b) / b), whose sum cancels at some points of random inputs.
inputs:
  a: {dtype: [float32, float64]}
  b: {dtype: a}
outputs:
  y: {dtype: a}
compute:
  y: 0.75 / ((a * a * a + b) / (b * 0.5))
tiles:
  N: {block: BLOCK, sizes: [256]}
"""


# The same sum in a row op and in a matmul's epilogue.
CANCELLING_ROWS = """
op: cancelling_rows
kind: reduction
doc: y = 0.75 / ((x^3 + w) / w) + mean(x), whose sum cancels at some points of random inputs.
inputs:
  x: {dtype: [float32, float64], shape: [..., N]}
  w: {dtype: x, shape: [N]}
outputs:
  y: {dtype: x, shape: [..., N]}
compute:
  y: 0.75 / ((x * x * x + w) / (w * 0.5)) + mean(x)
tiles:
  N: {block: BLOCK_N, sizes: [32]}
"""
CANCELLING_EPILOGUE = """
op: mm_cancelling
kind: matmul
doc: c = 0.75 / ((acc^3 + bias) / bias), whose sum cancels at some points of random inputs.
inputs:
  a: {dtype: [float32], shape: [M, K]}
  b: {dtype: a, shape: [K, N]}
  bias: {dtype: a, shape: [N]}
outputs:
  c: {dtype: a, shape: [M, N]}
epilogue:
  c: 0.75 / ((acc * acc * acc + bias) / (bias * 0.5))
tiles:
  M: {block: BM, sizes: [32]}
  N: {block: BN, sizes: [32]}
  K: {block: BK, sizes: [32]}
"""


def test_an_ill_conditioned_op_is_held_to_float32_maths_own_error(tmp_path):
    # Where a^3 + b cancels, float32 math (PyTorch's as the kernel's) strays from the float64
    # oracle by more than float32's tolerance: the op is held to twice PyTorch's float32 error
    # there, in its outputs, second derivatives and forward-mode tangents, as in its gradients; a
    # row op along another axis and a matmul's training variant too (they were held to the plain
    # tolerance).
    specs = {"cancelling.yaml": CANCELLING, "cancelling_rows.yaml": CANCELLING_ROWS,
             "mm_cancelling.yaml": CANCELLING_EPILOGUE}
    assert_generated_tests_pass(tmp_path, specs, ["cancelling", "cancelling_rows", "mm_cancelling"],
                                "matches_reference or non_contiguous or second_derivatives or gradients_match"
                                " or another_reduced_axis or training_variant or jvp")


def test_a_kernel_that_fuses_a_multiply_into_an_add_is_within_the_float32_allowance():
    # On a GPU the kernel computes a * a * a + b as one fma (rounded once), where PyTorch rounds
    # the product first: where the sum cancels, the two roundings land apart, and PyTorch's can
    # happen to be the closer to the float64 oracle (35 points of 2^20 strayed past twice PyTorch's
    # own error, as the cancelling op's generated test did on an H100). The allowance also counts
    # how far the exact math moves under float32-sized errors in its inputs.
    from tilegen import testing as s

    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(2 ** 20, generator=g), torch.randn(2 ** 20, generator=g)

    def reference(a, b):
        a, b = s.exact(a), s.exact(b)
        return 0.75 / ((a * a * a + b) / (b * 0.5))

    want = reference(a, b)
    fused = ((a * a).double() * a.double() + b.double()).float()  # fma(a * a, a, b)
    got = (0.75 / (fused / (b * 0.5))).to(s.DEVICE)
    allowance, = s.float32_allowances(reference, (a, b), (want,))
    s.assert_matches(got, want, torch.float32, "fused", allowance)
    well_conditioned = int(torch.argmin(allowance / want.abs()))
    got[well_conditioned] *= 1 + 1e-4
    with pytest.raises(AssertionError, match="Mismatched elements: 1 / 1048576"):
        s.assert_matches(got, want, torch.float32, "wrong", allowance)

def test_a_product_summed_in_another_order_is_within_the_float32_allowance():
    # A GPU sums a matmul's K products in its own order (the tensor cores', a tile's, one fma a
    # step): where the epilogue magnifies the difference (acc^3 cancelling a bias), the result
    # strays from the float64 oracle beyond what the operands' rounding moves it (17-34 of 65536
    # elements in reverse order, as on a GPU at 256^3). The allowance counts sqrt(K) roundings of
    # the products' size; a product short of one of its K terms still fails.
    from tilegen import testing as s

    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(256, 256, generator=g) * 256 ** -0.25 for _ in range(2))
    bias = torch.randn(256, generator=g)

    def reference(a, b, bias):
        a, b, bias = s.oracle_float(a), s.oracle_float(b), s.oracle_float(bias)
        acc = s.oracle_product(a, b)
        return 0.75 / ((acc * acc * acc + bias) / (bias * 0.5))

    def epilogue(acc):
        return (0.75 / ((acc * acc * acc + bias) / (bias * 0.5))).to(s.DEVICE)

    want = reference(a, b, bias)
    allowance, = s.float32_allowances(reference, (a, b, bias), (want,))
    acc = torch.zeros(256, 256)
    for k in reversed(range(256)):  # one fma a step, the last term first
        acc = torch.addcmul(acc, a[:, k:k + 1], b[k:k + 1])
    s.assert_matches(epilogue(acc), want, torch.float32, "reversed", allowance)
    with pytest.raises(AssertionError, match="Mismatched elements"):
        s.assert_matches(epilogue(acc - a[:, :1] * b[:1]), want, torch.float32, "short of a term", allowance)


def test_the_float32_allowance_of_an_output_still_fails_a_wrong_value():
    from tilegen import testing as s

    want = torch.linspace(-2, 2, 50, dtype=torch.float64)
    allowance = torch.zeros(50, dtype=torch.float64)
    allowance[7] = 1e-3
    got = want.float().to(s.DEVICE)  # (a kernel's result, where kernels run)
    got[7] += 9e-4
    s.assert_matches(got, want, torch.float32, "within", allowance)
    got[20] += 1e-4  # (where float32 math is exact)
    with pytest.raises(AssertionError, match="Mismatched elements: 1 / 50"):
        s.assert_matches(got, want, torch.float32, "beyond", allowance)


NAN_WHERE_RIGHT = """
op: log_one_minus
kind: elementwise
doc: y = log(1 - b) * a, NaN wherever b > 1.
inputs:
  a: {dtype: [float32]}
  b: {dtype: a}
outputs:
  y: {dtype: a}
compute:
  y: log(1.0 - b) * a
tiles:
  N: {block: BLOCK, sizes: [256]}
"""


def test_an_op_whose_results_hold_nan_passes_opcheck(tmp_path):
    # log(1 - b) is NaN wherever b > 1, eager and compiled alike: opcheck's own AOT check compares
    # them without equal_nan, and failed the op.
    assert_generated_tests_pass(tmp_path, {"log_one_minus.yaml": NAN_WHERE_RIGHT}, ["log_one_minus"], "opcheck")


_calls = []


ROW_SCALED_SUM = """
op: row_scaled_sum
kind: reduction
doc: y = x - sum(t * x) along the row, t a value per row.
inputs:
  x: {dtype: [float32, float64], shape: [..., N]}
  t: {dtype: x, shape: [...]}
outputs:
  y: {dtype: x, shape: [..., N]}
steps:
  s: sum(t * x)
compute:
  y: x - s
tiles:
  N: {block: BLOCK_N, sizes: [64]}
"""


def test_a_per_row_input_stays_in_the_sum_it_multiplies(tmp_path):
    # With t = inf over x of both signs, sum(t * x) is NaN (PyTorch's); t * sum(x), which the
    # kernel computed, is inf: the generated NaN/inf test failed.
    assert_generated_tests_pass(tmp_path, {"row_scaled_sum.yaml": ROW_SCALED_SUM}, ["row_scaled_sum"],
                                "nan_and_inf or matches_reference")

@torch.library.custom_op("tilegen_tests::drifting_log", mutates_args=())
def _drifting_log(x: torch.Tensor) -> torch.Tensor:
    _calls.append(x)
    return x.log() + len(_calls)  # another result at every call (whatever the random seed)


_drifting_log.register_fake(lambda x: torch.empty_like(x))


def test_opcheck_of_results_that_hold_nan_still_compares_them():
    from tilegen import testing as s

    x = torch.linspace(-1, 1, 16)
    with pytest.raises(AssertionError, match="Outputs of the operator are different"):
        s.opcheck(torch.ops.tilegen_tests.drifting_log.default, (x,), torch.float32, test_utils=(s.OPCHECK_AOT,))


BFLOAT16_FIRST = """
op: mm_bf16_first
kind: matmul
doc: c = relu(acc), bfloat16 listed first.
inputs:
  a: {shape: [M, K], dtype: [bfloat16, float16]}
  b: {shape: [K, N], dtype: a}
outputs:
  c: {shape: [M, N], dtype: a}
tiles:
  M: {block: BM, sizes: [32]}
  N: {block: BN, sizes: [32]}
  K: {block: BK, sizes: [32]}
epilogue:
  c: relu(acc)
"""


def test_tests_of_one_dtype_run_in_one_the_interpreter_runs(tmp_path):
    # A matmul listing bfloat16 first runs its tests of one dtype (out=, opcheck, configs) in
    # float16, which the interpreter multiplies; one of bfloat16 alone skips there with the reason.
    assert_generated_tests_pass(tmp_path, {"mm_bf16_first.yaml": BFLOAT16_FIRST}, ["mm_bf16_first"],
                                "out_argument or opcheck or every_candidate")
    alone = BFLOAT16_FIRST.replace("mm_bf16_first", "mm_bf16_alone").replace("[bfloat16, float16]", "[bfloat16]")
    run = generated_tests_run(tmp_path / "alone", {"mm_bf16_alone.yaml": alone}, ["mm_bf16_alone"], "out_argument")
    assert run.returncode == 0, run.stdout[-3000:]
    if INTERPRET:
        assert " passed" not in run.stdout and "1 skipped" in run.stdout, run.stdout[-1000:]


# Outputs along the row ([..., N]) whose value PyTorch would not give that shape: a value per row
# spread along it (its gradient is the row's sum of the incoming one, routed to the max), and a
# weight alone (its oracle's [N] broadcast to the rows).
SPREAD = """
op: spread
kind: reduction
doc: y = max(x) along the whole row; z = w; s = the row's sum.
inputs:
  x: {dtype: [float16, float32], shape: [..., N]}
  w: {dtype: x, shape: [N]}
outputs:
  y: {dtype: x, shape: [..., N]}
  z: {dtype: x, shape: [..., N]}
  s: {dtype: [float32], shape: [...]}
steps:
  m: max(x)
compute:
  y: m
  z: w
  s: sum(x)
tiles:
  N: {block: BLOCK_N, sizes: [64, 128]}
"""


def test_reduction_outputs_along_the_row_of_a_value_per_row_or_a_weight(tmp_path):
    assert_generated_tests_pass(tmp_path, {"spread.yaml": SPREAD}, ["spread"],
                                "matches_reference or gradients or reduced_axis or nan")


# Inputs listed in any order: a weight and a per-row value ahead of the rows, a float32 scale and
# a bool mask ahead of the elementwise inputs whose dtype the op runs in.
INPUTS_IN_ANY_ORDER = {
    "weight_first_norm.yaml": """
op: weight_first_norm
kind: reduction
doc: y = (x - mean) * rsqrt(var + eps) * w + b * t, the weight and a per-row t listed first.
inputs:
  w: {dtype: [float16, bfloat16, float32], shape: [N]}
  t: {dtype: [float32], shape: [...]}
  x: {dtype: w, shape: [..., N]}
  b: {dtype: w, shape: [N]}
scalars:
  eps: {type: float, default: 1.0e-5}
outputs:
  y: {dtype: w, shape: [..., N]}
steps:
  mu: mean(x)
  d: x - mu
  r: rsqrt(mean(d * d) + eps)
compute:
  y: d * r * w + b * t
tiles:
  N: {block: BLOCK_N, sizes: [64, 128, 1024]}
""",
    "scale_first_select.yaml": """
op: scale_first_select
kind: elementwise
doc: z = where(m, x * s, y) with a float32 s and a bool m listed first.
inputs:
  s: {dtype: [float32], shape: [N]}
  m: {dtype: [bool], shape: [..., N]}
  x: {dtype: [float16, bfloat16, float32], shape: [..., N]}
  y: {dtype: x, shape: [..., N]}
outputs:
  z: {dtype: x}
compute:
  z: where(m, x * s, y)
tiles:
  N: {block: BLOCK, sizes: [1024, 2048]}
""",
}


def test_inputs_listed_in_any_order_pass_their_generated_tests(tmp_path):
    # (The bad-argument test cut a weight listed first short: the error names the rows' input,
    # the first to name the axis, and the weight as the one disagreeing.)
    assert_generated_tests_pass(tmp_path, INPUTS_IN_ANY_ORDER, ["weight_first_norm", "scale_first_select"],
                                "matches_reference or bad_arguments or gradients or wrong_device or vmap")
    # The tests run over the dtypes of the input the output follows, not the scale's one dtype
    # (x was tested in float16 alone).
    tests = (tmp_path / "generated" / "tests" / "test_scale_first_select.py").read_text()
    assert "DTYPES = s.dtype_params([torch.float16, torch.bfloat16, torch.float32])" in tests
    assert "return [torch.float32, torch.bool, dtype, dtype]" in tests


FLAGS = {
    "mm_flag.yaml": """
op: mm_flag
kind: matmul
doc: where the product passes a threshold, as a float.
inputs:
  a: {shape: [M, K], dtype: [float16, float32]}
  b: {shape: [K, N], dtype: a}
outputs:
  c: {shape: [M, N], dtype: a}
scalars:
  t: {type: float, default: 0.0}
tiles:
  M: {block: BM, sizes: [32]}
  N: {block: BN, sizes: [32]}
  K: {block: BK, sizes: [32]}
epilogue:
  c: where(acc > t, 1.0, 0.0)
""",
    "mm_flag_res.yaml": """
op: mm_flag_res
kind: matmul
doc: a threshold's flag of the product plus a residual.
inputs:
  a: {shape: [M, K], dtype: [float16, float32]}
  b: {shape: [K, N], dtype: a}
  r: {shape: [M, N], dtype: a}
outputs:
  c: {shape: [M, N], dtype: a}
tiles:
  M: {block: BM, sizes: [32]}
  N: {block: BN, sizes: [32]}
  K: {block: BK, sizes: [32]}
epilogue:
  c: where(acc > 0.0, 1.0, 0.0) + r
""",
}


def test_a_matmul_whose_epilogue_gives_the_operands_no_gradient_has_no_backward_op(tmp_path):
    # A threshold's flag: the accumulator gets no gradient, so no input's gradient needs a
    # backward op (its rendering had an empty tuple[] and read undefined operands); the residual
    # takes its incoming gradient as it is. The ops' generated tests (gradients against autograd
    # of the oracle, opcheck with autograd, a backward under a fullgraph compile) pass.
    assert_generated_tests_pass(tmp_path, FLAGS, ["mm_flag", "mm_flag_res"],
                                "reference or gradient or opcheck or backward or require")
    module = (tmp_path / "generated" / "mm_flag.py").read_text()
    assert "mm_flag_backward" not in module and "rt.Gradients(None," in module


FLOAT_SCALARS = {
    "scale_shift.yaml": """
op: scale_shift
kind: elementwise
doc: y = x * scale + shift, and x clamped above at shift.
inputs:
  x: {dtype: [float32, float64]}
scalars:
  scale: {type: float, default: 0.1}
  shift: {type: float, default: -0.3}
outputs:
  y: {dtype: x}
  z: {dtype: x}
compute:
  y: x * scale + shift
  z: minimum(x, shift)
tiles:
  N: {block: BLOCK, sizes: [64]}
""",
    "tempered_log_softmax.yaml": """
op: tempered_log_softmax
kind: reduction
doc: log_softmax of x * temperature.
inputs:
  x: {dtype: [float32, float64], shape: [..., N]}
scalars:
  temperature: {type: float, default: 0.1}
outputs:
  y: {dtype: x, shape: [..., N]}
steps:
  s: x * temperature
  m: max(s)
compute:
  y: s - m - log(sum(exp(s - m)))
tiles:
  N: {block: BLOCK_N, sizes: [16, 64]}
""",
    "mm_scaled_gate.yaml": """
op: mm_scaled_gate
kind: matmul
doc: C = alpha * (A @ B) where the product passes t, else 0.
inputs:
  a: {shape: [M, K], dtype: [float16, float32]}
  b: {shape: [K, N], dtype: a}
outputs:
  c: {shape: [M, N], dtype: a}
scalars:
  alpha: {type: float, default: 0.1}
  t: {type: float, default: -0.3}
tiles:
  M: {block: BM, sizes: [32]}
  N: {block: BN, sizes: [32]}
  K: {block: BK, sizes: [32]}
epilogue:
  c: where(acc > t, alpha * acc, 0.0)
""",
}


def test_float_scalars_reach_the_math_at_full_precision_eager_and_compiled(tmp_path):
    # Triton's launch passes a Python float as float32, a compiled graph's as float64: float
    # scalars are float64 parameters in every kernel, taken in the math's dtype once. A float64
    # op's scalars (test values a tenth off any float32) then meet its float64 oracle to the last
    # bits, and a float32 op computes the same inside torch.compile as eagerly (on a GPU; the
    # interpreter passes Python floats as they are).
    assert_generated_tests_pass(tmp_path, FLOAT_SCALARS, ["scale_shift", "tempered_log_softmax", "mm_scaled_gate"],
                                "scalars or matches_reference or gradcheck or compiles_whole")
    for op, params in [("scale_shift", "scale_: tl.float64, shift: tl.float64,  # scalars"),  # (scale_: renamed)
                       ("tempered_log_softmax", "temperature: tl.float64,  # scalars"),
                       ("mm_scaled_gate", "alpha: tl.float64, t: tl.float64,  # scalars")]:
        module = (tmp_path / "generated" / f"{op}.py").read_text()
        assert params in module, op


BOOL_SCALARS = {
    "mm_optional_relu.yaml": """
op: mm_optional_relu
kind: matmul
doc: c = relu(acc) where act, else acc, plus r where add.
inputs:
  a: {shape: [M, K], dtype: [float16, float32]}
  b: {shape: [K, N], dtype: a}
  r: {shape: [N], dtype: a}
scalars:
  act: {type: bool, default: true}
  add: {type: bool, default: false}
outputs:
  c: {shape: [M, N], dtype: a}
tiles:
  M: {block: BM, sizes: [32]}
  N: {block: BN, sizes: [32]}
  K: {block: BK, sizes: [32]}
epilogue:
  c: where(act, relu(acc), acc) + r * add
""",
    "soft_or_log.yaml": """
op: soft_or_log
kind: reduction
doc: log_softmax where use_log, else softmax.
inputs:
  x: {dtype: [float32, float64], shape: [..., N]}
scalars:
  use_log: {type: bool, default: false}
outputs:
  y: {dtype: x, shape: [..., N]}
steps:
  m: detach(max(x))
  e: exp(x - m)
  s: sum(e)
compute:
  y: where(use_log, x - m - log(s), e / s)
tiles:
  N: {block: BLOCK_N, sizes: [64]}
""",
}


def test_bool_scalars_choose_a_matmuls_epilogue_and_a_reductions_output(tmp_path):
    # (Elementwise ones: test_categories.) The generated tests run each op at the default and at
    # the other value of every bool scalar, forward, backward and compiled.
    assert_generated_tests_pass(tmp_path, BOOL_SCALARS, ["mm_optional_relu", "soft_or_log"],
                                "scalars or matches_reference or gradcheck or gradients_match or compiles_whole")
    module = (tmp_path / "generated" / "soft_or_log.py").read_text()
    assert "use_log = use_log != 0" in module  # (Triton takes a Python bool as a byte: a 1-bit condition)


REQUIRED_SCALARS = {
    "scaled_req.yaml": """
op: scaled_req
kind: elementwise
doc: y = x * scale + shift, where (flip) negated; no scalar has a default.
inputs:
  x: {dtype: [float32]}
scalars:
  scale: {type: float}
  shift: {type: int}
  flip: {type: bool}
outputs:
  y: {dtype: x}
compute:
  y: where(flip, -x, x) * scale + shift
tiles:
  N: {block: BLOCK, sizes: [256]}
""",
    "mm_req.yaml": """
op: mm_req
kind: matmul
doc: c = acc * scale, scale required.
inputs:
  a: {shape: [M, K], dtype: [float32]}
  b: {shape: [K, N], dtype: a}
scalars:
  scale: {type: float}
outputs:
  c: {shape: [M, N], dtype: a}
tiles:
  M: {block: BM, sizes: [32]}
  N: {block: BN, sizes: [32]}
  K: {block: BK, sizes: [32]}
epilogue:
  c: acc * scale
""",
    "functools.yaml": """
op: functools
kind: reduction
doc: y = x * scale - max(x), scale required.
inputs:
  x: {dtype: [float32], shape: [..., N]}
scalars:
  scale: {type: float}
outputs:
  y: {dtype: x, shape: [..., N]}
compute:
  y: x * scale - max(x)
tiles:
  N: {block: BLOCK_N, sizes: [128]}
""",
}


def test_scalars_without_a_default_are_given_in_every_generated_test_call(tmp_path):
    # (The wrapper takes them as required keywords: its tests called it without them, and failed
    # on the missing argument before checking anything.)
    # (The reduction is named functools: the tests' own import of it must not shadow it.)
    assert_generated_tests_pass(tmp_path, REQUIRED_SCALARS, ["scaled_req", "mm_req", "functools"],
                                "reference or bad_arguments or empty or scalars or out_argument or gradients_match")
    module = (tmp_path / "generated" / "tests" / "test_scaled_req.py").read_text()
    assert "scaled_req = _partial(scaled_req, scale=1.3, shift=2, flip=False)" in module


INT_SCALARS_IN_FLOAT_MATH = {
    "third_of.yaml": """
op: third_of
kind: elementwise
doc: y = x * (k / 3) + exp(k / 7) in float64; only x is out of the output's kind.
inputs:
  x: {dtype: [float32, float64]}
scalars:
  k: {type: int, default: 5}
outputs:
  y: {dtype: x}
compute:
  y: x * (k / 3) + exp(k / 7)
tiles:
  N: {block: BLOCK, sizes: [64]}
""",
    "third_of_rows.yaml": """
op: third_of_rows
kind: reduction
doc: y = x * (k / 3) - max(x) * sqrt(k * 1.0 / 7) over rows.
inputs:
  x: {dtype: [float32, float64], shape: [..., N]}
scalars:
  k: {type: int, default: 5}
outputs:
  y: {dtype: x, shape: [..., N]}
compute:
  y: x * (k / 3) - max(x) * sqrt(k * 1.0 / 7)
tiles:
  N: {block: BLOCK_N, sizes: [64]}
""",
}


def test_int_scalars_in_float64_math_are_exact_python_ints(tmp_path):
    # k / 3 of a Python int is a float64 number in PyTorch; the kernel's own int division made it
    # float32, a float64 op then off by 1e-8 (its generated tests compared it at 1e-10: the
    # reduction's failed, the elementwise oracle held k as an int64 tensor and rounded alike).
    assert_generated_tests_pass(tmp_path, INT_SCALARS_IN_FLOAT_MATH, ["third_of", "third_of_rows"],
                                "matches_reference or scalars")
    with built_package(tmp_path / "direct", "thirds", INT_SCALARS_IN_FLOAT_MATH) as package:
        if not INTERPRET and not torch.cuda.is_available():
            pytest.skip("needs a CUDA GPU, or TRITON_INTERPRET=1")
        device = "cuda" if torch.cuda.is_available() else "cpu"
        x = torch.linspace(-3, 3, 64, dtype=torch.float64, device=device).reshape(2, 32)
        torch.testing.assert_close(package.third_of(x, k=7), x * (7 / 3) + math.exp(7 / 7), rtol=1e-15, atol=1e-15)
        want = x * (7 / 3) - x.amax(-1, keepdim=True) * math.sqrt(7 * 1.0 / 7)
        torch.testing.assert_close(package.third_of_rows(x, k=7), want, rtol=1e-15, atol=1e-15)


def test_int_scalars_keep_their_launch_types():
    # (Only float scalars are widened: an int one takes the inputs' int dtype in the math.)
    module = (REPO / "generated" / "clamp_add.py").read_text()
    assert "    lo, hi,  # scalars" in module and "tl.float64, hi" not in module


PLAIN_FIRST = """
op: plain_first
kind: elementwise
doc: a where() of scalars (no gradient) ahead of outputs that have one.
inputs:
  x: {dtype: [float32, float64]}
  m: {dtype: [bool]}
scalars:
  lo: {type: float, default: -0.3}
  hi: {type: float, default: 0.7}
outputs:
  a: {dtype: x}
  f: {dtype: x}
  b: {dtype: x}
compute:
  a: where(m, lo, hi)
  f: where(m, 1.0, 0.0)
  b: where(x > lo, x * 3.0, hi) + lo * hi
tiles:
  N: {block: BLOCK, sizes: [64]}
"""


def test_outputs_that_record_no_graph_ahead_of_one_that_does_pass_gradcheck(tmp_path):
    # gradcheck pairs its finite differences of every output it is given with the analytical
    # gradients of those that require grad: the generated gradcheck gives it the latter only
    # (it had failed here, pairing `a`'s zero differences with `b`'s gradient; an output through
    # detach() has no gradcheck: its differences would measure what the gradient stops).
    assert_generated_tests_pass(tmp_path, {"plain_first.yaml": PLAIN_FIRST}, ["plain_first"],
                                "gradcheck or gradients or require")


MASKED_LOG_SOFTMAX = """
op: masked_log_softmax
kind: reduction
doc: log-softmax of x * t * k over the columns keep selects (-inf elsewhere), and its logsumexp.
inputs:
  x: {dtype: [float32, float64], shape: [..., N]}
  t: {dtype: x, shape: [...]}
  keep: {dtype: [bool], shape: [N]}
scalars:
  k: {type: int, default: 2}
outputs:
  y: {dtype: x, shape: [..., N]}
  lse: {dtype: [float32], shape: [...]}
steps:
  s: where(keep, x * t * k, -inf)
  m: max(s)
  l: m + log(sum(exp(s - m)))
compute:
  y: s - l
  lse: l
tiles:
  N: {block: BLOCK_N, sizes: [64]}
"""


def test_a_masked_log_softmax_whose_output_holds_minus_inf_passes_gradcheck(tmp_path):
    # The columns keep leaves out are -inf in y, before and after each perturbation: gradcheck's
    # finite differences there were inf - inf, NaN against a gradient of 0. They are held at 0,
    # and the gradient is checked where y is finite.
    assert_generated_tests_pass(tmp_path, {"masked_log_softmax.yaml": MASKED_LOG_SOFTMAX},
                                ["masked_log_softmax"], "gradcheck or gradients")


NUMBERS_IN_WHERE = {
    "where_numbers.yaml": """
op: where_numbers
kind: elementwise
doc: y = where(a > 0, 0.1, 1 / 3) * b, numbers float32 does not hold.
inputs:
  a: {dtype: [float64, float32]}
  b: {dtype: a}
outputs:
  y: {dtype: a}
compute:
  y: where(a > 0, 0.1, 1 / 3) * b
tiles:
  N: {block: BLOCK, sizes: [256]}
""",
    "row_where_numbers.yaml": """
op: row_where_numbers
kind: reduction
doc: y = x - where(x > 0, 0.1, 0.7) * max(x) along the row.
inputs:
  x: {dtype: [float64, float32], shape: [..., N]}
outputs:
  y: {dtype: x, shape: [..., N]}
steps:
  m: max(x)
compute:
  y: x - where(x > 0, 0.1, 0.7) * m
tiles:
  N: {block: BLOCK_N, sizes: [64]}
""",
}


def test_a_where_of_numbers_alone_keeps_float64_math_exact(tmp_path):
    # tl.where(c, 0.1, 1 / 3) is a float32 tensor: a float64 op's result was off in its 8th digit.
    assert_generated_tests_pass(tmp_path, NUMBERS_IN_WHERE, ["where_numbers", "row_where_numbers"],
                                "matches_reference and float64")


SCALAR_BRANCHES = {
    "signed_scale.yaml": """
op: signed_scale
kind: elementwise
doc: y = x * x * where(x > 0, s, 0.3 - s), a slope per sign.
inputs:
  x: {dtype: [float64, float32]}
scalars:
  s: {type: float, default: 0.7}
outputs:
  y: {dtype: x}
compute:
  y: x * x * where(x > 0, s, 0.3 - s)
tiles:
  N: {block: BLOCK, sizes: [256]}
""",
    "row_signed_scale.yaml": """
op: row_signed_scale
kind: reduction
doc: p = mean(x * where(x > 0.5 / s, -s, s)) * t per row.
inputs:
  x: {dtype: [float64, float32], shape: [..., N]}
  t: {dtype: x, shape: [...]}
scalars:
  s: {type: float, default: 0.7}
outputs:
  p: {dtype: x, shape: [...]}
steps:
  m: mean(x * x * where(x > 0.5 / s, -s, s))
compute:
  p: m * t
tiles:
  N: {block: BLOCK_N, sizes: [64]}
""",
}


def test_a_where_of_scalars_alone_keeps_a_float64_ops_derivatives_exact(tmp_path):
    # The backward's math in PyTorch's ops (torch.func, forward mode, create_graph=True) wrote
    # torch.where(x > 0, s, 0.3 - s), which makes its Python floats float32: a float64 op's
    # tangents and second derivatives were off in their 8th digit, where the kernels are exact.
    assert_generated_tests_pass(tmp_path, SCALAR_BRANCHES, ["signed_scale", "row_signed_scale"],
                                "float64 and (jvp or second_derivative or vjp)")


FLOATS_OF_INTS_IN_FLOAT64_MATH = {
    "int_weighted.yaml": """
op: int_weighted
kind: elementwise
doc: y = x * exp(0.1 * i) + (log(2 + s) - 1.0 * i); floats of the ints alone are float32, as in PyTorch.
inputs:
  x: {dtype: [float64, float32]}
  i: {dtype: [int32, int64]}
scalars:
  s: {type: float, default: 0.3}
outputs:
  y: {dtype: x}
  z: {dtype: x}
compute:
  y: x * exp(0.1 * i)
  z: x * x + (log(2 + s) - 1.0 * i)
tiles:
  N: {block: BLOCK, sizes: [256]}
""",
}


def test_floats_of_int_tensors_alone_in_float64_math_are_held_to_float32s_tolerance(tmp_path):
    # A float made from int tensors alone is float32 (PyTorch's default dtype: 1.0 * i, exp(0.1 *
    # i)), in the op as in its oracle, beside a float64 x: the tests held the op to float64's
    # tolerance, which float32's exp (numpy's in the interpreter, libdevice's on a GPU, against
    # the CPU's) misses by an ulp.
    assert_generated_tests_pass(tmp_path, FLOATS_OF_INTS_IN_FLOAT64_MATH, ["int_weighted"], "float64")


def test_float64_math_is_held_to_its_last_bits_unless_its_oracle_computes_some_in_float32():
    from tilegen.testing import float64_allowances

    x = torch.rand(8, dtype=torch.float64)
    i = torch.arange(8, dtype=torch.int32)
    m = i > 3

    def float64_throughout(x, i, m, s=0.5):  # an int tensor meets x, a bool mask chooses
        return (torch.where(m, x * s, x * i), x * torch.tensor(0.1, dtype=torch.float64))

    def float32_of_ints(x, i, m):
        return (x + torch.exp(0.1 * i), x * 2)

    want = float64_throughout(x, i, m)
    assert float64_allowances(float64_throughout, [x, i, m], want, {"s": 0.25}) == [None, None]
    want = float32_of_ints(x, i, m)
    allowed = float64_allowances(float32_of_ints, [x, i, m], want)
    # (float32's tolerance over the whole op: which output a float32 value reaches is not traced)
    assert all(torch.equal(a, 1e-5 + 1e-5 * w.abs()) for a, w in zip(allowed, want))


NEAR_A_POLE = {
    "row_pole.yaml": """
op: row_pole
kind: reduction
doc: y = w * (x - 0.25) / (1 + x + t), t per row, beside p = m * t; random rows come near the pole.
inputs:
  x: {dtype: [float32, float16, float64], shape: [..., N]}
  w: {dtype: x, shape: [N]}
  t: {dtype: [float32], shape: [...]}
  cols: {dtype: [bool], shape: [N]}
scalars:
  s: {type: float}
  flip: {type: bool, default: false}
outputs:
  y: {dtype: x, shape: [..., N]}
  p: {dtype: x, shape: [...]}
steps:
  m: mean(where(cols, where(x > 0.5 / s, -s, s), x)) / N
compute:
  y: where(flip, -((x - 0.25) / (1 + x + t)), (x - 0.25) / (1 + x + t)) * w
  p: m * t
tiles:
  N: {block: BLOCK_N, sizes: [64]}
""",
}


def test_second_derivatives_of_a_half_op_near_a_pole_match(tmp_path):
    # The derivative of the gradients' product with random directions: the op was given them
    # rounded to float16 (the oracle exact), and near 1 + x + t = 0 the product's terms, of
    # 1e6, cancel to 1e4: 5e-4 of rounding each came to 1% of the result.
    assert_generated_tests_pass(tmp_path, NEAR_A_POLE, ["row_pole"], "second_derivatives")


CONDITIONS_ON_NUMBERS = {
    "fixed_branch.yaml": """
op: fixed_branch
kind: elementwise
doc: where() whose condition compares numbers alone, in float and int math.
inputs:
  x: {dtype: [float32, float64]}
  j: {dtype: [int64]}
outputs:
  y: {dtype: x}
  w: {dtype: [int64]}
compute:
  y: where(3000000000 > 0.5, x, -x) + where(1 > 2, x, 0.5 * x)
  w: where(3 > 2, j, 3000000000) + where(1 > 2, j, 7)
tiles:
  N: {block: BLOCK, sizes: [256]}
""",
    "row_fixed_branch.yaml": """
op: row_fixed_branch
kind: reduction
doc: y = x - where(2 > 1, max(x), 0.5) along the row.
inputs:
  x: {dtype: [float64, float32], shape: [..., N]}
outputs:
  y: {dtype: x, shape: [..., N]}
steps:
  m: max(x)
compute:
  y: x - where(2 > 1, m, 0.5)
tiles:
  N: {block: BLOCK_N, sizes: [64]}
""",
}


def test_a_where_whose_condition_compares_numbers_alone_runs_in_the_oracle(tmp_path):
    # The oracle made the comparison a float64 tensor, which torch.where refuses as a condition.
    assert_generated_tests_pass(tmp_path, CONDITIONS_ON_NUMBERS, ["fixed_branch", "row_fixed_branch"],
                                "matches_reference or gradients")


PER_ROW_OUTPUT_OF_A_PER_ROW_INPUT = {
    "row_offset.yaml": """
op: row_offset
kind: reduction
doc: z = where(s < 2, max(x), 0.5) - sum(x) per row, beside y = 0.5 * x + keep along it.
inputs:
  x: {dtype: [float32, float64], shape: [..., N]}
  s: {dtype: x, shape: [...]}
  keep: {dtype: [bool], shape: [..., N]}
outputs:
  y: {dtype: x, shape: [..., N]}
  z: {dtype: x, shape: [...]}
steps:
  t: sum(0.25 * x)
  m: detach(max(x))
compute:
  y: 0.5 * x + where(keep, 1.0, 0.0)
  z: where(s < 2.0, m, 0.5) - t
tiles:
  N: {block: BLOCK_N, sizes: [32]}
""",
}


def test_a_value_per_row_of_a_per_row_input_takes_its_gradient_tests(tmp_path):
    # A per-row output that does not read every input with rows (here not keep) is expanded to
    # the rows' shape less the row; the gradient tests give the oracle a per-row input along its
    # row too (to size its gradient's terms), and that expansion raised there.
    assert_generated_tests_pass(tmp_path, PER_ROW_OUTPUT_OF_A_PER_ROW_INPUT, ["row_offset"],
                                "gradients or reduced_axis or matches_reference")


FLOAT64_ONLY = {
    "wide_scale.yaml": """
op: wide_scale
kind: elementwise
doc: y = x * w, in float64 alone.
inputs:
  x: {dtype: [float64]}
  w: {dtype: x}
outputs:
  y: {dtype: x}
compute:
  y: x * w
tiles:
  N: {block: BLOCK, sizes: [256]}
""",
    "wide_norm.yaml": """
op: wide_norm
kind: reduction
doc: y = x * rsqrt(mean(x * x) + 1) * w, in float64 alone.
inputs:
  x: {dtype: [float64], shape: [..., N]}
  w: {dtype: x, shape: [N]}
outputs:
  y: {dtype: x, shape: [..., N]}
compute:
  y: x * rsqrt(mean(x * x) + 1.0) * w
tiles:
  N: {block: BLOCK_N, sizes: [32]}
""",
}


def test_an_op_of_float64_alone_is_handed_a_wrong_dtype_that_is_not_float64(tmp_path):
    # The bad-argument tests gave the second input (and `out`) float64 as the wrong dtype, which a
    # float64 op takes: nothing raised where the test wanted an error.
    assert_generated_tests_pass(tmp_path, FLOAT64_ONLY, ["wide_scale", "wide_norm"], "bad_arguments")


NO_GRADIENT_AT_THE_ACCUMULATOR = {
    "mm_bias_only.yaml": """
op: mm_bias_only
kind: matmul
doc: c = bias * 2 + r, the product computed and not read.
inputs:
  a: {dtype: [float32], shape: [M, K]}
  b: {dtype: a, shape: [K, N]}
  bias: {dtype: a, shape: [N]}
  r: {dtype: a, shape: [M, N]}
outputs:
  c: {dtype: a, shape: [M, N]}
epilogue:
  c: bias * 2.0 + r
tiles:
  M: {block: BM, sizes: [32]}
  N: {block: BN, sizes: [32]}
  K: {block: BK, sizes: [32]}
""",
    "bmm_sign_gate.yaml": """
op: bmm_sign_gate
kind: matmul
doc: c = r * bias where a @ b > 0, else 0 (the product decides; r and bias get the gradient).
inputs:
  a: {dtype: [float32], shape: [..., M, K]}
  b: {dtype: a, shape: [..., K, N]}
  bias: {dtype: a, shape: [N]}
  r: {dtype: a, shape: [..., M, N]}
outputs:
  c: {dtype: a, shape: [..., M, N]}
epilogue:
  c: where(acc > 0, r * bias, 0.0)
tiles:
  M: {block: BM, sizes: [32]}
  N: {block: BN, sizes: [32]}
  K: {block: BK, sizes: [32]}
""",
}


def test_an_epilogue_that_gives_the_accumulator_no_gradient_gives_its_inputs_theirs(tmp_path):
    # The backward read the operands' sizes (and, where the epilogue decides on the product, computed
    # the product again) from operands it had not kept: every such op's backward raised NameError.
    assert_generated_tests_pass(tmp_path, NO_GRADIENT_AT_THE_ACCUMULATOR, ["mm_bias_only", "bmm_sign_gate"],
                                "gradient or gradcheck or training_variant or second_derivatives or opcheck")


ROW_VALUES_SUMMED_ALONG_THE_ROW = {
    "shifted_sums.yaml": """
op: shifted_sums
kind: reduction
doc: z = sum(sigmoid(x) - r), m = mean(x * x - r) per row.
inputs:
  x: {dtype: [float32, float64], shape: [..., N]}
  r: {dtype: x, shape: [...]}
outputs:
  z: {dtype: x, shape: [...]}
  m: {dtype: x, shape: [...]}
compute:
  z: sum(sigmoid(x) - r)
  m: mean(x * x - r)
tiles:
  N: {block: BLOCK_N, sizes: [32]}
""",
}


def test_a_per_row_value_read_along_the_row_gets_the_row_length_times_its_share(tmp_path):
    # r's gradient is the sum over the row of a value the same along it: n times that value. The
    # gradients in PyTorch's ops (create_graph=True) summed it over the last axis of 1 a per-row
    # value has there, once; an empty row's is 0 (mean's share g / n is not finite there).
    assert_generated_tests_pass(tmp_path, ROW_VALUES_SUMMED_ALONG_THE_ROW, ["shifted_sums"],
                                "second_derivatives or gradients_match or gradcheck")
    with built_package(tmp_path / "direct", "row_sums", ROW_VALUES_SUMMED_ALONG_THE_ROW) as package:
        device = "cpu" if INTERPRET else "cuda"
        x = torch.randn(3, 0, device=device, requires_grad=True)
        r = torch.randn(3, device=device, requires_grad=True)
        seed = torch.tensor([1.0, float("inf"), 0.0], device=device)
        for create_graph in (False, True):
            z, m = package.shifted_sums(x, r)
            gradient, = torch.autograd.grad([z, m], [r], [seed, seed], create_graph=create_graph)
            assert gradient.tolist() == [0.0, 0.0, 0.0]


# An int scalar made float (1.0 * k) under a float function, in each kind: the backward keeps the
# 1.0 (without it sqrt() would meet an int, and the build failed).
INT_SCALAR_MADE_FLOAT = {
    "isq.yaml": """\
op: isq
kind: elementwise
inputs:
  x: {dtype: [float32]}
scalars:
  k: {type: int, default: 4}
outputs:
  y: {dtype: x}
compute:
  y: x * sqrt(1.0 * k) + sqrt(x * k)
tiles:
  N: {block: BLOCK, sizes: [1024]}
""",
    "mmk.yaml": """\
op: mmk
kind: matmul
inputs:
  a: {shape: [M, K], dtype: [float32]}
  b: {shape: [K, N], dtype: a}
outputs:
  c: {shape: [M, N], dtype: a}
scalars:
  k: {type: int, default: 4}
tiles:
  M: {block: BM, sizes: [32]}
  N: {block: BN, sizes: [32]}
  K: {block: BK, sizes: [32]}
epilogue:
  c: acc / sqrt(1.0 * k) + acc * (k - 1)
""",
    "rk.yaml": """\
op: rk
kind: reduction
inputs:
  x: {dtype: [float32], shape: [..., N]}
scalars:
  k: {type: int, default: 4}
outputs:
  y: {dtype: x, shape: [..., N]}
steps:
  s: x / sqrt(1.0 * k)
  e: exp(s - detach(max(s)))
compute:
  y: e / sum(e)
tiles:
  N: {block: BLOCK_N, sizes: [64]}
""",
}


def test_an_int_scalar_made_float_under_a_float_function_builds_and_differentiates(tmp_path):
    assert_generated_tests_pass(tmp_path, INT_SCALAR_MADE_FLOAT, ["isq", "mmk", "rk"], "reference or gradients_match")


# maximum and minimum with a scalar bound, whose values a backward reads (x * maximum(x, lo)):
# differentiated again, their gradient is maximum's (half at a tie, all of it at NaN), not clamp's.
BOUNDED_SQUARE = """\
op: bounded_square
kind: elementwise
inputs:
  x: {dtype: [float32, float64]}
scalars:
  lo: {type: float, default: 0.5}
  hi: {type: float, default: 2.0}
outputs:
  y: {dtype: x}
compute:
  y: x * minimum(maximum(x, lo), hi)
tiles:
  N: {block: BLOCK, sizes: [16]}
"""


@pytest.mark.parametrize("lo", [0.5, math.nan])
def test_a_second_derivative_through_a_scalar_bound_is_maximums_at_ties_and_nan(tmp_path, lo):
    with built_package(tmp_path, "bounded_ops", {"bounded_square.yaml": BOUNDED_SQUARE}) as ops:
        device = "cpu" if INTERPRET else "cuda"
        x = torch.tensor([-1.0, 0.5, 1.0, 2.0, 3.0, math.nan], dtype=torch.float64, device=device, requires_grad=True)
        lo_, hi_ = (torch.tensor(v, dtype=torch.float64, device=device) for v in (lo, 2.0))
        twice = []
        for f in (lambda x: ops.bounded_square(x, lo=lo), lambda x: x * torch.minimum(torch.maximum(x, lo_), hi_)):
            first, = torch.autograd.grad(f(x).sum(), x, create_graph=True)
            twice.append(torch.autograd.grad(first.sum(), x)[0])
        torch.testing.assert_close(twice[0], twice[1], equal_nan=True)


BROADCAST_HALF_BESIDE_FLOAT32 = {
    "row_over_column.yaml": """
op: row_over_column
kind: elementwise
doc: y = (b / g) ** 3, a half row b [N] over a float32 column g [M, 1], y of b's dtype.
inputs:
  b: {dtype: [float16, bfloat16], shape: [N]}
  g: {dtype: float32, shape: [M, 1]}
outputs:
  y: {dtype: b, shape: [M, N]}
compute:
  y: (b / g) ** 3
tiles:
  N: {block: BLOCK, sizes: [256]}
""",
}


def test_a_broadcast_half_inputs_gradient_is_summed_in_the_dtype_its_terms_are_computed_in(tmp_path):
    # b's gradient, 3 b^2 / g^3 per element, was made in float16 (the incoming gradient's dtype)
    # and then summed over the rows: terms past float16's range were inf one by one, inf - inf
    # NaN, where PyTorch (b / g is float32) sums float32 terms and casts a finite sum.
    assert_generated_tests_pass(tmp_path, BROADCAST_HALF_BESIDE_FLOAT32, ["row_over_column"],
                                "float16 and gradient or backward_compiles or cuda_graph")


ROW_OVER_FLOAT32_ROWS = {
    "cube_rows.yaml": """
op: cube_rows
kind: reduction
doc: y = (x / p) ** 3 - mean(x), x half beside float32 rows p; x may be one row broadcast over p's.
inputs:
  x: {dtype: [float16, bfloat16], shape: [..., N]}
  p: {dtype: float32, shape: [..., N]}
outputs:
  y: {dtype: x, shape: [..., N]}
compute:
  y: (x / p) ** 3 - mean(x)
tiles:
  N: {block: BLOCK_N, sizes: [32]}
""",
}


@needs_backend
def test_a_reductions_broadcast_half_input_is_summed_in_the_dtype_its_terms_are_computed_in(tmp_path):
    # As the elementwise op's: x [1, N] over float32 rows p [M, N], its terms 3 x^2 / p^3 of
    # float16 past its range were inf one by one, where PyTorch's float32 ones sum to a finite value.
    with built_package(tmp_path, "cube_rows_ops", ROW_OVER_FLOAT32_ROWS) as package:
        device = "cpu" if INTERPRET else "cuda"
        torch.manual_seed(0)
        # Rows in pairs of opposite p and equal incoming gradients: terms of 1e5-6e5 that cancel
        # to the mean's share (float32 sums them within a few units).
        p = (torch.rand(32, 32, device=device) * 0.01 + 0.06).repeat_interleave(2, 0)
        p[1::2] *= -1
        for dtype in (torch.float16, torch.bfloat16):
            x = (torch.rand(1, 32, device=device) + 4).to(dtype).requires_grad_()
            grad = torch.randn(32, 32, device=device).to(dtype).repeat_interleave(2, 0)
            got, = torch.autograd.grad(package.cube_rows(x, p), [x], grad)
            x64 = x.detach().double().requires_grad_()
            want, = torch.autograd.grad((x64 / p.double()) ** 3 - x64.mean(-1, keepdim=True), [x64], grad.double())
            assert bool(got.isfinite().all()), (dtype, got)
            torch.testing.assert_close(got.double(), want.to(dtype).double(), rtol=2e-2, atol=16.0)


SCALED_BY_A_FLOAT32_MATRIX = {
    "mm_scaled_cube.yaml": """
op: mm_scaled_cube
kind: matmul
doc: c = (acc * s + r) ** 3, a float32 [M, N] scale s beside half operands; r [M, N] may come as [N].
inputs:
  a: {dtype: [float16], shape: [M, K]}
  b: {dtype: a, shape: [K, N]}
  s: {dtype: float32, shape: [M, N]}
  r: {dtype: a, shape: [M, N]}
outputs:
  c: {dtype: a, shape: [M, N]}
epilogue:
  c: (acc * s + r) ** 3
tiles:
  M: {block: BM, sizes: [32]}
  N: {block: BN, sizes: [32]}
  K: {block: BK, sizes: [32]}
""",
}


@needs_backend
def test_a_matmuls_epilogue_input_broadcast_in_the_call_is_summed_in_the_dtype_its_terms_read(tmp_path):
    # r [M, N] passed as [N]: its gradient 3 (acc * s + r)^2 per element, of float16 beside a
    # float32 s, was inf term by term (r ~ 175: 9e4) and NaN summed, where PyTorch's float32
    # terms cancel in pairs of rows to 0.
    with built_package(tmp_path, "scaled_cube_ops", SCALED_BY_A_FLOAT32_MATRIX) as package:
        device = "cpu" if INTERPRET else "cuda"
        torch.manual_seed(0)
        a = (torch.randn(32, 32, device=device) * 0.3).half().repeat_interleave(2, 0)
        b = (torch.randn(32, 32, device=device) * 0.3).half()
        s = torch.randn(32, 32, device=device).repeat_interleave(2, 0)
        r = (torch.rand(32, device=device) * 50 + 150).half().requires_grad_()
        grad = torch.randn(32, 32, device=device).half().repeat_interleave(2, 0)
        grad[1::2] *= -1
        got, = torch.autograd.grad(package.mm_scaled_cube(a, b, s, r), [r], grad)
        r64 = r.detach().double().requires_grad_()
        want, = torch.autograd.grad(((a.double() @ b.double()) * s.double() + r64) ** 3, [r64], grad.double())
        assert bool(got.isfinite().all()), got
        torch.testing.assert_close(got.double(), want, rtol=0, atol=64.0)


def test_only_a_broadcast_inputs_gradient_is_made_wider_than_the_incoming_gradient():
    from tilegen.runtime import summed_gradient_dtype

    grad = torch.zeros(4, 3, dtype=torch.float16)
    row, column = torch.zeros(3, dtype=torch.float16), torch.zeros(4, 1)
    full = torch.zeros(4, 3, dtype=torch.float16)
    assert summed_gradient_dtype(torch.float16, grad.shape, (row,), (row, column)) == torch.float32
    # (one of the call's full shape is cast, not summed: its narrower buffer costs half the traffic)
    assert summed_gradient_dtype(torch.float16, grad.shape, (full,), (full, column)) == torch.float16
    # (terms that read only half tensors are half in PyTorch too)
    assert summed_gradient_dtype(torch.float16, grad.shape, (row,), (row, full)) == torch.float16
    # A broadcast input as the backward op has it, expanded to the gradient's shape, is told by its
    # layout (which the compiled call path's signature holds): an axis of stride 0 and size > 1.
    assert summed_gradient_dtype(torch.float16, grad.shape, (row.expand(4, 3),), (column,)) == torch.float32
    one_row = torch.zeros(1, 3, dtype=torch.float16)
    assert summed_gradient_dtype(torch.float16, (1, 3), (row.expand(1, 3),), (column,)) == torch.float16
    assert summed_gradient_dtype(torch.float16, (1, 3), (one_row,), (column,)) == torch.float16
