"""The README and docs/ cannot drift: their specs validate, their Python runs, their commands run
and print what they say, and CI runs the README's own setup and test commands."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest
import torch

from tests.conftest import REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"(<!-- gpu[^>]*-->\n)?```(\w+)\n(.*?)```", re.S)


def _blocks(language):
    for doc in DOCS:
        for match in FENCE.finditer(doc.read_text()):
            if match.group(2) == language:
                yield pytest.param(match.group(3), bool(match.group(1)),
                                   id=f"{doc.relative_to(REPO)}:{doc.read_text()[:match.start()].count(chr(10)) + 1}")


@pytest.mark.parametrize("text, gpu", list(_blocks("yaml")))
def test_every_spec_in_the_docs_validates(text, gpu, tmp_path, cli):
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "example.yaml").write_text(text)
    result = cli("check", tmp_path / "specs")
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("text, gpu", list(_blocks("python")))
def test_every_python_snippet_in_the_docs_runs(text, gpu):
    if gpu and not torch.cuda.is_available():
        pytest.skip("a GPU snippet (marked <!-- gpu -->): runs on a machine with CUDA")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # the snippet sets it itself
    env["PYTHONPATH"] = str(REPO)
    if not torch.cuda.is_available():
        env["TRITON_INTERPRET"] = "1"
    done = subprocess.run([sys.executable, "-c", text], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


def _console_commands():
    """(command, the lines the docs show it printing) for each `$ tilegen ...` line."""
    for doc in DOCS:
        lines = doc.read_text().splitlines()
        for index, line in enumerate(lines):
            if line.startswith("    $ tilegen "):
                shown = []
                for after in lines[index + 1:]:
                    if not after.startswith("    ") or after.startswith("    $ "):
                        break
                    shown.append(after[4:])
                yield pytest.param(line[6:], shown, id=f"{doc.relative_to(REPO)}:{index + 1}")


@pytest.mark.parametrize("command, shown", list(_console_commands()))
def test_every_command_in_the_docs_runs_and_prints_what_they_show(command, shown, tmp_path):
    # In a copy of the project, so that no command writes into the checkout.
    shutil.copytree(REPO / "specs", tmp_path / "specs")
    shutil.copytree(REPO / "generated", tmp_path / "generated", ignore=shutil.ignore_patterns("__pycache__"))
    args = shlex.split(command)
    done = subprocess.run([sys.executable, "-m", "tilegen", *args[1:]], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    printed = done.stdout.splitlines()
    assert printed[:len(shown)] == shown


def test_ci_runs_the_readmes_setup_and_test_commands():
    readme = (REPO / "README.md").read_text()
    ci = (REPO / ".ci" / "run").read_text()
    setup = 'pip install torch==2.13.0 -e ".[test]"'
    test = "tilegen build specs/ --check && python -m pytest -q -n auto"
    assert f"    {setup}\n" in readme and setup in ci.replace("python -m pip install --quiet", "pip install")
    assert f"    {test}\n" in readme and ci.rstrip().endswith(test)


def test_docs_link_only_to_files_that_exist():
    for doc in DOCS:
        for target in re.findall(r"\]\(([\w./-]+)(?:#[\w-]*)?\)", doc.read_text()):
            if "/" in target or target.endswith(".md"):  # a path, not code such as kernel[grid](...)
                assert (doc.parent / target).exists(), f"{doc.relative_to(REPO)} links to missing {target}"
