"""Helpers shared by the generator's tests."""

from __future__ import annotations

import contextlib
import importlib
import shutil
import sys
from pathlib import Path
from typing import NamedTuple

import pytest
from click.testing import CliRunner

from tilegen.cli import main

REPO = Path(__file__).resolve().parent.parent
SPECS = REPO / "specs"


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A scratch project: specs/ copied from the repo, cwd set to it."""
    shutil.copytree(SPECS, tmp_path / "specs")
    monkeypatch.chdir(tmp_path)
    return tmp_path


class Launch(NamedTuple):
    args: tuple
    constexprs: dict


@pytest.fixture
def launches(monkeypatch):
    """Every kernel launch through tilegen.runtime (its arguments and constexprs), in order; each
    still runs."""
    from tilegen.runtime.launch import Kernel

    seen, real = [], Kernel.launch

    def launch(self, grid, args, varying, constexprs, *rest):
        seen.append(Launch(args, constexprs))
        return real(self, grid, args, varying, constexprs, *rest)

    monkeypatch.setattr(Kernel, "launch", launch)
    return seen


@pytest.fixture
def cli():
    runner = CliRunner()

    def invoke(*args):
        return runner.invoke(main, [str(a) for a in args], catch_exceptions=False)

    return invoke


def kernel_device() -> str:
    """Where a test's kernels run: "cuda" on a GPU, "cpu" under Triton's interpreter; else the
    test is skipped (no GPU, and TRITON_INTERPRET is off)."""
    import torch

    from tilegen.runtime.device import INTERPRET

    if torch.cuda.is_available():
        return "cuda"
    if not INTERPRET:
        pytest.skip("needs the interpreter or a GPU")
    return "cpu"


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` with its bytes (caches aside)."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts}


@contextlib.contextmanager
def built_package(root: Path, package: str, specs: dict[str, str] = None):
    """The package `package`, built under `root` from the YAML files of root/specs (`specs`: file
    name -> text, written there first) and imported; `root` leaves sys.path afterwards."""
    folder = root / "specs"
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in (specs or {}).items():
        (folder / name).write_text(text)
    result = CliRunner().invoke(main, ["build", str(folder), "-o", str(root / package)])
    assert result.exit_code == 0, result.output
    sys.path.insert(0, str(root))
    try:
        yield importlib.import_module(package)
    finally:
        sys.path.remove(str(root))


def generated_tests_run(root: Path, specs: dict[str, str], ops, selection: str):
    """Build `specs` (file name -> YAML text) into root/generated and run the generated tests of
    `ops` whose names match the pytest -k expression `selection`, as `tilegen test` does (in
    Triton's interpreter without a GPU). Returns the finished process; the build must succeed."""
    import os
    import subprocess

    import torch

    (root / "specs").mkdir(parents=True, exist_ok=True)
    for name, text in specs.items():
        (root / "specs" / name).write_text(text)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    if not torch.cuda.is_available():
        env["TRITON_INTERPRET"] = "1"
    build = subprocess.run([sys.executable, "-m", "tilegen", "build", "specs/"], cwd=root, env=env,
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stdout + build.stderr
    return subprocess.run([sys.executable, "-m", "tilegen", "test", *ops, "--pytest-args",
                           f"-q -p no:cacheprovider -k '{selection}'"], cwd=root, env=env, capture_output=True, text=True)


def assert_generated_tests_pass(root: Path, specs: dict[str, str], ops, selection: str):
    """generated_tests_run, which must pass (and run something)."""
    run = generated_tests_run(root, specs, ops, selection)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert " passed" in run.stdout and " failed" not in run.stdout
    return run


def validated(tmp_path: Path, text: str):
    """(the Spec of the YAML `text`, or None; the error lines it got), as `tilegen check` reports
    them for specs/spec.yaml."""
    from tilegen.errors import ErrorLog
    from tilegen.validate import validate_document
    from tilegen.yaml_source import load_document

    path = tmp_path / "spec.yaml"
    path.write_text(text)
    errors = ErrorLog()
    doc = load_document(path, errors, "specs/spec.yaml")
    spec = validate_document(doc, errors) if doc is not None else None
    return spec, errors.lines()


def run_in_threads(target, count: int):
    """Run `target` in `count` threads at once, until each returns (what it raises is its own:
    a target that is to report an exception catches it)."""
    import threading

    threads = [threading.Thread(target=target) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
