"""Helpers shared by the generator's tests."""

from __future__ import annotations

import shutil
from pathlib import Path

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


@pytest.fixture
def cli():
    runner = CliRunner()

    def invoke(*args):
        return runner.invoke(main, [str(a) for a in args], catch_exceptions=False)

    return invoke


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` with its bytes (caches aside)."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts}
