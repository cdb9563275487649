"""Find specs, validate them all, and write the generated package atomically.

A build renders every file in memory, writes them into a temporary folder beside the
output, compiles each Python file, and only then swaps the folder in. Any failure leaves
the previous output byte-identical. Files tilegen did not write are never deleted.
"""

from __future__ import annotations

import difflib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .errors import ErrorLog, SpecFailure
from .render import HEADER_PREFIX, Renderer, SpecSource
from .spec import Spec
from .validate import validate_document
from .yaml_source import load_document

SPEC_SUFFIXES = (".yaml", ".yml")
# Folders Python and pytest create inside the package; they are caches, not user files.
DISPOSABLE = {"__pycache__", ".pytest_cache"}


class BuildError(Exception):
    """A build could not proceed for a reason that is not a spec error (exit 2)."""


def find_spec_files(paths: list[Path], errors: ErrorLog) -> list[Path]:
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            for entry in sorted(p for p in path.iterdir() if p.suffix in SPEC_SUFFIXES):
                if entry.is_file():
                    files.append(entry)
                elif not entry.is_dir():  # a dangling link, a FIFO, a socket: never skipped silently
                    errors.add(str(entry), 0, "", "not a regular file", "spec files are plain YAML files")
        elif path.is_file():
            files.append(path)
        elif path.exists() or path.is_symlink():
            errors.add(str(path), 0, "", "not a regular file or folder")
        else:
            errors.add(str(path), 0, "", "no such file or folder")
    return files


def display_path(path: Path, root: Path) -> str:
    """How generated headers and errors name a spec: relative to the project root when inside it."""
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return path.as_posix()


def load_specs(paths: list[Path], root: Path | None = None) -> list[SpecSource]:
    """Validate every spec under `paths`; raise SpecFailure with all errors of all files."""
    root = root or Path.cwd()
    errors = ErrorLog()
    files = find_spec_files(paths, errors)
    if not files and not errors:
        errors.add(", ".join(str(p) for p in paths), 0, "", "no spec files found", "*.yaml or *.yml files")
    sources: list[SpecSource] = []
    seen: dict[str, str] = {}
    for file in files:
        shown = display_path(file, root)
        doc = load_document(file, errors, shown)
        if doc is None:
            continue
        spec = validate_document(doc, errors)
        if spec is None:
            continue
        if spec.op in seen:
            errors.add(shown, doc.line("op"), "op", f"op {spec.op!r} is already defined in {seen[spec.op]}",
                       "each op name once")
            continue
        seen[spec.op] = shown
        sources.append(SpecSource(spec, shown, file.read_bytes()))
    if errors:
        raise SpecFailure(errors)
    return sources


def render_package(sources: list[SpecSource], out: Path, root: Path) -> dict[str, str]:
    package = out.resolve().name
    if not package.isidentifier():
        raise BuildError(f"{out}: the output folder's name {package!r} is not a valid Python package name")
    specs_display = ", ".join(sorted({str(Path(s.display).parent.as_posix()) + "/" for s in sources}))
    return Renderer(package=package).package_files(sources, specs_display)


def _is_ours(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            return handle.read(len(HEADER_PREFIX)) == HEADER_PREFIX.encode()
    except OSError:
        return False


def foreign_files(out: Path) -> list[Path]:
    """Files under `out` that tilegen did not write (no header), caches aside."""
    if not out.exists():
        return []
    found = []
    for path in sorted(out.rglob("*")):
        if any(part in DISPOSABLE for part in path.relative_to(out).parts):
            continue
        if path.is_file() and not _is_ours(path) or path.is_symlink():
            found.append(path)
    return found


def _compile_all(folder: Path, files: dict[str, str]) -> None:
    for relative, text in files.items():
        if relative.endswith(".py"):
            try:
                compile(text, str(folder / relative), "exec")
            except SyntaxError as exc:
                raise BuildError(f"{relative}:{exc.lineno}: generated code does not compile: {exc.msg} "
                                 "(a template bug; please report it)") from None


def write_package(files: dict[str, str], out: Path, force: bool = False, _fail_after: int | None = None) -> None:
    """Atomically replace `out` with `files`.

    Refuses when `out` holds files without tilegen's header, unless `force`; forced or not,
    such files are carried into the new folder, never deleted.
    """
    out = out.resolve()
    if out.exists() and not out.is_dir():
        raise BuildError(f"{out}: exists and is not a folder")
    foreign = foreign_files(out)
    if foreign and not force:
        names = ", ".join(str(p.relative_to(out)) for p in foreign[:5])
        more = f" and {len(foreign) - 5} more" if len(foreign) > 5 else ""
        raise BuildError(f"{out}: holds files tilegen did not write ({names}{more}); "
                         "move them away or pass --force to keep them beside the generated files")
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.tilegen-", dir=out.parent))
    try:
        for index, (relative, text) in enumerate(files.items()):
            if _fail_after is not None and index >= _fail_after:
                raise OSError("injected failure (tests)")
            target = staging / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        _compile_all(staging, files)
        for path in foreign:
            target = staging / path.relative_to(out)
            if target.exists():
                raise BuildError(f"{path}: a file tilegen did not write has the name of a generated file")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target, follow_symlinks=False)
        _swap_in(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _swap_in(staging: Path, out: Path) -> None:
    if not out.exists():
        os.replace(staging, out)
        return
    retired = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
    os.rmdir(retired)
    os.replace(out, retired)
    try:
        os.replace(staging, out)
    except BaseException:
        os.replace(retired, out)
        raise
    shutil.rmtree(retired, ignore_errors=True)


@dataclass
class Staleness:
    missing: list[str]
    changed: list[str]
    extra: list[str]
    diff: str

    @property
    def clean(self) -> bool:
        return not (self.missing or self.changed or self.extra)


def compare_package(files: dict[str, str], out: Path) -> Staleness:
    """What differs between freshly rendered `files` and the folder `out` (for --check)."""
    missing, changed, extra, diff = [], [], [], []
    for relative, text in files.items():
        path = out / relative
        if not path.is_file():
            missing.append(relative)
            continue
        current = path.read_text(encoding="utf-8", errors="replace")
        if current != text:
            changed.append(relative)
            diff.extend(difflib.unified_diff(current.splitlines(True), text.splitlines(True),
                                             f"{out.name}/{relative} (on disk)",
                                             f"{out.name}/{relative} (from specs)", n=2))
    if out.is_dir():
        for path in sorted(out.rglob("*")):
            relative = path.relative_to(out).as_posix()
            if path.is_file() and relative not in files and _is_ours(path) \
                    and not any(part in DISPOSABLE for part in path.relative_to(out).parts):
                extra.append(relative)
    return Staleness(missing, changed, extra, "".join(diff))


def spec_summary(spec: Spec) -> tuple[str, str, str]:
    """(op, kind, signature) of a spec, for `tilegen list`."""
    ins = ", ".join(f"{t.name}[{','.join(t.shape)}]" if t.shape else t.name for t in spec.inputs)
    outs = ", ".join(t.name for t in spec.outputs)
    return spec.op, spec.kind, f"({ins}) -> {outs}"