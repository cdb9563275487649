"""Hostile specs that once ended in tracebacks, wrong kernels or unbounded work: numbers past
what Python or a kernel can take, a file of gigabytes, expressions whose emitted code would
explode. Each builds small or is refused with one line."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

import pytest


def _spec(project, name, old, new, extra=""):
    text = (project / "specs" / "add.yaml").read_text().replace("op: add", f"op: {name}").replace(old, new) + extra
    folder = project / name
    folder.mkdir()
    (folder / f"{name}.yaml").write_text(text)
    return folder


def _errors(result):
    return [line for line in result.output.splitlines() if not line.startswith("tilegen: ")]


@pytest.mark.parametrize("name, old, new, extra, key", [
    ("digits_default", "", "", "scalars:\n  k: {type: int, default: " + "9" * 5000 + "}\n", "scalars.k.default"),
    ("digits_shape", "", "", "test:\n  shapes: [[" + "9" * 5000 + "]]\n", "test.shapes.0.0"),
    ("digits_expression", "c: a + b", "c: a + " + "9" * 5000, "", "compute.c"),
    ("int_past_64_bits", "", "", "scalars:\n  k: {type: int, default: " + str(2**64) + "}\n", "scalars.k.default"),
    ("float_past_range", "c: a + b", "c: a + 1e400", "", "compute.c"),
    ("float_default_past_range", "", "", "scalars:\n  k: {type: float, default: 1e31}\n", "scalars.k.default"),
    ("float_default_text", "", "", "scalars:\n  k: {type: float, default: 1e3x}\n", "scalars.k.default"),
])
def test_numbers_nothing_can_hold_are_refused_in_one_line(cli, project, name, old, new, extra, key):
    result = cli("check", _spec(project, name, old, new, extra))
    assert result.exit_code == 2 and "Traceback" not in result.output
    errors = _errors(result)
    assert len(errors) == 1 and f": {key}: " in errors[0], result.output


def test_an_int_literal_past_what_a_kernel_holds_is_computed_as_the_number_it_is(cli, project):
    """Triton cannot represent an int past 64 bits: the kernel gets it as a float, as the math is."""
    folder = _spec(project, "big_literal", "c: a + b", "c: a + 99999999999999999999")
    assert cli("build", folder, "--package", "big_pkg").exit_code == 0
    code = ("import torch, big_pkg\n"
            "got = big_pkg.big_literal(torch.ones(4), torch.zeros(4))\n"
            "torch.testing.assert_close(got, torch.full((4,), 1e20))\nprint('ok')\n")
    env = dict(os.environ, TRITON_INTERPRET="1")
    if __import__("torch").cuda.is_available():
        code = code.replace("torch.ones(4)", "torch.ones(4, device='cuda')").replace(
            "torch.zeros(4)", "torch.zeros(4, device='cuda')").replace("(4,), 1e20)", "(4,), 1e20, device='cuda')")
        env.pop("TRITON_INTERPRET")
    done = subprocess.run([sys.executable, "-c", code], cwd=project, env=env, capture_output=True, text=True)
    assert done.stdout.strip() == "ok", done.stderr[-2000:]


def test_a_file_of_gigabytes_is_refused_without_reading_it(cli, project):
    folder = project / "huge"
    folder.mkdir()
    with open(folder / "huge.yaml", "wb") as handle:
        handle.truncate(3 * 2**30)  # sparse: no disk, and reading it whole would take 3 GB
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = cli("check", folder)
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert result.exit_code == 2 and "file is larger than" in result.output
    assert len(_errors(result)) == 1 and grown_mb < 100


@pytest.mark.parametrize("wrap", ["relu({})", "({}) ** 8", "gelu({})", "maximum({0}, minimum({0}, b))",
                                  "where({0} > b, {0}, -{0})"])
def test_every_construct_nested_to_the_limit_builds_small_or_is_refused(cli, project, wrap):
    """Each operand the emitted code repeats is bound once: output grows with the spec, not
    exponentially (relu nested 9 deep once built for minutes into 21 MB)."""
    nested = "a"
    for _ in range(12):
        nested = wrap.format(nested)
    folder = _spec(project, "nested", "c: a + b", f"c: {nested} + b")
    result = cli("build", folder, "--package", "nested_pkg")
    if result.exit_code == 0:
        sizes = [p.stat().st_size for p in (project / "nested_pkg").rglob("*.py")]
        assert max(sizes) < 60_000, sizes
    else:
        assert len(_errors(result)) == 1, result.output


def test_a_float_default_yaml_reads_as_text_is_the_number_it_spells(cli, project):
    """YAML 1.1 reads 1e30 and 1.0e30 (no exponent sign) as text, where a user wrote a number."""
    from tilegen.build import load_specs

    folder = _spec(project, "scaled_add", "c: a + b", "c: a + b * k", "scalars:\n  k: {type: float, default: 2.5e3}\n")
    assert cli("check", folder).exit_code == 0
    [source] = load_specs([folder / "scaled_add.yaml"])
    assert source.spec.scalars[0].default == 2500.0
