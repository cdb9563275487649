"""Random row programs (steps that reduce, steps that read reductions, outputs of both levels),
built into ops and run in every way a row can be computed: held whole, several rows a program,
looped over in blocks; forward and backward, against PyTorch's autograd of the same math in
float64. The staging (rows.py), the lowering, the kernels and the derived backward all meet
programs no spec in specs/ has."""

from __future__ import annotations

import importlib
import random

import pytest
import torch

from tilegen.expressions import assignments, parse_expression
from tests.conftest import built_package

ELEMENT_FORMS = ["{a} * {b}", "{a} + {b}", "exp({a} - {r})", "{a} - {r}", "{a} * {r}", "sigmoid({a}) * {b}",
                 "tanh({a}) * {r}", "{a} / (1.0 + {r} * {r})", "maximum({a}, {b})", "where({a} > {r}, {a}, {b})"]
ROW_FORMS = ["sum({e})", "mean({e})", "max({e})", "min({e})", "rsqrt(mean({e} * {e}) + 1.0)",
             "log(sum(exp({e})))", "{r} + sum({e}) / 8.0"]
PROGRAMS = 10
N_BLOCKS = [16, 32]


def _program(seed: int) -> tuple[list[tuple[str, str]], str, str]:
    """(steps, the element output's expression, the row output's expression) of a random program."""
    rng = random.Random(seed)
    elements, rows = ["x", "w"], []
    steps = []

    def element():
        form = rng.choice(ELEMENT_FORMS if rows else [f for f in ELEMENT_FORMS if "{r}" not in f])
        return "(" + form.format(a=rng.choice(elements), b=rng.choice(elements), r=rng.choice(rows) if rows else "") + ")"

    for index in range(rng.randint(2, 4)):
        if index % 2 == 0 or not rows:
            form = rng.choice(ROW_FORMS if rows else [f for f in ROW_FORMS if "{r}" not in f])
            name = f"r{index}"
            steps.append((name, form.format(e=element(), r=rng.choice(rows) if rows else "")))
            rows.append(name)
        else:
            name = f"e{index}"
            steps.append((name, element()))
            elements.append(name)
    return steps, f"{element()} + {rows[-1]}", f"{rows[-1]} * 2.0 + {rows[0]}"


def _spec(seed: int) -> str:
    steps, y, r = _program(seed)
    lines = [f"op: program_{seed}", "kind: reduction",
             "inputs:", "  x: {dtype: [float64], shape: [..., N]}", "  w: {dtype: x, shape: [N]}",
             "outputs:", "  y: {dtype: x, shape: [..., N]}", "  r: {dtype: x, shape: [...]}",
             "steps:", *(f"  {name}: {source}" for name, source in steps),
             "compute:", f"  y: {y}", f"  r: {r}",
             "tiles:", f"  N: {{block: BLOCK_N, sizes: {N_BLOCKS}}}"]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    specs = {f"program_{seed}.yaml": _spec(seed) for seed in range(PROGRAMS)}
    with built_package(tmp_path_factory.mktemp("programs"), "program_ops", specs) as module:
        yield module


def _oracle(seed, x, w):
    """The program's math in PyTorch (the expression language's own float64 emission)."""
    steps, y, r = _program(seed)
    names = {"x", "w"}
    parsed = []
    for name, source in steps + [("y", y), ("r", r)]:
        parsed.append((name, parse_expression(source, set(names), reductions=True)))
        names.add(name)
    env = {"x": x, "w": w, "torch": torch}
    exec("\n".join(assignments(parsed, "torch")), {}, env)  # noqa: S102 - emitted from checked trees
    # Outputs have the rows' shape, also one that reads only the weight.
    return env["y"].expand(x.shape), env["r"].expand(*x.shape[:-1], 1).squeeze(-1)


CONFIGS = {"whole row": None, "rows looped in blocks of 16": {"BLOCK_N": 16, "ROWS": 1, "num_warps": 1},
           "several rows a program": {"BLOCK_N": 64, "ROWS": 4, "num_warps": 2}}


@pytest.mark.parametrize("how", list(CONFIGS))
@pytest.mark.parametrize("seed", range(PROGRAMS))
def test_a_random_row_program_computes_and_differentiates_as_pytorch(programs, seed, how):
    module = importlib.import_module(f"{programs.__name__}.program_{seed}")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    generator = torch.Generator().manual_seed(seed)
    x = (torch.randn(3, 5, 37, dtype=torch.float64, generator=generator) * 0.5).to(device).requires_grad_()
    w = (torch.randn(37, dtype=torch.float64, generator=generator) * 0.5).to(device).requires_grad_()
    config = CONFIGS[how]
    if config is None:
        got = getattr(programs, f"program_{seed}")(x, w)
        seeds = [torch.randn(t.shape, dtype=torch.float64, generator=generator).to(device) for t in got]
        grads = torch.autograd.grad(got, (x, w), seeds, allow_unused=True)
    else:
        with module._OP.configs.forcing(config), module._BACKWARD.configs.forcing(config):
            got = getattr(programs, f"program_{seed}")(x, w)
            seeds = [torch.randn(t.shape, dtype=torch.float64, generator=generator).to(device) for t in got]
            grads = torch.autograd.grad(got, (x, w), seeds, allow_unused=True)
    want = _oracle(seed, x, w)
    for g, e in zip(got, want):
        torch.testing.assert_close(g, e, atol=1e-10, rtol=1e-10)
    for g, e in zip(grads, torch.autograd.grad(want, (x, w), seeds, allow_unused=True)):
        assert (g is None) == (e is None)
        if e is not None:
            torch.testing.assert_close(g, e, atol=1e-9, rtol=1e-9)
