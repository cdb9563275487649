"""Malformed and hostile specs: each must fail with exit 2, clean one-line errors, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import snapshot

CORPUS = Path(__file__).resolve().parent / "corpus"
CASES = sorted(p.stem for p in CORPUS.glob("*.yaml"))


def test_corpus_is_large_enough():
    assert len(CASES) >= 40


@pytest.mark.parametrize("case", CASES)
def test_bad_spec_gets_one_clean_error(case, cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    expected = (CORPUS / f"{case}.expect").read_text().strip()
    spec = tmp_path / "specs" / f"{case}.yaml"
    spec.parent.mkdir()
    spec.write_bytes((CORPUS / f"{case}.yaml").read_bytes())
    result = cli("build", "specs", "-o", "generated")
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert "Traceback" not in result.output
    assert lines[-1].startswith("tilegen: ") and "nothing was written" in lines[-1]
    errors = lines[:-1]
    assert errors, result.output
    for line in errors:
        # path:line: key: message, or path: message for the file as a whole
        assert line.startswith(f"specs/{case}.yaml:"), line
        assert line.split(":")[1].isdigit() or line.startswith(f"specs/{case}.yaml: "), line
    assert any(expected in line for line in errors), f"{expected!r} not in {errors}"
    assert not (tmp_path / "generated").exists()
    assert snapshot(tmp_path) == {f"specs/{case}.yaml": (CORPUS / f"{case}.yaml").read_bytes()}


def test_all_errors_of_a_build_are_reported_at_once(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    specs = tmp_path / "specs"
    specs.mkdir()
    for case in ("unknown_dtype", "expr_import", "bad_mask_value"):
        (specs / f"{case}.yaml").write_bytes((CORPUS / f"{case}.yaml").read_bytes())
    result = cli("check", "specs")
    assert result.exit_code == 2
    files = {line.split(":")[0] for line in result.output.splitlines() if line.startswith("specs/")}
    assert files == {f"specs/{c}.yaml" for c in ("unknown_dtype", "expr_import", "bad_mask_value")}


def test_op_names_colliding_across_files(cli, project):
    (project / "specs" / "add_again.yaml").write_text((project / "specs" / "add.yaml").read_text())
    result = cli("check", "specs")
    assert result.exit_code == 2
    assert "op 'add' is already defined in specs/add.yaml" in result.output


@pytest.mark.parametrize("file, op, other", [("softmax_backward.yaml", "softmax_backward", "softmax"),
                                             ("a_first.yaml", "matmul_relu_training", "matmul_relu")])
def test_an_op_named_as_another_ops_registered_backward_or_training_op_is_refused(cli, project, file, op, other):
    # softmax registers softmax_backward (its backward kernel), a matmul <op>_training: a spec of
    # that name would take over the registration, and a traced backward would call it. Either
    # file may come first.
    source = (project / "specs" / "softmax.yaml").read_text().replace("op: softmax", f"op: {op}", 1)
    (project / "specs" / file).write_text(source)
    result = cli("check", "specs")
    assert result.exit_code == 2 and result.output.endswith("tilegen: 1 error\n"), result.output
    first, second = sorted([(file, op), (f"{other}.yaml", other)])
    assert result.output.startswith(f"specs/{second[0]}:2: op: op {second[1]!r} registers {op!r}, which op "
                                    f"{first[1]!r} in specs/{first[0]} also registers"), result.output
