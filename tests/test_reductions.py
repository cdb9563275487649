"""The reduction kind: its spec errors, its row programs (levels, stages, passes) and its derived
backward, against PyTorch's autograd of the same math."""

from __future__ import annotations

import contextlib
import importlib
import re
from pathlib import Path

import pytest
import torch

from tilegen.derivatives import differentiate
from tilegen.expressions import assignments, parse_expression
from tilegen.rows import ELEMENT, ROW, UNIFORM, RowProgram, output_pass, stage_pass, whole_row_lines
from tests.conftest import REPO, assert_generated_tests_pass, built_package, validated

# Kernels run on the GPU where there is one, else in Triton's interpreter on CPU tensors.
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

RMS_NORM = """\
op: rms
kind: reduction
inputs:
  x: {dtype: [float32, float64], shape: [..., N]}
  w: {dtype: x, shape: [N]}
scalars:
  eps: {type: float, default: 1.0e-6}
outputs:
  y: {dtype: x, shape: [..., N]}
  rstd: {dtype: [float32], shape: [...]}
steps:
  r: rsqrt(mean(x * x) + eps)
compute:
  y: x * r * w
  rstd: r
tiles:
  N: {block: BLOCK_N, sizes: [1024]}
"""



def test_the_spec_validates_to_steps_and_roles(tmp_path):
    spec, errors = validated(tmp_path, RMS_NORM)
    assert errors == []
    assert [name for name, _ in spec.steps] == ["r"]
    assert spec.row_roles() == {"x": "element", "w": "column", "y": "element", "rstd": "row"}
    assert spec.row_levels() == {"x": ELEMENT, "w": ELEMENT, "eps": UNIFORM}


@pytest.mark.parametrize("old, new, key, words", [
    ("tiles:\n  N: {block: BLOCK_N, sizes: [1024]}", "tiles:\n  N: {block: BLOCK_N, sizes: [1024]}\n"
     "  M: {block: BLOCK_M, sizes: [16]}", "tiles", "reduces exactly one axis"),
    ("r: rsqrt(mean(x * x) + eps)", "r: rsqrt(mean(x * max(x)) + eps)", "steps.r", "a reduction inside a reduction"),
    ("r: rsqrt(mean(x * x) + eps)", "r: rsqrt(mean(x * q) + eps)\n  q: x * 2", "steps.r", "comes after it"),
    ("r: rsqrt(mean(x * x) + eps)", "r: rsqrt(mean(x * r) + eps)", "steps.r", "reads itself"),
    ("rstd: r", "rstd: x * r", "compute.rstd", "one value per row"),
    ("r: rsqrt(mean(x * x) + eps)", "r: rsqrt(sum(eps) + 1.0)", "steps.r", "sum() of a value that is the same"),
    ("y: x * r * w", "y: x * r * w + gelu(sum(x))", None, None),
    ("x: {dtype: [float32, float64], shape: [..., N]}", "x: {dtype: [float32, float64], shape: [N, ...]}",
     "inputs.x.shape.1", "'...' (any leading axes) may only come as the first item"),
    ("rstd: {dtype: [float32], shape: [...]}", "rstd: {dtype: [float32], shape: [N]}", "outputs.rstd.shape",
     "is not allowed"),
    ("x: {dtype: [float32, float64], shape: [..., N]}", "x: {dtype: [float32, float64], shape: [...]}",
     "inputs", "no input has the rows"),
    ("  x: {dtype: [float32, float64], shape: [..., N]}", "  x: {dtype: [float32, float64]}", "inputs.x",
     "missing required key 'shape'"),
    ("r: rsqrt(mean(x * x) + eps)", "r: rsqrt(mean(x * x) + eps)\n  rows: x + 1", None, "rows_"),
    ("tiles:", "masks: {N: never}\ntiles:", "masks", "masks the ends of its rows itself"),
    ("tiles:", "schedule: {order: grouped}\ntiles:", "schedule", "matmul kinds only"),
    ("tiles:", "dtypes: {accumulate: float32}\ntiles:", "dtypes.accumulate", "only matmul kinds accumulate"),
])
def test_bad_reduction_specs_get_one_line_each(tmp_path, old, new, key, words):
    assert old in RMS_NORM
    spec, errors = validated(tmp_path, RMS_NORM.replace(old, new))
    if key is None:  # accepted (a step named like a kernel variable is renamed)
        assert errors == [] and spec is not None
        assert words is None or spec.steps[-1][0] == words
        return
    assert spec is None and len(errors) == 1, errors
    assert f": {key}: " in errors[0], errors
    if words:
        assert words in errors[0], errors[0]


def test_a_reductions_expression_errors_list_what_its_own_section_allows(tmp_path):
    """An error in a reduction's expression names what that section accepts (the row reductions,
    and PyTorch's row ops in a reference), not the elementwise functions alone."""
    _, errors = validated(tmp_path, RMS_NORM + "reference:\n  y: rms_norm(x, w)\n")
    assert len(errors) == 1 and ": reference.y: rms_norm() takes 3 argument(s), got 2" in errors[0], errors
    assert "rms_norm" in errors[0].split("(numbers")[1] and "sum" in errors[0].split("(numbers")[1]
    _, errors = validated(tmp_path, RMS_NORM.replace("y: x * r * w", "y: x * r * w[0]"))
    assert len(errors) == 1 and ": compute.y: indexing (x[...]) is not allowed" in errors[0], errors
    assert "mean" in errors[0].split("(numbers")[1], errors


def test_reductions_are_refused_outside_reduction_kinds(tmp_path):
    text = ("op: bad\nkind: elementwise\ninputs:\n  x: {dtype: [float32]}\noutputs:\n  y: {dtype: x}\n"
            "steps:\n  s: x\ncompute:\n  y: x - sum(x)\ntiles:\n  N: {block: B, sizes: [128]}\n")
    spec, errors = validated(tmp_path, text)
    assert spec is None and len(errors) == 2
    assert ": steps: steps are not used by elementwise kinds" in errors[0]
    assert ": compute.y: function 'sum' is not allowed" in errors[1]


def test_pytorchs_row_ops_in_a_compute_point_to_steps_and_rows_over_another_axis_are_one_error(tmp_path):
    # softmax() is the oracle's (a reference's) alone: the error says so, and how to write it.
    _, errors = validated(tmp_path, RMS_NORM.replace("y: x * r * w", "y: softmax(x) * w"))
    assert len(errors) == 1 and ": compute.y: function 'softmax' is PyTorch's own row op, allowed in a " \
        "reduction's reference only: write its math in steps (" in errors[0], errors
    # Rows over an axis the tiles do not name: each tensor says so, and nothing more (not also
    # that no input has the rows).
    text = RMS_NORM.replace("[..., N]", "[..., K]")
    _, errors = validated(tmp_path, text)
    assert [e.split(": ", 1)[1].split(":")[0] for e in errors] == ["inputs.x.shape", "outputs.y.shape"], errors


def _program(values, levels):
    names = set(levels)
    parsed = []
    for name, source in values:
        parsed.append((name, parse_expression(source, names, reductions=True)))
        names.add(name)
    return RowProgram(parsed, levels), parsed


LAYER_NORM = [("mu", "mean(x)"), ("d", "x - mu"), ("r", "rsqrt(mean(d * d) + eps)"), ("y", "d * r * w + b")]
LN_LEVELS = {"x": ELEMENT, "w": ELEMENT, "b": ELEMENT, "eps": UNIFORM}


def test_a_reduction_of_a_value_that_reads_a_reduction_runs_a_stage_later():
    program, _ = _program(LAYER_NORM, LN_LEVELS)
    assert [(r.kind, r.stage) for r in program.reductions] == [("sum", 1), ("sum", 2)]
    assert program.level("mu") == ROW and program.level("d") == ELEMENT and program.level("r") == ROW
    assert program.last_stage == 2
    # A long row: a pass per stage, each loading what its reductions read, then the outputs' pass.
    first, second = stage_pass(program, 1, "B"), stage_pass(program, 2, "B")
    assert first.loads == ("x",) and "mu = _r0 / _n" in first.after
    assert "d = x - mu" in second.body and second.after[-1] == "r = tl.rsqrt(_r1 / _n + eps)"
    final = output_pass(program, ["y"])
    assert set(final.loads) == {"x", "w", "b"} and final.body[-1] == "y = d * r * w + b"


def test_a_whole_row_is_computed_in_stage_order_with_masked_reductions():
    program, _ = _program([("m", "max(x)"), ("e", "exp(x - m)"), ("y", "e / sum(e)")], {"x": ELEMENT})
    lines = whole_row_lines(program)
    assert lines.index('_m0 = tl.where(mask, _a0, float("-inf"))') < lines.index("_r0 = tl.max(_m0, axis=1, keep_dims=True)")
    assert lines.index("_r0 = tl.max(_m0, axis=1, keep_dims=True)") < lines.index("e = tl.exp(x - m)")
    assert "_r1 = tl.sum(_m1, axis=1, keep_dims=True)" in lines
    assert lines[-1] == "y = e / _r1"


def test_equal_reductions_are_computed_once():
    program, _ = _program([("a", "sum(x * x) + 1.0"), ("b", "sqrt(sum(x * x))"), ("y", "x * a * b")],
                          {"x": ELEMENT})
    assert len(program.reductions) == 1


def _evaluate(lines, env):
    env = dict(env, torch=torch)
    exec("\n".join(lines), {}, env)  # noqa: S102 - lines emitted from checked trees
    return env


ROWS, N = 4, 9


def _inputs(levels, seed=0):
    generator = torch.Generator().manual_seed(seed)
    shapes = {ELEMENT: (ROWS, N), ROW: (ROWS, 1)}
    values = {name: torch.randn(shapes[level], generator=generator, dtype=torch.float64)
              for name, level in levels.items() if level != UNIFORM}
    for name in ("w", "b"):  # weights: one value per column, the same for every row
        if name in values:
            values[name] = values[name][0]
    return values


@pytest.mark.parametrize("steps, body", [
    ([("m", "max(x)"), ("e", "exp(x - m)")], [("y", "e / sum(e)")]),
    ([("m", "max(x)"), ("lse", "m + log(sum(exp(x - m)))")], [("y", "x - lse")]),
    ([("r", "rsqrt(mean(x * x) + eps)")], [("y", "x * r * w"), ("rstd", "r")]),
    (LAYER_NORM[:3], [("y", "d * r * w + b"), ("mean", "mu"), ("rstd", "r")]),
    ([("s", "x + 2.0 * b")], [("h", "s"), ("y", "s * rsqrt(mean(s * s) + eps) * w")]),
    ([], [("y", "x - min(x) * (1.0 + x)"), ("peak", "max(x * w)")]),
])
def test_the_derived_backward_matches_autograd_of_the_same_math(steps, body):
    levels = {"x": ELEMENT, "w": ELEMENT, "b": ELEMENT, "eps": UNIFORM}
    names = set(levels)
    parsed_steps = []
    for name, source in steps:
        parsed_steps.append((name, parse_expression(source, names, reductions=True)))
        names.add(name)
    parsed_body = [(name, parse_expression(source, names, reductions=True)) for name, source in body]
    read = {n for _, e in parsed_steps + parsed_body for n in e.names}
    wrt = [n for n in ("x", "w", "b") if n in read]
    values = {n: v for n, v in _inputs(levels).items() if n in wrt}
    eps = torch.tensor(1e-5, dtype=torch.float64)
    leaves = {n: v.clone().requires_grad_() for n, v in values.items()}
    forward = _evaluate(assignments(parsed_steps + parsed_body, "torch"), {**leaves, "eps": eps})
    outputs = [forward[name] for name, _ in parsed_body]
    seeds = [torch.randn(o.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(i))
             for i, o in enumerate(outputs)]
    want = torch.autograd.grad(outputs, [leaves[n] for n in wrt], seeds)
    backward = differentiate(parsed_body, wrt, steps=parsed_steps, levels={n: levels[n] for n in wrt + ["eps"]})
    env = {**values, "eps": eps, "_n": torch.tensor(float(N), dtype=torch.float64)}
    env.update({backward.seeds[name]: seed for (name, _), seed in zip(parsed_body, seeds)})
    got_env = _evaluate(backward.lines("torch"), env)
    for name, expected in zip(wrt, want):
        if name in backward.passed:
            got = env[backward.seeds[backward.passed[name]]]
        else:
            got = got_env[backward.results[backward.aliases.get(name, name)]]
        got = got.expand(ROWS, N).sum_to_size(expected.shape)
        torch.testing.assert_close(got, expected, atol=1e-10, rtol=1e-10)


def test_max_splits_its_gradient_among_ties_as_amax_does():
    x = torch.tensor([[1.0, 3.0, 3.0, 2.0]], dtype=torch.float64)
    parsed = [("y", parse_expression("max(x)", {"x"}, reductions=True))]
    backward = differentiate(parsed, ["x"], levels={"x": ELEMENT})
    env = _evaluate(backward.lines("torch"), {"x": x, "_g_y": torch.ones(1, 1, dtype=torch.float64)})
    assert env[backward.results["x"]].tolist() == [[0.0, 0.5, 0.5, 0.0]]


@pytest.mark.parametrize("function", ["max", "min"])
def test_a_row_holding_a_nan_gets_a_nan_gradient_through_max_as_amax_gives(function):
    # Its max is NaN, which no element equals: PyTorch's g / count * (x == m) is NaN over the row
    # (0 / 0 * 0); the derived form gave 0 there, beside PyTorch's NaN.
    x = torch.tensor([[1.0, float("nan"), 3.0], [1.0, 3.0, 2.0]], dtype=torch.float64)
    parsed = [("y", parse_expression(f"{function}(x) * 2.0", {"x"}, reductions=True))]
    backward = differentiate(parsed, ["x"], levels={"x": ELEMENT})
    seed = torch.ones(2, 1, dtype=torch.float64)
    env = _evaluate(backward.lines("torch"), {"x": x, "_g_y": seed})
    leaf = x.clone().requires_grad_()
    reduced = leaf.amax(-1, keepdim=True) if function == "max" else leaf.amin(-1, keepdim=True)
    want, = torch.autograd.grad(reduced * 2.0, leaf, seed)
    torch.testing.assert_close(env[backward.results["x"]], want, equal_nan=True)
    assert env[backward.results["x"]][0].isnan().all()


def test_a_backward_is_a_row_program_whose_inner_sums_run_first():
    parsed = [("m", parse_expression("max(x)", {"x"}, reductions=True))]
    names = {"x", "m"}
    parsed.append(("e", parse_expression("exp(x - m)", names, reductions=True)))
    body = [("y", parse_expression("e / sum(e)", names | {"e"}, reductions=True))]
    backward = differentiate(body, ["x"], steps=parsed, levels={"x": ELEMENT})
    program = RowProgram(list(backward.steps), {"x": ELEMENT, "_g_y": ELEMENT})
    # The softmax backward: the row's sum of exp needs its max, and so does sum(g * e) (the row's
    # 1 / s^2 moves out of the sum); the gradient through the max (zero, up to rounding) sums
    # what those give, a stage later, and counts the max's ties.
    assert [(r.kind, r.stage) for r in program.reductions] == [("max", 1), ("sum", 2), ("sum", 2), ("sum", 3),
                                                               ("sum", 2)]
    # With the max detached (specs/softmax.yaml: softmax does not depend on it) only the sums of
    # exp are left, and a long row keeps them online in the max's pass: one pass, then the outputs.
    detached = [("m", parse_expression("detach(max(x))", {"x"}, reductions=True)), parsed[1]]
    backward = differentiate(body, ["x"], steps=detached, levels={"x": ELEMENT})
    program = RowProgram(list(backward.steps), {"x": ELEMENT, "_g_y": ELEMENT})
    assert [(r.kind, r.stage) for r in program.reductions] == [("max", 1), ("sum", 2), ("sum", 2)]
    assert set(program.online_sums()) == {"_r1", "_r2"} and program.folded(2)


def test_a_backward_sum_of_several_row_factors_splits_so_no_row_value_holds_it_back():
    # LayerNorm's backward: the gradient through the mean sums -(g*w*rstd + 2*c*d) over the row,
    # where c is a row value known only after sum(g*w*d). Split into sum(g*w) * rstd and
    # sum(d) * c, both sums run a stage earlier: a long row's three passes, not four. (That the
    # split gradient is autograd's: test_the_derived_backward_matches_autograd_of_the_same_math.)
    names = {"x", "w", "b", "eps", "mu", "d", "r"}
    steps = [(name, parse_expression(source, names, reductions=True)) for name, source in LAYER_NORM[:3]]
    body = [("y", parse_expression("d * r * w + b", names, reductions=True))]
    levels = {"x": ELEMENT, "w": ELEMENT, "b": ELEMENT, "eps": UNIFORM}
    backward = differentiate(body, ["x", "w", "b"], steps=steps, levels=levels)
    program = RowProgram(list(backward.steps), {**levels, "_g_y": ELEMENT})
    assert program.last_stage == 2
    sums = [r.argument.source for r in program.reductions]
    assert len(sums) == len(set(sums))  # each part summed once, whatever factors it is taken with


def test_an_online_sums_weight_may_call_functions():
    # The weight's stage is that of the values it reads; the functions it calls are no values
    # (a weight tanh(x) raised KeyError: 'tanh').
    program, _ = _program([("m", "max(x)"), ("y", "x * sum(exp(x - m) * tanh(g))")], {"x": ELEMENT, "g": ELEMENT})
    assert set(program.online_sums()) == {"_r1"}


def test_a_sum_takes_the_factors_that_do_not_vary_along_the_row_out():
    program, _ = _program([("s", "sum(x)"), ("y", "x * sum(-(x * w / s / s))")], {"x": ELEMENT, "w": ELEMENT})
    # sum(-(x * w / s / s)) = -(sum(x * w) / s / s): one stage, not two
    assert [(r.kind, r.stage, r.argument.source) for r in program.reductions] == [("sum", 1, "x"),
                                                                                  ("sum", 1, "x * w")]
    assert program.last_stage == 1
    # Nothing to take out (all along the row, or no factor along it): the sum as written.
    program, _ = _program([("y", "x * sum(x * w)")], {"x": ELEMENT, "w": ELEMENT})
    assert program.reductions[0].argument.source == "x * w"
    # Nor factors known before the row is read (a per-row input, a scalar): they cost no stage,
    # and t * sum(x) is not sum(t * x) where t is infinite (NaN for x of both signs, as PyTorch's).
    program, _ = _program([("s", "sum(x)"), ("y", "x * sum(-(t * x * alpha / s))")],
                          {"x": ELEMENT, "t": ROW, "alpha": UNIFORM})
    assert [(r.stage, r.argument.source) for r in program.reductions] == [(1, "x"), (1, "t * x * alpha")]


# ---- the runtime: configs and launch logic of every reduction op ---------------------------------

FACTS = (132, 232448, "NVIDIA H200")


def test_candidates_hold_whole_rows_up_to_the_longest_tile_and_loop_past_it():
    from tilegen.runtime import ReductionSpace

    space = ReductionSpace("BLOCK_N", [1024, 4096], [])
    short = space.candidates(FACTS, (128, 1 << 20, 2))
    assert {c["BLOCK_N"] for c in short} == {128} and max(c["ROWS"] for c in short) == 32
    long = space.candidates(FACTS, (32768, 4096, 2))
    assert {c["BLOCK_N"] for c in long} == {32768, 1024, 4096}
    # Tuning explores a whole row of any length a tile holds, one row a program at least.
    assert any(c["BLOCK_N"] == 32768 for c in space.candidates(FACTS, (32768, 4096, 2), explore=True))
    assert {c["BLOCK_N"] for c in space.candidates(FACTS, (65536, 64, 2))} == {1024, 4096}
    backward = ReductionSpace("BLOCK_N", [1024, 4096], [], backward=True)
    assert {c["BLOCK_N"] for c in backward.candidates(FACTS, (16384, 64, 2))} == {1024, 4096}
    # The heuristic holds rows whole where it can, a few rows a program for short ones.
    assert space.heuristic(short, FACTS, (128, 1 << 20, 2))["ROWS"] == 32
    assert space.heuristic(long, FACTS, (32768, 4096, 2))["BLOCK_N"] == 32768
    # Past the longest tile it loops in the largest block, with a warp per 256 of its elements.
    longest = (65536, 64, 2)
    assert space.heuristic(space.candidates(FACTS, longest), FACTS, longest) == {"BLOCK_N": 4096, "ROWS": 1,
                                                                                  "num_warps": 16, "UNROLL": 0}
    assert backward.heuristic(backward.candidates(FACTS, (16384, 64, 2)), FACTS, (16384, 64, 2))["BLOCK_N"] == 4096


def test_rows_broadcast_and_a_bad_one_is_named():
    from generated.layer_norm import _BACKWARD, _OP

    x, w, b = torch.zeros(2, 3, 8), torch.zeros(8), torch.zeros(8)
    assert _OP.shape("layer_norm", [("x", x), ("w", w), ("b", b)]) == ((2, 3), 8)
    rows = torch.zeros(3)  # a per-row gradient broadcast over leading axes, as autograd may hand it
    assert _BACKWARD.shape("layer_norm_backward", [("x", x), ("w", w), ("_g_y", x), ("_g_mean", rows),
                                                   ("_g_rstd", rows)]) == ((2, 3), 8)
    with pytest.raises(ValueError, match=r"layer_norm_backward: argument '_g_mean' has rows of shape \(4,\), which do not "
                                         r"broadcast with \(2, 3\)"):
        _BACKWARD.shape("layer_norm_backward", [("x", x), ("w", w), ("_g_y", x), ("_g_mean", torch.zeros(4)),
                                                ("_g_rstd", rows)])


def test_a_weights_gradient_over_no_rows_is_zero():
    from generated import rms_norm

    x = torch.zeros(0, 8, device=DEVICE, requires_grad=True)
    w = torch.ones(8, device=DEVICE, requires_grad=True)
    y, rstd = rms_norm(x, w)
    (y.sum() + rstd.sum()).backward()
    assert w.grad is not None and torch.equal(w.grad, torch.zeros(8, device=DEVICE)) and x.grad.shape == (0, 8)


def test_a_bias_gradient_is_summed_by_the_backward_kernel_not_after_it():
    # LayerNorm's bias gradient is the incoming gradient as it is, summed over the rows. Passed
    # on and summed by PyTorch after the kernel, it read the whole gradient again and took a
    # 128 MiB buffer on the H200; the kernel sums it as it goes, as it does the weight's.
    from generated.layer_norm import _layer_norm_backward

    x, w, g = torch.randn(5, 12, dtype=torch.float64), torch.randn(12, dtype=torch.float64), torch.randn(5, 12, dtype=torch.float64)
    gradients = _layer_norm_backward(*(t.to(DEVICE) for t in (x, w, g, torch.zeros(5), torch.zeros(5))), 1e-5,
                                     [True] * 3)
    assert len(gradients) == 3
    torch.testing.assert_close(gradients[2].cpu(), g.sum(0), atol=1e-12, rtol=1e-12)
    expression = parse_expression("d * r * w + b", {"d", "r", "w", "b"})
    backward = differentiate([("y", expression)], ["d", "w", "b"], computed_always=["b"])
    assert "b" in backward.computed() and "b" not in backward.passed
    assert differentiate([("y", expression)], ["d", "w", "b"]).passed == {"b": "y"}


@pytest.mark.parametrize("rows, block", [(300, None), (40, 128), (300, 128)],
                         ids=["whole_rows", "looped_rows", "looped_rows_several_steps"])
def test_a_weights_gradient_adds_up_every_programs_rows_and_columns(rows, block):
    # Rows held whole: more rows than programs (each program sums several into its workspace row),
    # more programs than one block of the finish adds at a time, columns past one block of it with
    # a partial last one: the finish misses none and counts none twice. On a GPU every program
    # finishes a share of the columns after a grid-wide wait; run twice, the workspace's counters
    # come back to zero for the next launch (a second run would hang or skip the finish otherwise).
    # Looped rows: the column phase runs down fewer rows than one of its steps, and down
    # several with a partial last one, over strips of columns with a partial last one.
    from generated import layer_norm
    from generated.layer_norm import _BACKWARD

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(rows, 300, generator=gen, dtype=torch.float64).to(DEVICE)
    w = torch.randn(300, generator=gen, dtype=torch.float64).to(DEVICE)
    b = torch.randn(300, generator=gen, dtype=torch.float64).to(DEVICE)
    g = torch.randn(rows, 300, generator=gen, dtype=torch.float64).to(DEVICE)
    leaves = [t.clone().requires_grad_() for t in (x, w, b)]
    torch.nn.functional.layer_norm(leaves[0], (300,), leaves[1], leaves[2], eps=1e-5).backward(g)
    config = None if block is None else dict(BLOCK_N=block, ROWS=1, num_warps=4)
    for _ in range(2):
        got = [t.clone().requires_grad_() for t in (x, w, b)]
        if config is None:
            layer_norm(*got)[0].backward(g)
        else:
            with _BACKWARD.configs.forcing(config):
                layer_norm(*got)[0].backward(g)
        for mine, want in zip(got, leaves):
            torch.testing.assert_close(mine.grad, want.grad, atol=1e-9, rtol=1e-9)


def test_rows_read_through_a_copy_or_written_through_one_give_the_same_result():
    from generated import softmax

    x = torch.randn(6, 4, 10, dtype=torch.float64, device=DEVICE)
    want = torch.softmax(x, -1)
    strided = x.transpose(0, 1)  # leading axes that do not merge into one row stride: read from a copy
    torch.testing.assert_close(softmax(strided), want.transpose(0, 1))
    out = torch.empty(4, 6, 10, dtype=torch.float64, device=DEVICE).transpose(0, 1)  # written through a copy
    assert softmax(x, out=out) is out
    torch.testing.assert_close(out, want)


# ---- a variant in YAML alone: the scaffold's scale-then-softmax, and Gemma's RMSNorm -------------

GEMMA = RMS_NORM.replace("op: rms", "op: gemma_rms").replace("y: x * r * w", "y: x * r * (1.0 + w)")
# A per-row input ([...]): a temperature for each row.
TEMPERED = """\
op: tempered_softmax
kind: reduction
inputs:
  x: {dtype: [float32, float64], shape: [..., N]}
  t: {dtype: x, shape: [...]}
outputs:
  y: {dtype: x, shape: [..., N]}
  lse: {dtype: x, shape: [...]}
steps:
  s: x / t
  m: max(s)
  e: exp(s - m)
compute:
  y: e / sum(e)
  lse: m + log(sum(e))
tiles:
  N: {block: BLOCK_N, sizes: [16, 64]}
"""


# The same with its max detached: the softmax and its log-sum-exp do not depend on it, so the
# gradients are the same without the max's own (which sums to zero, up to rounding).
DETACHED = TEMPERED.replace("op: tempered_softmax", "op: detached_softmax").replace("m: max(s)", "m: detach(max(s))")


# Softmax-weighted pooling (attention over one row): its forward's max pass also reads v, so the
# normalizer and the weighted sum run online there.
POOLED = """\
op: pooled_softmax
kind: reduction
inputs:
  x: {dtype: [float32, float64], shape: [..., N]}
  v: {dtype: x, shape: [..., N]}
outputs:
  y: {dtype: x, shape: [...]}
steps:
  m: detach(max(x))
compute:
  y: sum(exp(x - m) * v) / sum(exp(x - m))
tiles:
  N: {block: BLOCK_N, sizes: [16, 64]}
"""


# The row's length read by its axis's name: rows standardized by their unbiased variance
# (torch.var's, which divides by N - 1), scaled by 1 / sqrt(N) (a float function of it), and the
# variance returned.
UNBIASED = """\
op: unbiased_norm
kind: reduction
inputs:
  x: {dtype: [float32, float64], shape: [..., N]}
  w: {dtype: x, shape: [N]}
outputs:
  y: {dtype: x, shape: [..., N]}
  v: {dtype: x, shape: [...]}
steps:
  mu: mean(x)
  var: sum((x - mu) * (x - mu)) / (N - 1)
compute:
  y: (x - mu) * rsqrt(var + 1.0e-5) * w / sqrt(1.0 * N)
  v: var
tiles:
  N: {block: BLOCK_N, sizes: [16, 64]}
"""


@pytest.fixture(scope="module")
def variants(tmp_path_factory):
    from click.testing import CliRunner

    from tilegen.cli import main

    root = tmp_path_factory.mktemp("variants")
    (root / "specs").mkdir()
    scaffold = CliRunner().invoke(main, ["new", "scaled_softmax", "--kind", "reduction", "--specs", str(root / "specs")])
    assert scaffold.exit_code == 0, scaffold.output
    with built_package(root, "variant_ops", {"gemma_rms.yaml": GEMMA, "tempered_softmax.yaml": TEMPERED,
                                             "detached_softmax.yaml": DETACHED, "pooled_softmax.yaml": POOLED,
                                             "unbiased_norm.yaml": UNBIASED}) as module:
        yield module


def test_variants_written_in_yaml_compute_and_differentiate_as_pytorch(variants):
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(5, 3, 37, dtype=torch.float64, generator=generator).to(DEVICE)
    w = torch.randn(37, dtype=torch.float64, generator=generator).to(DEVICE)
    cases = [(lambda x, w: variants.scaled_softmax(x, scale=0.5), lambda x, w: torch.softmax(x * 0.5, -1),
              torch.float32),  # (the scaffold takes half and single precision)
             (lambda x, w: variants.gemma_rms(x, w, eps=1e-5)[0],
              lambda x, w: torch.nn.functional.rms_norm(x, (37,), 1.0 + w, 1e-5), torch.float64)]
    for op, oracle, dtype in cases:
        leaves = [t.to(dtype).requires_grad_() for t in (x, w)]
        exact = [t.detach().double().requires_grad_() for t in leaves]
        got, want = op(*leaves), oracle(*exact)
        torch.testing.assert_close(got, want.to(dtype))
        seed = torch.randn(want.shape, dtype=torch.float64, generator=generator).to(DEVICE)
        for g, e in zip(torch.autograd.grad(got, leaves, seed.to(dtype), allow_unused=True),
                        torch.autograd.grad(want, exact, seed, allow_unused=True)):
            assert (g is None) == (e is None)
            if e is not None:
                torch.testing.assert_close(g, e.to(dtype))


@pytest.mark.parametrize("length", [1, 2, 37, 150])  # (150: rows longer than the largest tile, which loop)
def test_a_spec_reads_the_rows_length_by_its_axis_name(variants, length):
    generator = torch.Generator().manual_seed(length)
    x = torch.randn(4, 3, length, dtype=torch.float64, generator=generator).to(DEVICE).requires_grad_()
    w = torch.randn(length, dtype=torch.float64, generator=generator).to(DEVICE).requires_grad_()
    y, v = variants.unbiased_norm(x, w)
    want_v = torch.var(x, -1)  # (NaN for rows of one element, as N - 1 is 0)
    want_y = (x - x.mean(-1, keepdim=True)) * torch.rsqrt(want_v[..., None] + 1e-5) * w / length ** 0.5
    torch.testing.assert_close(v, want_v, equal_nan=True)
    torch.testing.assert_close(y, want_y, equal_nan=True)
    seeds = [torch.randn(t.shape, dtype=torch.float64, generator=generator).to(DEVICE) for t in (y, v)]
    got = torch.autograd.grad((y * seeds[0]).sum() + (v * seeds[1]).sum(), (x, w))
    want = torch.autograd.grad((want_y * seeds[0]).sum() + (want_v * seeds[1]).sum(), (x, w))
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e, equal_nan=True)


def test_the_rows_length_is_a_name_of_reductions_alone(tmp_path):
    # Elsewhere an axis's name is no value; in a reduction it is the one it reduces, an int.
    spec, errors = validated(tmp_path, UNBIASED.replace("(N - 1)", "(M - 1)"))
    assert spec is None and any("steps.var: unknown name 'M'" in line for line in errors), errors
    spec, errors = validated(tmp_path, UNBIASED.replace("sqrt(1.0 * N)", "sqrt(N)"))
    assert spec is None and any("compute.y: sqrt() of an int value" in line for line in errors), errors
    spec, errors = validated(tmp_path, (REPO / "specs" / "add.yaml").read_text().replace("c: a + b", "c: a + N"))
    assert spec is None and any("compute.c: axis 'N' is read here, but only a reduction's math reads an axis's "
                                "length" in line for line in errors), errors


def test_the_generated_tests_of_a_spec_that_reads_the_rows_length_pass(tmp_path):
    assert_generated_tests_pass(tmp_path, {"unbiased_norm.yaml": UNBIASED}, ["unbiased_norm"],
                                "reference or gradients_match or longer_than_a_tile")


def test_a_value_per_row_is_read_in_its_own_row_blocks_step_where_loads_go_a_step_ahead(variants, monkeypatch):
    # A per-row input (a temperature) is loaded in the step that reads its rows, while the rows'
    # elements come from the loads the step before issued (PER_SM; three multiprocessors: programs
    # of several row blocks, the last partial).
    import importlib

    import tilegen.runtime.ops as ops

    monkeypatch.setattr(ops, "device_facts", lambda device: (3, 1 << 30, ""))
    module = importlib.import_module(f"{variants.__name__}.tempered_softmax")
    generator = torch.Generator().manual_seed(4)
    x = torch.randn(23, 40, dtype=torch.float64, generator=generator).to(DEVICE).requires_grad_()
    t = (torch.rand(23, dtype=torch.float64, generator=generator) + 0.5).to(DEVICE).requires_grad_()
    config = dict(BLOCK_N=64, ROWS=2, num_warps=1, UNROLL=0, PER_SM=1)
    with module._OP.configs.forcing(config), module._BACKWARD.configs.forcing(config):
        y, lse = variants.tempered_softmax(x, t)
        got = torch.autograd.grad((y * y).sum() + lse.sum(), (x, t))
    scaled = x / t[:, None]
    want_y, want_lse = torch.softmax(scaled, -1), torch.logsumexp(scaled, -1)
    want = torch.autograd.grad((want_y * want_y).sum() + want_lse.sum(), (x, t))
    torch.testing.assert_close(y, want_y)
    torch.testing.assert_close(lse, want_lse)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


@pytest.mark.parametrize("looped", [False, True], ids=["whole_rows", "looped_rows"])
def test_a_detached_max_gives_the_same_gradients_with_fewer_reductions(variants, looped):
    import importlib

    generator = torch.Generator().manual_seed(2)
    x = torch.randn(4, 100, dtype=torch.float64, generator=generator).to(DEVICE).requires_grad_()
    t = (torch.rand(4, dtype=torch.float64, generator=generator) + 0.5).to(DEVICE).requires_grad_()
    module = importlib.import_module(f"{variants.__name__}.detached_softmax")
    config = {"BLOCK_N": 16, "ROWS": 1, "num_warps": 2} if looped else None
    with module._OP.configs.forcing(config) if config else contextlib.nullcontext(), \
            module._BACKWARD.configs.forcing(config) if config else contextlib.nullcontext():
        y, lse = variants.detached_softmax(x, t)
        seeds = (torch.randn_like(y), torch.randn_like(lse))
        got = torch.autograd.grad((y, lse), (x, t), seeds)
    scaled = x / t[:, None]
    want_y, want_lse = torch.softmax(scaled, -1), torch.logsumexp(scaled, -1)
    torch.testing.assert_close(y, want_y)
    torch.testing.assert_close(lse, want_lse)
    for g, w in zip(got, torch.autograd.grad((want_y, want_lse), (x, t), seeds)):
        torch.testing.assert_close(g, w)
    # Its backward has no tie count and no gradient through the max: fewer sums than without detach.
    tempered = importlib.import_module(f"{variants.__name__}.tempered_softmax")
    sums = [Path(m.__file__).read_text().count("tl.sum(") for m in (module, tempered)]
    assert sums[0] < sums[1], sums


def test_elements_too_far_apart_for_32_bit_offsets_are_read_from_a_copy(monkeypatch):
    # Offsets along a row are 32-bit in the kernel: a row whose elements lie further apart than
    # that reaches (here: made small) is read from a contiguous copy, and written through one.
    from generated import rms_norm, softmax
    from tilegen.runtime import layout

    monkeypatch.setattr(layout, "INT32_LIMIT", 1000)
    x = torch.randn(64, 40, dtype=torch.float64, device=DEVICE).t()  # [40, 64]: elements of a row 40 apart
    w = torch.randn(64, 3, dtype=torch.float64, device=DEVICE)[:, 0]  # a weight with stride 3
    torch.testing.assert_close(softmax(x), torch.softmax(x, -1))
    y, _ = rms_norm(x, w, eps=1e-5)
    torch.testing.assert_close(y, torch.nn.functional.rms_norm(x, (64,), w, 1e-5))
    out = torch.empty(64, 40, dtype=torch.float64, device=DEVICE).t()
    softmax(x, out=out)
    torch.testing.assert_close(out, torch.softmax(x, -1))


def test_a_per_row_input_broadcasts_over_the_rows_and_gets_its_gradient(variants):
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(4, 3, 100, dtype=torch.float64, generator=generator).to(DEVICE).requires_grad_()
    t = (torch.rand(3, dtype=torch.float64, generator=generator) + 0.5).to(DEVICE).requires_grad_()
    y, lse = variants.tempered_softmax(x, t)  # t [3] broadcasts over the rows' leading axes [4, 3]
    assert y.shape == (4, 3, 100) and lse.shape == (4, 3)
    scaled = x / t[:, None]
    torch.testing.assert_close(y, torch.softmax(scaled, -1))
    torch.testing.assert_close(lse, torch.logsumexp(scaled, -1))
    seeds = (torch.randn_like(y), torch.randn_like(lse))
    got = torch.autograd.grad((y, lse), (x, t), seeds)
    want = torch.autograd.grad((torch.softmax(scaled, -1), torch.logsumexp(scaled, -1)), (x, t), seeds)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    # A row longer than the block it loops in (forced: one of the spec's blocks), forward and backward.
    import importlib

    module = importlib.import_module(f"{variants.__name__}.tempered_softmax")
    long = torch.randn(2, 300, dtype=torch.float64, generator=generator).to(DEVICE).requires_grad_()
    temperature = torch.tensor([0.7, 1.3], dtype=torch.float64).to(DEVICE).requires_grad_()
    looped = {"BLOCK_N": 64, "ROWS": 1, "num_warps": 2}
    with module._OP.configs.forcing(looped), module._BACKWARD.configs.forcing(looped):
        y, lse = variants.tempered_softmax(long, temperature)
        got = torch.autograd.grad((y, lse), (long, temperature), (torch.ones_like(y), torch.ones_like(lse)))
    scaled = long / temperature[:, None]
    want_y, want_lse = torch.softmax(scaled, -1), torch.logsumexp(scaled, -1)
    torch.testing.assert_close(y, want_y)
    torch.testing.assert_close(lse, want_lse)
    want = torch.autograd.grad((want_y, want_lse), (long, temperature), (torch.ones_like(y), torch.ones_like(lse)))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


def test_a_looped_rows_blocks_a_trip_follow_the_config_or_the_rule():
    from tilegen.runtime import ReductionSpace
    from tilegen.runtime.configs import MAX_UNROLL, row_unroll

    assert MAX_UNROLL == 8
    # 0: the row's blocks, up to 8 and up to 64 elements a thread a trip; a config's own count,
    # never more than the row has.
    assert [row_unroll(0, n, 1024, 4) for n in (1000, 1024, 3000, 4096, 9000, 1 << 20)] == [1, 1, 3, 4, 8, 8]
    assert [row_unroll(0, 1 << 20, 8192, w) for w in (4, 8, 16, 32)] == [1, 2, 4, 8]
    assert [row_unroll(2, n, 1024, 4) for n in (1000, 3000, 1 << 20)] == [1, 2, 2]
    assert row_unroll(8, 1 << 20, 8192, 4) == 8  # a measured count is taken as it is
    space = ReductionSpace("BLOCK_N", [1024, 8192], [])
    key = (32768, 4096, 2)
    # Candidates leave it to the rule; tuning also tries each other count the row's blocks allow.
    assert {c["UNROLL"] for c in space.candidates(FACTS, key)} == {0}
    explored = space.candidates(FACTS, key, explore=True)
    for block, warps in {(c["BLOCK_N"], c["num_warps"]) for c in explored if c["BLOCK_N"] < 32768}:
        counts = {c["UNROLL"] for c in explored if (c["BLOCK_N"], c["num_warps"]) == (block, warps)}
        ruled = row_unroll(0, 32768, block, warps)
        assert counts == {0} | {u for u in (1, 2, 4, 8) if u <= 32768 // block and u != ruled}, (block, warps)
    assert {c["UNROLL"] for c in explored if c["BLOCK_N"] == 8192} == {0, 1, 2, 4}  # 4 blocks: up to 4
    assert {c["UNROLL"] for c in explored if c["BLOCK_N"] == 32768} == {0}  # a whole row has one block
    # A fixed count (a spec's configs.fixed) is the only one.
    fixed = ReductionSpace("BLOCK_N", [1024], [4], unroll=[2])
    assert {c["UNROLL"] for c in fixed.candidates(FACTS, key, explore=True) if c["BLOCK_N"] == 1024} == {2}


def test_tuning_tries_whole_rows_a_few_programs_a_multiprocessor():
    from tilegen.runtime import ReductionSpace

    space = ReductionSpace("BLOCK_N", [1024, 8192], [])
    key = (4096, 4096, 2)
    # The heuristic's candidates launch a program a row block; tuning also tries 1, 2 and 4
    # programs a multiprocessor for each whole-row tile, as many warps as one holds (64) at most.
    assert all("PER_SM" not in c for c in space.candidates(FACTS, key))
    explored = space.candidates(FACTS, key, explore=True)
    for rows, warps in {(c["ROWS"], c["num_warps"]) for c in explored if c["BLOCK_N"] == 4096}:
        counts = {c.get("PER_SM", 0) for c in explored if (c["BLOCK_N"], c["ROWS"], c["num_warps"]) == (4096, rows, warps)}
        assert counts == {0} | {p for p in (1, 2, 4) if p * warps <= 64}, (rows, warps)
    assert {c.get("PER_SM", 0) for c in explored if c["BLOCK_N"] < 4096} == {0}  # a looped row: a program a row
    assert space.heuristic(explored, FACTS, key).get("PER_SM", 0) == 0
    fixed = ReductionSpace("BLOCK_N", [1024], [4], rows=[2], per_sm=[2])  # a spec's configs.fixed
    assert {c.get("PER_SM") for c in fixed.candidates(FACTS, (1024, 4096, 2))} == {2}


def test_a_spec_that_fixes_programs_a_multiprocessor_passes_its_generated_tests(tmp_path):
    # configs.fixed.PER_SM reaches the forward's launch (rows held whole up to 1024, a row a block,
    # looped past it); the backward, which sums the weight's gradient over the rows, keeps its
    # program a multiprocessor.
    spec = RMS_NORM.replace("op: rms", "op: rms_resident") + """\
configs:
  mode: fixed
  fixed: {BLOCK_N: 1024, ROWS: 1, num_warps: 4, PER_SM: 2}
"""
    assert_generated_tests_pass(tmp_path, {"rms_resident.yaml": spec}, ["rms_resident"],
                                "reference or candidate or gradients_match or longer_than_a_tile")
    module = (tmp_path / "generated" / "rms_resident.py").read_text()
    assert "per_sm=[2])" in module and "backward=True, per_sm=[0])" in module


@pytest.mark.parametrize("length, config", [
    (64, dict(BLOCK_N=64, ROWS=2, num_warps=1, UNROLL=0, PER_SM=1)),
    (300, dict(BLOCK_N=512, ROWS=1, num_warps=4, UNROLL=0, PER_SM=2)),
    (3000, dict(BLOCK_N=4096, ROWS=1, num_warps=4, UNROLL=0, PER_SM=4)),
    (3000, dict(BLOCK_N=1024, ROWS=1, num_warps=4, UNROLL=0, PER_SM=2)),
], ids=["two_rows_a_block", "a_row_a_block", "four_programs_a_multiprocessor", "looped_rows_ignore_it"])
def test_a_forward_of_a_few_programs_a_multiprocessor_loads_each_row_block_a_trip_ahead(monkeypatch, length, config):
    # PER_SM: the grid is a few programs a multiprocessor, each taking row blocks a grid apart
    # and issuing the next block's loads before this block's math: every op's forward, and the
    # backward of those whose backward sums no columns (the others' grid is theirs already).
    _every_row_op_on_three_multiprocessors(monkeypatch, length, config, seed=12, forward=True)


@pytest.mark.parametrize("length, unroll", [(9 * 1024 + 100, 0), (16 * 1024, 0), (3 * 1024 + 1, 0), (9 * 1024 + 100, 2),
                                            (3 * 1024 + 1, 1)],
                         ids=["two_trips_partial", "two_whole_trips", "one_trip", "five_trips_of_two", "a_block_a_trip"])
def test_a_row_looped_in_trips_of_several_blocks_misses_no_block(length, unroll):
    # A looped row goes UNROLL blocks a loop trip (0: the row's blocks, up to 8): more blocks
    # than one trip holds (the last trip partial, or whole), and fewer. softmax reads its row in
    # three passes (max, sum, outputs); layer_norm's backward also adds up its columns' sums per block.
    from generated import layer_norm, softmax
    from generated.layer_norm import _BACKWARD, _OP as _LAYER_NORM
    from generated.softmax import _OP as _SOFTMAX

    gen = torch.Generator().manual_seed(3)
    x = (torch.randn(2, length, generator=gen, dtype=torch.float64) * 4).to(DEVICE)
    x[:, -1] = 800.0  # exp overflows unless the max pass saw the last block
    w = torch.randn(length, generator=gen, dtype=torch.float64).to(DEVICE)
    b = torch.randn(length, generator=gen, dtype=torch.float64).to(DEVICE)
    g = torch.randn(2, length, generator=gen, dtype=torch.float64).to(DEVICE)
    looped = dict(BLOCK_N=1024, ROWS=1, num_warps=4, UNROLL=unroll)
    with _SOFTMAX.configs.forcing(looped):
        torch.testing.assert_close(softmax(x), torch.softmax(x, -1))
    got = [t.clone().requires_grad_() for t in (x, w, b)]
    want = [t.clone().requires_grad_() for t in (x, w, b)]
    with _LAYER_NORM.configs.forcing(looped), _BACKWARD.configs.forcing(looped):
        y = layer_norm(*got)[0]
        y.backward(g)
    expected = torch.nn.functional.layer_norm(want[0], (length,), want[1], want[2], eps=1e-5)
    expected.backward(g)
    torch.testing.assert_close(y, expected)
    for mine, theirs in zip(got, want):
        torch.testing.assert_close(mine.grad, theirs.grad)


def test_a_normalizer_runs_online_in_the_max_pass_where_that_pass_reads_more_than_x():
    # sum(exp(x - m)) with m = max(x): no pass of its own on a long row where the max's pass reads
    # another input along the row (a backward's gradient); other sums keep theirs.
    weighted, _ = _program([("m", "max(x)"), ("y", "sum(exp(x - m) * w) / sum(exp(x - m))")], {"x": ELEMENT, "w": ELEMENT})
    assert set(weighted.online_sums()) == {"_r1", "_r2"} and weighted.folded(2) and not weighted.folded(1)
    first = stage_pass(weighted, 1, "B")
    assert first.loads == ("x", "w")
    # One exp an element: of -|x - the lane's max|, the term or the rescaling, whichever is not 1.
    assert sum("tl.exp(" in line for line in first.body) == 1
    assert {"_r1 = tl.sum(_acc1 * tl.exp(_acc0 - _r0), axis=1, keep_dims=True)",
            "_r2 = tl.sum(_acc2 * tl.exp(_acc0 - _r0), axis=1, keep_dims=True)"} <= set(first.after)
    # log_softmax's backward: sum(g) rides in the max's pass, and the normalizer joins them.
    log_softmax_backward, _ = _program([("m", "max(x)"), ("lse", "m + log(sum(exp(x - m)))"),
                                        ("d", "g - exp(x - lse) * sum(g)")], {"x": ELEMENT, "g": ELEMENT})
    assert log_softmax_backward.folded(2) and stage_pass(log_softmax_backward, 1, "B").loads == ("x", "g")
    assert "lse = m + tl.log(_r1)" in stage_pass(log_softmax_backward, 1, "B").after
    # A forward softmax's max pass reads x alone: its normalizer keeps its pass (an L2 re-read
    # cost less than the online update on the H200, bench/results/h200/reductions/online/).
    for steps in ([("m", "max(x)"), ("e", "exp(x - m)"), ("y", "e / sum(e)")],
                  [("m", "max(x)"), ("lse", "m + log(sum(exp(x - m)))"), ("y", "x - lse")]):
        program, _ = _program(steps, {"x": ELEMENT})
        assert program.online_sums() == {} and not program.folded(2), steps
    for steps in ([("m", "max(x)"), ("y", "exp(2.0 * x - m) / sum(exp(2.0 * x - m))")],  # another u than the max's
                  [("m", "max(x)"), ("y", "exp(x - m) / sum(exp(x - m)) + sum(x - m)")],  # a stage with another sum
                  [("m", "min(x)"), ("y", "exp(x - m) / sum(exp(x - m))")]):  # not a max
        program, _ = _program(steps, {"x": ELEMENT})
        assert program.online_sums() == {} and not program.folded(2), steps


@pytest.mark.parametrize("unroll", [0, 1])
def test_an_online_normalizer_keeps_special_values_as_pytorch_does(unroll):
    # A long row's running sums are rescaled as each lane's max grows: rows whose max comes last
    # (rescaling from far below), lanes that only ever see -inf, a row of -inf, +inf and NaN.
    from generated import log_softmax, softmax
    from generated.log_softmax import _OP as _LOG_SOFTMAX
    from generated.softmax import _OP as _SOFTMAX

    n = 4 * 1024 + 37
    gen = torch.Generator().manual_seed(5)
    g = torch.randn(7, n, generator=gen, dtype=torch.float64)
    g[1, 5] = float("nan")  # where x is -inf: PyTorch's gradient of that row is NaN (0 * NaN in sum(g * y))
    x = torch.randn(7, n, generator=gen, dtype=torch.float64)
    x[0] = torch.linspace(-2000.0, 50.0, n, dtype=torch.float64)  # rising: every block raises the max
    x[1, 5::1024] = float("-inf")  # a lane of -inf in every block
    x[2] = float("-inf")
    x[3, 3000] = float("inf")
    x[4, 17] = float("nan")
    x[5] = torch.linspace(50.0, -2000.0, n, dtype=torch.float64)  # falling: the first block holds the max
    x = x.to(DEVICE)
    g = g.to(DEVICE)
    looped = dict(BLOCK_N=1024, ROWS=1, num_warps=4, UNROLL=unroll)
    for op, chosen, want in ((softmax, _SOFTMAX, torch.softmax), (log_softmax, _LOG_SOFTMAX, torch.log_softmax)):
        from importlib import import_module

        backward = import_module(f"generated.{op.__name__}")._BACKWARD
        mine, theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
        with chosen.configs.forcing(looped), backward.configs.forcing(looped):
            got = op(mine)
            (grad,) = torch.autograd.grad(got, mine, g)
        expected = want(theirs, -1)
        torch.testing.assert_close(got, expected, equal_nan=True)
        # The backward keeps its sums of exp online too (sum(e) and sum(g * e) beside the max).
        (expected_grad,) = torch.autograd.grad(expected, theirs, g)
        torch.testing.assert_close(grad, expected_grad, equal_nan=True)


@pytest.mark.parametrize("looped", [False, True], ids=["whole_rows", "looped_rows"])
def test_a_forward_whose_max_pass_reads_more_keeps_its_sums_online_as_pytorch_computes_them(variants, looped):
    # pooled_softmax's forward folds both sums (exp(x - m) and exp(x - m) * v) into the max's pass:
    # rows whose max comes last, a lane of -inf, +inf, NaN in v, and a row of -inf, against PyTorch.
    import importlib

    module = importlib.import_module(f"{variants.__name__}.pooled_softmax")
    source = Path(module.__file__).read_text()
    forward = source[source.index("def _pooled_softmax_kernel"):source.index("def _pooled_softmax_backward_kernel")]
    assert "(its sums online)" in forward
    generator = torch.Generator().manual_seed(4)
    x = torch.randn(6, 100, dtype=torch.float64, generator=generator)
    v = torch.randn(6, 100, dtype=torch.float64, generator=generator)
    x[0] = torch.linspace(-800.0, 40.0, 100, dtype=torch.float64)
    x[1, 3::16] = float("-inf")
    x[2, 50] = float("inf")
    v[3, 7] = float("nan")
    x[4] = float("-inf")
    x, v = x.to(DEVICE).requires_grad_(), v.to(DEVICE).requires_grad_()
    config = {"BLOCK_N": 16, "ROWS": 1, "num_warps": 2, "UNROLL": 2} if looped else None
    with module._OP.configs.forcing(config) if config else contextlib.nullcontext(), \
            module._BACKWARD.configs.forcing(config) if config else contextlib.nullcontext():
        y = variants.pooled_softmax(x, v)
        seed = torch.randn(y.shape, dtype=torch.float64, generator=generator).to(DEVICE)
        got = torch.autograd.grad(y, (x, v), seed)
    want = (torch.softmax(x, -1) * v).sum(-1)
    torch.testing.assert_close(y, want, equal_nan=True)
    finite = torch.isfinite(x).all(-1) & torch.isfinite(v).all(-1)  # rows whose gradients are numbers
    for g, w in zip(got, torch.autograd.grad(want, (x, v), seed)):
        torch.testing.assert_close(g[finite], w[finite])


@pytest.mark.parametrize("length, config", [
    (64, dict(BLOCK_N=64, ROWS=2, num_warps=1, UNROLL=0)),
    (3000, dict(BLOCK_N=1024, ROWS=2, num_warps=4, UNROLL=0)),
    (3000, dict(BLOCK_N=1024, ROWS=4, num_warps=4, UNROLL=2)),
], ids=["whole_two_rows_a_step", "looped_two_rows_a_step", "looped_four_rows_trips_of_two"])
def test_a_backward_takes_several_rows_a_step(monkeypatch, length, config):
    # The norms' backward kernels add up a weight's gradient: their grid is a program or two a
    # multiprocessor, so each program takes many row blocks, a whole row's loads issued a step
    # ahead, a looped row's workspace block read and written once a step of ROWS rows. Three
    # multiprocessors here: 23 rows in steps of 2 or 4 leave programs with several steps, the
    # last partial, and loads ahead past the last row. softmax's and log_softmax's backward (sums
    # online, no column sums) and add_rms_norm's (two outputs) take the same steps.
    _every_row_op_on_three_multiprocessors(monkeypatch, length, config, seed=11)


def _every_row_op_on_three_multiprocessors(monkeypatch, length, config, seed, forward=False):
    """Each reduction op of generated/ over 23 rows of `length` on three multiprocessors, where a
    grid of a program or a few a multiprocessor leaves programs with several row blocks, the last
    partial, and loads ahead past the last row: `config` forced on its backward kernel (and its
    forward's, with `forward`); outputs and gradients against PyTorch's."""
    from generated import add_rms_norm, layer_norm, log_softmax, rms_norm, softmax
    import tilegen.runtime.ops as ops

    monkeypatch.setattr(ops, "device_facts", lambda device: (3, 1 << 30, ""))
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(23, length, generator=gen, dtype=torch.float64) * 3).to(DEVICE)
    w = torch.randn(length, generator=gen, dtype=torch.float64).to(DEVICE)
    b = torch.randn(length, generator=gen, dtype=torch.float64).to(DEVICE)
    r = torch.randn(23, length, generator=gen, dtype=torch.float64).to(DEVICE)
    g = torch.randn(23, length, generator=gen, dtype=torch.float64).to(DEVICE)
    f = torch.nn.functional
    # (op, its arguments, its output the gradient enters at, PyTorch's math for that output)
    cases = [(layer_norm, (x, w, b), 0, lambda x, w, b: f.layer_norm(x, (length,), w, b, eps=1e-5)),
             (rms_norm, (x, w), 0, lambda x, w: f.rms_norm(x, (length,), w, eps=1e-6)),
             (add_rms_norm, (x, r, w), 1, lambda x, r, w: f.rms_norm(x + r, (length,), w, eps=1e-6)),
             (softmax, (x,), None, lambda x: torch.softmax(x, -1)),
             (log_softmax, (x,), None, lambda x: torch.log_softmax(x, -1))]
    for op, args, output, reference in cases:
        module = importlib.import_module(f"generated.{op.__name__}")
        got = [t.clone().requires_grad_() for t in args]
        want = [t.clone().requires_grad_() for t in args]
        with module._BACKWARD.configs.forcing(config), \
                (module._OP.configs.forcing(config) if forward else contextlib.nullcontext()):
            result = op(*got)
            result = result if output is None else result[output]
            result.backward(g)
        expected = reference(*want)
        expected.backward(g)
        torch.testing.assert_close(result, expected, msg=lambda m: f"{op.__name__}: {m}")
        for index, (mine, theirs) in enumerate(zip(got, want)):
            torch.testing.assert_close(mine.grad, theirs.grad, msg=lambda m: f"{op.__name__} input {index}: {m}")


def test_a_long_rows_column_sums_read_only_the_row_values_they_need_from_the_passes():
    # LayerNorm's weight gradient g * (x - mean) * rstd reads the row's mean (its sum) and rstd
    # from the passes, and its bias gradient nothing: the column phase gets those two values
    # a row, not the backward's every row value (sum(g * w), sum(g * w * (x - mean)), ...).
    from tilegen.build import load_specs
    from tilegen.reduction_lowering import reduction_context

    spec = next(s.spec for s in load_specs([REPO / "specs"], REPO) if s.spec.op == "layer_norm")
    kernel = reduction_context(spec, "")["backward"]["kernel"]
    columns = kernel["columns"]
    assert columns["value_count"] == 2 == len(kernel["values_store"])
    loaded = [line.split(" = ")[0] for line in columns["row_loads"]]
    assert len(loaded) == 2 and all(name.startswith(("_r", "_s")) for name in loaded)
    assert "_g_mean" not in " ".join(columns["lines"] + columns["row_loads"])
    # The row kernel's long-row output pass no longer adds up columns.
    assert not any("atomic_add" in line or "_d_w" in line for line in kernel["output_lines"] + kernel["element_stores"])


def test_a_backward_reads_an_output_where_that_spares_it_inputs_along_the_row():
    # add_rms_norm's gradients read its sum h = x + residual: one tensor along the row where the
    # inputs are two (every pass reads one fewer, and autograd keeps one fewer). An output read in
    # place of one input spares nothing: layer_norm and softmax read their inputs still.
    from tilegen.build import load_specs
    from tilegen.reduction_lowering import reduction_context

    specs = {s.spec.op: s.spec for s in load_specs([REPO / "specs"], REPO)}
    backward = reduction_context(specs["add_rms_norm"], "")["backward"]
    assert backward["kernel_inputs"][:2] == ["w", "h"] and "saved_outputs=(0,)" in backward["gradients"]
    assert not {"x", "residual"} & set(backward["kernel_inputs"])
    for op in ("layer_norm", "softmax", "rms_norm"):
        assert "x" in reduction_context(specs[op], "")["backward"]["kernel_inputs"], op


def test_a_backward_that_reads_an_output_gives_pytorchs_gradients_through_every_output():
    # add_rms_norm's backward reads its saved sum h: against PyTorch's gradients in float64, with a
    # loss that reads both h (as the next residual would) and y.
    from generated import add_rms_norm

    gen = torch.Generator().manual_seed(5)
    x, r = (torch.randn(7, 33, generator=gen, dtype=torch.float64).to(DEVICE).requires_grad_() for _ in range(2))
    w = torch.randn(33, generator=gen, dtype=torch.float64).to(DEVICE).requires_grad_()
    h, y = add_rms_norm(x, r, w)
    (h * 2 + y).sum().backward()
    want = [t.detach().clone().requires_grad_() for t in (x, r, w)]
    hh = want[0] + want[1]
    (hh * 2 + torch.nn.functional.rms_norm(hh, (33,), want[2], eps=1e-6)).sum().backward()
    for got, ref in zip((x, r, w), want):
        torch.testing.assert_close(got.grad, ref.grad)


def test_the_column_phase_spreads_the_columns_over_every_multiprocessor():
    from tilegen.runtime.configs import column_sums_tile

    for warps in (4, 8, 16, 32):
        for n in (8193, 16384, 32768, 65536, 1 << 20):
            cols, rows = column_sums_tile(n, 132, warps)
            assert cols in (32, 64, 128) and cols * rows % (32 * warps) == 0
            assert rows & (rows - 1) == 0  # a tl.arange length
            assert -(-n // cols) >= 132 or cols == 32  # a strip for every multiprocessor where columns allow
    assert column_sums_tile(32768, 132, 16) == (128, 128)
    assert column_sums_tile(16384, 132, 16) == (64, 256)
    assert column_sums_tile(1 << 20, 132, 4) == (128, 32)


def test_the_column_phase_takes_as_many_elements_a_thread_as_its_registers_hold():
    # Each step holds, a thread and an element, each sum's float32 lane, each input's value in
    # float32 and its next step's in its own dtype: rms_norm's one sum from two half inputs fits
    # 32 elements in 128 registers (16 warps, one program a multiprocessor); layer_norm's two sums
    # spilled there (bench/results/h200/reductions/column_prefetch/) and take 16, as float32 does.
    from tilegen.runtime.configs import column_sums_tile

    def elements(warps, **kwargs):
        cols, rows = column_sums_tile(32768, 132, warps, **kwargs)
        return cols * rows // (32 * warps)

    assert elements(16, sums=1, reads=2, itemsize=2) == 32  # rms_norm, half
    assert elements(16, sums=2, reads=2, itemsize=2) == 16  # layer_norm, half
    assert elements(16, sums=2, reads=2, itemsize=4) == 16  # layer_norm, float32
    assert elements(16, sums=2, reads=2, itemsize=8, compute_size=8) == 8  # float64 math: the fewest
    assert elements(8, sums=2, reads=2, itemsize=4) == 32  # 8 warps: twice the registers a thread
    assert column_sums_tile(32768, 132, 16, sums=2, reads=2, itemsize=2) == (128, 64)


def test_a_backward_space_tries_several_looped_rows_a_step_and_a_table_may_choose_them():
    from tilegen.runtime.configs import ConfigChooser, ReductionSpace, row_unroll

    key = (32768, 4096, 2)
    backward = ReductionSpace("BLOCK_N", [1024, 4096, 8192], [], backward=True)
    looped = {(c["BLOCK_N"], c["ROWS"]) for c in backward.candidates(FACTS, key, explore=True)}
    # Up to 16384 elements a step: 8192 by 2 rows, 4096 and 1024 by 4.
    assert looped == {(1024, 1), (1024, 2), (1024, 4), (4096, 1), (4096, 2), (4096, 4), (8192, 1), (8192, 2)}
    # Launches without a table, and forwards even when tuned, keep one row a step; a backward
    # without a table loops in blocks of 4096 at most, a forward (rows past its whole tile) in its largest.
    assert {c["ROWS"] for c in backward.candidates(FACTS, key)} == {1}
    assert backward.heuristic(backward.candidates(FACTS, key), FACTS, key)["BLOCK_N"] == 4096
    plain = ReductionSpace("BLOCK_N", [1024, 4096, 8192], [])
    longer = (65536, 4096, 2)
    assert plain.heuristic(plain.candidates(FACTS, longer), FACTS, longer)["BLOCK_N"] == 8192
    forward = ReductionSpace("BLOCK_N", [1024, 4096, 8192], [])
    assert {c["ROWS"] for c in forward.candidates(FACTS, key, explore=True) if c["BLOCK_N"] < 32768} == {1}
    # The rule's blocks a trip count every row of the step: 64 elements a thread at most.
    assert row_unroll(0, 32768, 4096, 16) == 8 and row_unroll(0, 32768, 4096, 16, rows=4) == 2
    # A tuned entry whose tile only tuning tries is launched where it applies.
    tuned = dict(BLOCK_N=4096, ROWS=4, num_warps=16, UNROLL=0)
    assert ConfigChooser("auto", backward, {"GPU": {key: tuned}}).choose(key, (132, 1 << 30, "GPU"), None) == tuned
    assert ConfigChooser("auto", backward, {"GPU": {key: tuned}}).choose(key, (132, 1 << 30, "other"), None) != tuned


ROW_VALUE_OPS = {
    "logsumexp.yaml": """\
op: logsumexp
kind: reduction
inputs:
  x: {dtype: [float16, float32, float64], shape: [..., N]}
outputs:
  lse: {dtype: x, shape: [...]}
steps:
  m: detach(max(x))
compute:
  lse: m + log(sum(exp(x - m)))
tiles:
  N: {block: BLOCK_N, sizes: [16, 64]}
""",
    "row_rms.yaml": """\
op: row_rms
kind: reduction
inputs:
  x: {dtype: [float16, float32], shape: [..., N]}
outputs:
  rms: {dtype: [float32], shape: [...]}
compute:
  rms: sqrt(mean(x * x))
tiles:
  N: {block: BLOCK_N, sizes: [16, 64]}
""",
    # A per-row input inside a where, beside the row's max and min (each has a gradient).
    "top_half.yaml": """\
op: top_half
kind: reduction
inputs:
  x: {dtype: [float32, float64], shape: [..., N]}
  t: {dtype: x, shape: [...]}
outputs:
  y: {dtype: x, shape: [..., N]}
compute:
  y: where(x > max(x) * 0.5, x * t, 0.0) + min(x) * t
tiles:
  N: {block: BLOCK_N, sizes: [16, 64]}
""",
    # A per-row input beside an output that does not read it: the oracle gives that output the
    # rows' shape from the per-row input's, which it has already given a last axis of 1.
    "scaled_rows.yaml": """\
op: scaled_rows
kind: reduction
inputs:
  x: {dtype: [float32, float64], shape: [..., N]}
  t: {dtype: x, shape: [...]}
outputs:
  y: {dtype: x, shape: [..., N]}
  total: {dtype: [float32], shape: [...]}
  first: {dtype: x, shape: [..., N]}
compute:
  y: x * t
  total: sum(x)
  first: x * 2.0
tiles:
  N: {block: BLOCK_N, sizes: [16, 64]}
""",
}


def test_ops_with_values_per_row_pass_their_generated_tests(tmp_path):
    """Ops with values per row ([...]) get generated tests and an oracle that fit them: an op
    whose only output is a value per row, an out= of that output's own shape (strided, or sharing
    memory with an input where one has its dtype); a per-row input, read by the oracle as one
    value for the whole row (PyTorch would line [...] up with N) and given NaN and inf in its
    few elements; outputs that do not read the per-row input given the rows' shape beside it."""
    assert_generated_tests_pass(tmp_path, ROW_VALUE_OPS, ["logsumexp", "row_rms", "top_half", "scaled_rows"],
                                "out_argument or bad_arguments or reference or nan_and_inf or gradients_match_autograd")
    tests = (tmp_path / "generated" / "tests" / "test_row_rms.py").read_text()
    assert "shares memory with input" not in tests  # no input has float32 rms's dtype in every case


ROW_REDUCTIONS = """\
op: row_reductions
kind: reduction
inputs:
  x: {dtype: [float32, float64], shape: [..., N]}
outputs:
  total: {dtype: x, shape: [...]}
  high: {dtype: x, shape: [...]}
  low: {dtype: x, shape: [...]}
  average: {dtype: x, shape: [...]}
  lse: {dtype: x, shape: [...]}
steps:
  m: detach(max(x))
compute:
  total: sum(x)
  high: max(x)
  low: min(x)
  average: mean(x)
  lse: m + log(sum(exp(x - m)))
tiles:
  N: {block: BLOCK_N, sizes: [16, 64]}
"""


EXTREMES = """\
op: extremes
kind: reduction
doc: each row's max and min, scaled.
inputs:
  x: {dtype: [float64], shape: [..., N]}
outputs:
  high: {dtype: x, shape: [...]}
  low: {dtype: x, shape: [...]}
compute:
  high: 2.0 * max(x)
  low: min(x)
tiles:
  N: {block: BLOCK_N, sizes: [16, 64]}
"""


@pytest.mark.parametrize("length", [37, 150])  # a row held whole, and one looped
def test_the_gradients_of_max_and_min_split_ties_and_spread_a_rows_nan_as_pytorchs(tmp_path, length):
    with built_package(tmp_path, "extremes_ops", {"extremes.yaml": EXTREMES}) as module:
        x = torch.randn(5, length, dtype=torch.float64)
        x[1, 3] = float("nan")  # that row's max and min are NaN: NaN gradients over the row
        x[2, :2] = x[2].max() + 1.0  # a tie for the max, splitting its gradient
        x[3, 5] = x[3, 7] = x[3].min() - 1.0  # and for the min
        leaf = x.to(DEVICE).requires_grad_()
        high, low = module.extremes(leaf)
        seeds = torch.randn(2, 5, dtype=torch.float64).to(DEVICE)
        got, = torch.autograd.grad([high, low], leaf, list(seeds))
        reference = x.to(DEVICE).requires_grad_()
        want, = torch.autograd.grad([2.0 * reference.amax(-1), reference.amin(-1)], reference, list(seeds))
    torch.testing.assert_close(got, want, equal_nan=True)
    assert got[1].isnan().all() and not got[[0, 2, 3, 4]].isnan().any()


def test_rows_of_length_zero_give_each_reduction_its_identity(tmp_path):
    with built_package(tmp_path, "row_reduction_ops", {"row_reductions.yaml": ROW_REDUCTIONS}) as module:
        x = torch.randn(4, 37, dtype=torch.float64).to(DEVICE)
        got = module.row_reductions(x)
        want = (x.sum(-1), x.amax(-1), x.amin(-1), x.mean(-1), torch.logsumexp(x, -1))
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w)
        empty = module.row_reductions(torch.empty(3, 0, dtype=torch.float64, device=DEVICE))
        inf = torch.full((3,), float("inf"), dtype=torch.float64, device=DEVICE)
        for g, w in zip(empty, (torch.zeros_like(inf), -inf, inf, inf * float("nan"), -inf)):
            torch.testing.assert_close(g, w, equal_nan=True)


def test_a_step_no_output_reads_is_not_computed(tmp_path):
    spec = RMS_NORM.replace("op: rms", "op: rms_spare").replace(
        "  r: rsqrt(mean(x * x) + eps)", "  r: rsqrt(mean(x * x) + eps)\n  spare: sum(x * 3.0)")
    with built_package(tmp_path, "spare_ops", {"rms_spare.yaml": spec}) as package:
        source = (tmp_path / "spare_ops" / "rms_spare.py").read_text()
        assert "spare =" not in source and "3.0" not in source  # no pass, no sum of it
        x = torch.randn(3, 40, dtype=torch.float64, device=DEVICE)
        w = torch.randn(40, dtype=torch.float64, device=DEVICE)
        y, rstd = package.rms_spare(x, w)
        torch.testing.assert_close(y, torch.nn.functional.rms_norm(x, (40,), w, 1e-6))


WEIGHT_ONLY = """\
op: weight_total
kind: reduction
inputs:
  w: {dtype: [float32, float64], shape: [N]}
  x: {dtype: w, shape: [..., N]}
outputs:
  total: {dtype: w, shape: [...]}
  y: {dtype: w, shape: [...]}
compute:
  total: sum(w * w)
  y: sum(x)
tiles:
  N: {block: BLOCK_N, sizes: [16, 64]}
"""


def test_a_value_per_row_that_reads_only_a_weight_has_a_gradient(tmp_path):
    """sum(w * w) is the same for every row: the backward reads nothing with rows but its
    incoming gradient ([...]) and takes the rows' input for N alone."""
    with built_package(tmp_path, "weight_ops", {"weight_total.yaml": WEIGHT_ONLY}) as package:
        w = torch.randn(37, dtype=torch.float64, device=DEVICE, requires_grad=True)
        x = torch.randn(4, 37, dtype=torch.float64, device=DEVICE)
        total, y = package.weight_total(w, x)
        torch.testing.assert_close(total, (w * w).sum().expand(4))
        g = torch.randn(4, dtype=torch.float64, device=DEVICE)
        (grad,) = torch.autograd.grad(total, w, g)
        torch.testing.assert_close(grad, 2 * w.detach() * g.sum())


PER_ROW_SCALE = """\
op: row_scaled
kind: reduction
inputs:
  x: {dtype: [float16], shape: [..., N]}
  t: {dtype: [float32], shape: [...]}
outputs:
  y: {dtype: x, shape: [..., N]}
compute:
  y: (x - mean(x)) * t
tiles:
  N: {block: BLOCK_N, sizes: [16, 64]}
"""


def test_a_float32_per_row_input_beside_half_rows_gets_a_float32_precise_gradient(tmp_path):
    """t's gradient (the row's sum of the half incoming gradient times x less its mean) is made
    in float32, t's dtype, not rounded to half on the way."""
    with built_package(tmp_path, "per_row_scale_ops", {"row_scaled.yaml": PER_ROW_SCALE}) as package:
        generator = torch.Generator().manual_seed(4)
        x = torch.randn(6, 50, generator=generator).to(DEVICE, torch.float16).requires_grad_()
        t = torch.rand(6, generator=generator).to(DEVICE).requires_grad_()
        y = package.row_scaled(x, t)
        g = torch.randn(6, 50, generator=generator).to(DEVICE, torch.float16)
        gx, gt = torch.autograd.grad(y, (x, t), g)
        assert gx.dtype == torch.float16 and gt.dtype == torch.float32
        centered = x.detach().double() - x.detach().double().mean(-1, keepdim=True)
        torch.testing.assert_close(gt.double(), (g.double() * centered).sum(-1), atol=1e-5, rtol=1e-5)


# Outputs that depend on no input's value, beside ones that do: a row's share of elements above a
# per-row threshold (a count of comparisons), a float flag.
CONSTANT_OUTPUT_OPS = {
    "above.yaml": """
op: above
kind: reduction
doc: the share of each row above its threshold, and a weighted sum.
inputs:
  x: {dtype: [float32, float64], shape: [..., N]}
  t: {dtype: x, shape: [...]}
  w: {dtype: x, shape: [N]}
outputs:
  frac: {dtype: [float32], shape: [...]}
  s: {dtype: x, shape: [...]}
steps:
  f: mean(where(x > t, 1.0, 0.0))
compute:
  frac: f
  s: sum(x * w) * t
tiles:
  N: {block: BLOCK_N, sizes: [128]}
""",
    "flag_mul.yaml": """
op: flag_mul
kind: elementwise
doc: y = a * b and a float flag where a > b.
inputs:
  a: {dtype: [float32, float64]}
  b: {dtype: a}
outputs:
  y: {dtype: a}
  flag: {dtype: a}
compute:
  y: a * b
  flag: where(a > b, 1.0, 0.0)
tiles:
  N: {block: BLOCK, sizes: [256]}
""",
}


def test_gradients_are_compared_where_an_output_depends_on_no_input(tmp_path):
    """The oracle's output of a count has no autograd graph: it adds nothing to the gradients."""
    assert_generated_tests_pass(tmp_path, CONSTANT_OUTPUT_OPS, ["above", "flag_mul"], "gradient")


def test_a_weight_named_after_the_kernels_workspace_builds_and_computes(tmp_path):
    """`workspace` is a value name like any other: its pointer is not the kernel's workspace_ptr."""
    text = (REPO / "specs" / "rms_norm.yaml").read_text().replace("op: rms_norm", "op: rms_workspace")
    text = re.sub(r"\bw\b", "workspace", text)
    assert_generated_tests_pass(tmp_path, {"rms_workspace.yaml": text}, ["rms_workspace"], "matches_reference or gradients_match")


def test_tuning_tries_the_row_length_compiled_in_where_it_is_a_power_of_two():
    import torch.fx.experimental.symbolic_shapes as symbolic
    from torch._dynamo.source import ConstantSource
    from tilegen import tune
    from tilegen.runtime import ReductionSpace
    from tilegen.runtime.configs import fixed_row_length

    space = ReductionSpace("BLOCK_N", [1024, 8192], [])
    key = (32768, 4096, 2)
    assert all("FIXED_N" not in c for c in space.candidates(FACTS, key))  # the heuristic's: read at run time
    explored = space.candidates(FACTS, key, explore=True)
    plain = [c for c in explored if "FIXED_N" not in c]
    assert sorted(map(str, [c for c in explored if c.get("FIXED_N")])) == sorted(str({**c, "FIXED_N": 1}) for c in plain)
    # Its length is no power of two: no kernel of its own to try.
    assert all("FIXED_N" not in c for c in space.candidates(FACTS, (30000, 4096, 2), explore=True))
    # The first pass times each launch read at run time; the leading launches' twins come with warps.
    first = tune.first_pass(space.candidates(FACTS, key), explored)
    assert first and all("FIXED_N" not in c for c in first)
    # A spec's configs.fixed.FIXED_N is the only one.
    assert {c.get("FIXED_N") for c in ReductionSpace("BLOCK_N", [1024], [4], fixed_n=[1]).candidates(FACTS, key)} == {1}
    # Cache hints (EVICT) likewise, beside every looped config, never a row held whole (no later pass).
    assert {c.get("EVICT", 0) for c in explored if c["BLOCK_N"] < 32768} == {0, 1}
    assert {c.get("EVICT", 0) for c in explored if c["BLOCK_N"] == 32768 and not c.get("LOOP")} == {0}
    assert all("EVICT" not in c for c in space.candidates(FACTS, key) + first)
    hinted = ReductionSpace("BLOCK_N", [1024], [4], evict=[1]).candidates(FACTS, key)
    assert {c.get("EVICT") for c in hinted if c["BLOCK_N"] == 1024} == {1}
    # The launch compiles the length in only where asked, for a power of two, never a traced symbol.
    assert fixed_row_length({"FIXED_N": 1}, 4096) == 4096
    assert fixed_row_length({"FIXED_N": 1}, 4000) == fixed_row_length({"FIXED_N": 0}, 4096) == fixed_row_length({}, 4096) == 0
    shapes = symbolic.ShapeEnv()
    symbol = shapes.create_symintnode(shapes.create_symbol(4096, source=ConstantSource("n")), hint=4096)
    assert fixed_row_length({"FIXED_N": 1}, symbol) == 0


@pytest.mark.parametrize("length, config", [
    (1024, dict(BLOCK_N=256, ROWS=1, num_warps=2, UNROLL=0, FIXED_N=1)),
    (2048, dict(BLOCK_N=256, ROWS=1, num_warps=2, UNROLL=2, FIXED_N=1, EVICT=1)),
    (1024, dict(BLOCK_N=1024, ROWS=2, num_warps=4, UNROLL=0, FIXED_N=1, EVICT=1)),
    (1000, dict(BLOCK_N=256, ROWS=1, num_warps=2, UNROLL=0, FIXED_N=1, EVICT=1)),
], ids=["looped_one_trip", "looped_four_trips_hinted", "whole_rows", "no_power_of_two_hinted"])
def test_a_row_length_compiled_in_computes_what_the_run_time_length_does(monkeypatch, length, config):
    # FIXED_N: the row length a constant of the kernel (its loops' trip counts known, whole blocks'
    # masks folded away), in every op's forward and backward, looped and whole; a length that is
    # no power of two is read at run time (an entry compiles one kernel, not one per length).
    # EVICT: a looped row's loads hint the cache (a whole row has no later pass to keep it for).
    from tilegen.runtime.launch import Kernel

    seen = set()
    launch = Kernel.launch

    def recording(self, grid, args, varying, constexprs, *rest, **options):
        seen.add((constexprs.get("FIXED_N"), constexprs.get("EVICT")))
        return launch(self, grid, args, varying, constexprs, *rest, **options)
    monkeypatch.setattr(Kernel, "launch", recording)
    _every_row_op_on_three_multiprocessors(monkeypatch, length, config, seed=21, forward=True)
    hinted = bool(config.get("EVICT")) and config["BLOCK_N"] < length
    assert seen == {(length if length & (length - 1) == 0 else 0, hinted)}


def test_a_compiled_graph_launches_the_row_length_compiled_in_and_the_cache_hints(monkeypatch):
    # Traced (torch.compile: on a GPU TorchInductor launches the kernels through wrap_triton), a
    # table's FIXED_N and EVICT reach the forward's and the backward's launches as constexprs.
    from generated import layer_norm, softmax
    from tilegen.runtime.launch import Kernel
    from generated.layer_norm import _BACKWARD as _NORM_BACKWARD, _OP as _NORM
    from generated.softmax import _BACKWARD as _SOFTMAX_BACKWARD, _OP as _SOFTMAX

    backend = "inductor" if DEVICE == "cuda" else "aot_eager"
    gen = torch.Generator().manual_seed(5)
    x, w, b, g = (torch.randn(*shape, generator=gen, dtype=torch.float64).to(DEVICE, torch.float32)
                  for shape in ((6, 1024), (1024,), (1024,), (6, 1024)))
    looped = dict(BLOCK_N=256, ROWS=1, num_warps=2, UNROLL=0, FIXED_N=1, EVICT=1)
    f = torch.nn.functional
    cases = [(lambda x, w, b: layer_norm(x, w, b)[0], lambda x, w, b: f.layer_norm(x, (1024,), w, b, eps=1e-5),
              (_NORM, _NORM_BACKWARD)),
             (lambda x, w, b: softmax(x) * w + b, lambda x, w, b: torch.softmax(x, -1) * w + b,
              (_SOFTMAX, _SOFTMAX_BACKWARD))]
    seen = []
    launch = Kernel.launch

    def recording(self, grid, args, varying, constexprs, *rest, **options):
        seen.append((constexprs.get("FIXED_N"), constexprs.get("EVICT")))
        return launch(self, grid, args, varying, constexprs, *rest, **options)
    monkeypatch.setattr(Kernel, "launch", recording)
    for op, reference, choosers in cases:
        torch._dynamo.reset()
        seen.clear()
        got = [t.clone().requires_grad_() for t in (x, w, b)]
        want = [t.clone().requires_grad_() for t in (x, w, b)]
        with choosers[0].configs.forcing(looped), choosers[1].configs.forcing(looped):
            y = torch.compile(op, fullgraph=True, backend=backend)(*got)
            y.backward(g)
        expected = reference(*want)
        expected.backward(g)
        torch.testing.assert_close(y, expected)
        for mine, theirs in zip(got, want):
            torch.testing.assert_close(mine.grad, theirs.grad)
        assert len(seen) >= 2 and set(seen) == {(1024, True)}  # the forward's launch and the backward's


@pytest.mark.parametrize("dtype, exact", [(torch.float32, True), (torch.float64, True), (torch.float16, False)])
def test_a_looped_rows_output_is_stored_by_the_first_pass_and_read_back_where_that_is_exact(launches, dtype, exact):
    # add_rms_norm's h = x + residual is an output the first pass can store: the outputs' pass then
    # loads h (one stream) instead of x and residual (two), as TorchInductor's loops do. That reads
    # y's input back in the output's dtype: the launch does it only where that dtype is the math's
    # (float32, float64), so a half-precision h (a rounded sum) never feeds y. A whole row has no
    # later pass. Both agree with PyTorch either way.
    from generated import add_rms_norm
    from generated.add_rms_norm import _OP
    from tilegen.build import load_specs
    from tilegen.reduction_lowering import forward_program
    from tilegen.rows import output_pass, read_back

    [source] = load_specs([REPO / "specs" / "add_rms_norm.yaml"])
    program = forward_program(source.spec)
    back = read_back(program, ["h", "y"], stage_pass(program, 1, "BLOCK_N"))
    assert back.outputs == ("h",) and back.rest == ("y",)
    assert back.final.loads == ("h", "w") and output_pass(program, ["h", "y"]).loads == ("x", "residual", "w")
    gen = torch.Generator().manual_seed(31)
    x, r = (torch.randn(5, 1024, generator=gen, dtype=torch.float64).to(DEVICE, dtype) for _ in range(2))
    w = torch.randn(1024, generator=gen, dtype=torch.float64).to(DEVICE, dtype)
    want = torch.nn.functional.rms_norm((x.double() + r.double()), (1024,), w.double(), eps=1e-6)
    for block, looped in ((256, True), (1024, False)):
        with _OP.configs.forcing(dict(BLOCK_N=block, ROWS=1, num_warps=2, UNROLL=0)):
            h, y = add_rms_norm(x, r, w)
        assert launches[-1].constexprs["READ_BACK"] == (looped and exact)
        torch.testing.assert_close(h, x + r, rtol=0, atol=0)
        tolerance = {torch.float16: 2e-3, torch.float32: 1e-5, torch.float64: 1e-12}[dtype]
        torch.testing.assert_close(y.double(), want, rtol=tolerance, atol=tolerance)


READ_BACK_SPEC = """\
op: sum_then_norm
kind: reduction
inputs:
  x: {dtype: [float32, float64, float16], shape: [..., N]}
  y: {dtype: x, shape: [..., N]}
  w: {dtype: x, shape: [N]}
outputs:
  u: {dtype: x, shape: [..., N]}
  v: {dtype: x, shape: [..., N]}
steps:
  s: x * w + y
  d: s - mean(s)
compute:
  u: s
  v: d * rsqrt(mean(d * d) + 1.0e-5)
tiles:
  N: {block: BLOCK_N, sizes: [16, 64]}
"""


def test_an_output_read_back_over_two_passes_passes_its_generated_tests(tmp_path):
    # u (two streams and a weight) is stored by the first of two passes (the mean's; the variance's
    # pass computes u again from x and y) and read back by the outputs' pass, where v then needs
    # neither x nor y nor w; a half-precision u is not read back. The generated tests run every
    # candidate config (float32 rows of 69 looped in 16-element blocks: read back) and the
    # oracle's checks in every dtype, with gradients.
    from tilegen.build import load_specs
    from tilegen.reduction_lowering import forward_program
    from tilegen.rows import read_back

    (tmp_path / "spec.yaml").write_text(READ_BACK_SPEC)
    [source] = load_specs([tmp_path / "spec.yaml"])
    program = forward_program(source.spec)
    back = read_back(program, ["u", "v"], stage_pass(program, 1, "BLOCK_N"))
    assert back.outputs == ("u",) and back.final.loads == ("u",) and back.rest == ("v",)
    assert_generated_tests_pass(tmp_path / "package", {"sum_then_norm.yaml": READ_BACK_SPEC}, ["sum_then_norm"],
                                "reference or out_argument or gradients_match_autograd or nan_and_inf or every_candidate")
    kernel = (tmp_path / "package" / "generated" / "sum_then_norm.py").read_text()
    assert "READ_BACK: tl.constexpr" in kernel and "read_back=(3,)" in kernel, kernel


BOOL_STEPS_SPEC = """\
op: shift_above
kind: reduction
doc: rows holding a negative value shifted to start at zero, and the mean of the values above the row's mean.
inputs:
  x: {dtype: [float32, float64, float16], shape: [..., N]}
  w: {dtype: x, shape: [N]}
outputs:
  y: {dtype: x, shape: [..., N]}
  z: {dtype: x, shape: [..., N]}
  above: {dtype: [float32], shape: [...]}
steps:
  lo: min(x)
  negative: lo < 0.0
  keep: x > mean(x)
  count: sum(where(keep, 1.0, 0.0))
compute:
  y: where(negative, x - lo, x) * w
  z: keep * x + negative * w
  above: sum(where(keep, x, 0.0)) / count
tiles:
  N: {block: BLOCK_N, sizes: [16, 64]}
"""


def test_a_step_that_compares_holds_bool_values_and_passes_its_generated_tests(tmp_path):
    # A comparison step (per element and per row) is read by where() and in products as PyTorch's
    # bool tensors are: the kernel keeps it an int1 value, the oracle a bool tensor, and the
    # backward routes no gradient through it. Rows of 69 loop in 16-element blocks.
    spec, errors = validated(tmp_path, BOOL_STEPS_SPEC)
    assert errors == [], errors
    kinds = spec.number_kinds()
    assert [kinds[name].category for name, _ in spec.steps] == ["float", "bool", "bool", "float"]
    assert_generated_tests_pass(tmp_path / "package", {"shift_above.yaml": BOOL_STEPS_SPEC}, ["shift_above"],
                                "reference or gradients_match_autograd or nan_and_inf or every_candidate")


@pytest.mark.parametrize("old, new, key, words", [
    ("count: sum(where(keep, 1.0, 0.0))", "count: sum(keep)", "steps.count", "sum() of a bool value"),
    ("count: sum(where(keep, 1.0, 0.0))", "count: mean(keep * 1.0) + max(keep)", "steps.count",
     "max() of a bool value"),
    ("z: keep * x + negative * w", "z: x - keep", "compute.z", "- with a bool value"),
    ("z: keep * x + negative * w", "z: where(count, x, w)", "compute.z", "the condition of where() is float"),
    ("count: sum(where(keep, 1.0, 0.0))", "count: sum(exp(keep))", "steps.count", "exp() of a bool value"),
])
def test_a_bool_step_is_refused_where_its_math_is_not_defined(tmp_path, old, new, key, words):
    assert old in BOOL_STEPS_SPEC
    spec, errors = validated(tmp_path, BOOL_STEPS_SPEC.replace(old, new))
    assert spec is None and len(errors) == 1, errors
    assert f": {key}: " in errors[0] and words in errors[0], errors


@pytest.mark.parametrize("config", [
    dict(BLOCK_N=256, ROWS=1, num_warps=2, UNROLL=0, LOOP=1),
    dict(BLOCK_N=256, ROWS=1, num_warps=4, UNROLL=0, LOOP=1, FIXED_N=1, EVICT=1),
], ids=["run_time_length", "fixed_length_hinted"])
def test_a_row_its_block_holds_passed_over_as_a_longer_one_computes_the_same(monkeypatch, config):
    # LOOP: a row of 256 in a 256-element block runs the looped kernel (a pass a stage, a trip
    # each, the outputs' pass loading the row again), in every op's forward and backward.
    from tilegen.runtime.launch import Kernel

    seen = set()
    launch = Kernel.launch

    def recording(self, grid, args, varying, constexprs, *rest, **options):
        seen.add((constexprs.get("ONE_TILE"), constexprs.get("EVICT")))
        return launch(self, grid, args, varying, constexprs, *rest, **options)
    monkeypatch.setattr(Kernel, "launch", recording)
    _every_row_op_on_three_multiprocessors(monkeypatch, 256, config, seed=23, forward=True)
    assert seen == {(False, bool(config.get("EVICT")))}


def test_tuning_tries_a_long_row_its_block_holds_passed_over_in_the_forward_only():
    from tilegen.runtime import ReductionSpace
    from tilegen.runtime.configs import LOOP_ROWS_FROM

    key = (32768, 4096, 4)
    explored = ReductionSpace("BLOCK_N", [1024, 8192], []).candidates(FACTS, key, explore=True)
    passed = [c for c in explored if c.get("LOOP")]
    # One row a program in the whole row's block, with each warp count and cache hint tried.
    assert passed and {(c["BLOCK_N"], c["ROWS"]) for c in passed} == {(32768, 1)}
    assert {c.get("EVICT", 0) for c in passed} == {0, 1} and len({c["num_warps"] for c in passed}) > 1
    # Not the heuristic's, nor for shorter rows, nor in a backward; a spec's configs.fixed.LOOP is the only one.
    assert not any(c.get("LOOP") for c in ReductionSpace("BLOCK_N", [1024, 8192], []).candidates(FACTS, key))
    short = (LOOP_ROWS_FROM // 2, 4096, 4)
    assert not any(c.get("LOOP") for c in ReductionSpace("BLOCK_N", [1024], []).candidates(FACTS, short, explore=True))
    backward = ReductionSpace("BLOCK_N", [1024], [], backward=True).candidates(FACTS, (8192, 4096, 4), explore=True)
    assert not any(c.get("LOOP") for c in backward)
    only = ReductionSpace("BLOCK_N", [1024], [], loop=[1]).candidates(FACTS, short, explore=True)
    assert all(c.get("LOOP") == 1 for c in only if c["BLOCK_N"] >= short[0])
    space = ReductionSpace("BLOCK_N", [1024, 8192], [])
    assert not space.heuristic(explored, FACTS, key).get("LOOP")


NO_GRADIENT_SPEC = """\
op: flag_rows
kind: reduction
doc: elements above the row mean as a float flag, the row's share of them, and whether it spans more than 1.
inputs:
  x: {dtype: [float16, float32], shape: [..., N]}
outputs:
  flag: {dtype: x, shape: [..., N]}
  share: {dtype: [float32], shape: [...]}
  wide: {dtype: x, shape: [...]}
steps:
  keep: x > mean(x)
  spans: max(x) - min(x) > 1.0
compute:
  flag: keep
  share: mean(where(keep, 1.0, 0.0))
  wide: spans
tiles:
  N: {block: BLOCK_N, sizes: [16, 64]}
"""


def test_an_op_whose_outputs_give_no_input_a_gradient_passes_its_generated_tests(tmp_path):
    # Comparisons and counts of them: a call that records autograd has gradients of zero and no
    # backward kernel, so the generated tests hold none that launches one.
    from tilegen.build import load_specs
    from tilegen.reduction_lowering import has_backward_kernel

    (tmp_path / "spec.yaml").write_text(NO_GRADIENT_SPEC)
    [source] = load_specs([tmp_path / "spec.yaml"])
    assert not has_backward_kernel(source.spec)
    assert_generated_tests_pass(tmp_path / "package", {"flag_rows.yaml": NO_GRADIENT_SPEC}, ["flag_rows"], "test_")
    tests = (tmp_path / "package" / "generated" / "tests" / "test_flag_rows.py").read_text()
    assert "_BACKWARD" not in tests


MASKED_SPECS = {
    "masked_softmax.yaml": """
op: masked_softmax
kind: reduction
doc: softmax over the elements a mask keeps (a row that keeps none is NaN, as PyTorch's).
inputs:
  x: {dtype: [float16, float32, float64], shape: [..., N]}
  keep: {dtype: [bool], shape: [..., N]}
scalars:
  scale: {type: float, default: 1.0}
outputs:
  y: {dtype: x, shape: [..., N]}
steps:
  s: where(keep, x * scale, -inf)
  m: max(s)
  e: exp(s - m)
compute:
  y: e / sum(e)
tiles:
  N: {block: BLOCK_N, sizes: [16, 64]}
reference:
  y: softmax(where(keep, x * scale, -inf))
""",
    "masked_norm.yaml": """
op: masked_norm
kind: reduction
doc: RMSNorm over the columns a [N] mask keeps; rows a [...] flag turns off are zero.
inputs:
  x: {dtype: [float16, float32], shape: [..., N]}
  cols: {dtype: [bool], shape: [N]}
  on: {dtype: [bool], shape: [...]}
scalars:
  eps: {type: float, default: 1.0e-6}
outputs:
  y: {dtype: x, shape: [..., N]}
steps:
  v: where(cols, x, 0.0)
  r: rsqrt(sum(v * v) / sum(where(cols, 1.0, 0.0)) + eps)
compute:
  y: where(on, v * r, 0.0)
tiles:
  N: {block: BLOCK_N, sizes: [16, 64]}
""",
}


def test_bool_masks_of_elements_columns_and_rows_pass_their_generated_tests(tmp_path):
    # A reduction's bool inputs are read as they are (int1: no cast to the math's dtype), carry no
    # gradient, and mask with -inf as PyTorch's masked softmax does; rows of 69 loop in 16-element
    # blocks, every candidate config runs, gradients against autograd of the oracle.
    assert_generated_tests_pass(tmp_path, MASKED_SPECS, ["masked_softmax", "masked_norm"], "test_")
    kernel = (tmp_path / "generated" / "masked_softmax.py").read_text()
    loads = [line.strip() for line in kernel.splitlines() if line.strip().startswith("keep = ")]
    assert loads and all(".to(compute)" not in line for line in loads), loads


@pytest.mark.parametrize("old, new, key, words", [
    ("y: {dtype: x, shape: [..., N]}", "y: {dtype: keep, shape: [..., N]}", "outputs.y.dtype",
     "of a reduction holds bool values"),
    ("m: max(s)", "m: max(s) + sum(keep)", "steps.m", "sum() of a bool value"),
    ("keep: {dtype: [bool], shape: [..., N]}", "inf: {dtype: [bool], shape: [..., N]}", "inputs.inf",
     "reserved: it is infinity"),
])
def test_a_bool_mask_is_refused_where_it_cannot_serve(tmp_path, old, new, key, words):
    text = MASKED_SPECS["masked_softmax.yaml"]
    assert old in text
    spec, errors = validated(tmp_path, text.replace(old, new))
    assert spec is None and errors and f": {key}: " in errors[0] and words in errors[0], errors
