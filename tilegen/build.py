"""Find specs, validate them all, and write the generated package.

A build renders every file in memory and compiles each Python file before writing anything. A
first build writes a staging folder beside the output and renames it into place whole; later
builds stage each file beside its target and rename them over their targets only once all are
staged (see write_package). Any failure before that leaves the previous output byte-identical;
readers never find the folder or a file missing. Files tilegen did not write are never deleted.
"""

from __future__ import annotations

import difflib
import fcntl
import os
import re
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .errors import ErrorLog, SpecFailure
from .naming import registered_ops
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
    registered: dict[str, tuple[str, str]] = {}  # op name registered -> (the spec's file, its op)
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
        taken = next(((n, registered[n]) for n in registered_ops(spec.op, spec.kind) if n in registered), None)
        if taken is not None:
            name, (where, owner) = taken
            errors.add(shown, doc.line("op"), "op",
                       f"op {spec.op!r} registers {name!r}, which op {owner!r} in {where} also registers",
                       "a name no other op registers: not <op>, <op>_backward nor a matmul's <op>_training")
            continue
        seen[spec.op] = shown
        registered.update({n: (shown, spec.op) for n in registered_ops(spec.op, spec.kind)})
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


_HASH_LINE = re.compile(rb"# tilegen [0-9][\w.+-]* sha256:[0-9a-f]{24}\n")


def _is_ours(path: Path) -> bool:
    """Whether `path` is a file tilegen wrote: a regular file (not a link, FIFO or socket) whose
    first two lines are its full header and hash line."""
    try:
        if not stat.S_ISREG(path.lstat().st_mode):
            return False
        with path.open("rb") as handle:
            first, second = handle.readline(4096), handle.readline(4096)
    except OSError:
        return False
    return _HEADER_LINE.fullmatch(first) is not None and _HASH_LINE.fullmatch(second) is not None


_HEADER_LINE = re.compile(re.escape(HEADER_PREFIX.encode()) + rb" from [^\n]*\. DO NOT EDIT\.\n")
# What an interrupted build leaves: files staged beside their targets, and (from older versions)
# staging folders beside the package.
_STAGED = ".tilegen-new"
_OLD_STAGING = (".tilegen-", ".old-")


def foreign_files(out: Path) -> list[Path]:
    """Entries under `out` that tilegen did not write (files without its header, links, FIFOs,
    sockets), caches and tilegen's own staging aside."""
    if not out.exists():
        return []
    found = []
    for path in sorted(out.rglob("*")):
        if any(part in DISPOSABLE for part in path.relative_to(out).parts) or path.name.endswith(_STAGED):
            continue
        if path.is_dir() and not path.is_symlink():
            continue
        if not _is_ours(path):
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
    """Write `files` into `out`, touching nothing tilegen did not write.

    Every file is first staged beside its target and the whole set compiled; only then is each
    renamed over its target, so a failure before that point leaves the output byte-identical and
    readers never find the folder or a file missing. Files tilegen wrote that the specs no longer
    produce are removed; nothing else is, `--force` included: it only allows writing beside
    files tilegen did not write, and never over one. Builds into one folder take turns (a lock),
    and a build first clears what an interrupted one left. The folder keeps its mode.
    """
    out = out.resolve()
    if out.exists() and not out.is_dir():
        raise BuildError(f"{out}: exists and is not a folder")
    _compile_all(out, files)  # before anything is written: a template bug leaves no trace
    if not out.exists() and _create_whole(files, out, _fail_after):
        return
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    folder = os.open(out, os.O_RDONLY)
    try:
        # The folder itself is the lock (it is never replaced): released when this build ends,
        # or its process dies.
        fcntl.flock(folder, fcntl.LOCK_EX)
        _write_locked(files, out, force, _fail_after)
    except BaseException:
        if created:
            shutil.rmtree(out, ignore_errors=True)  # the folder this build made, and only it
        raise
    finally:
        os.close(folder)


def _write_locked(files: dict[str, str], out: Path, force: bool, _fail_after: int | None) -> None:
    """write_package's work, the folder's lock held."""
    _clear_interrupted(out)
    foreign = foreign_files(out)
    if foreign and not force:
        names = ", ".join(str(p.relative_to(out)) for p in foreign[:5])
        more = f" and {len(foreign) - 5} more" if len(foreign) > 5 else ""
        raise BuildError(f"{out}: holds files tilegen did not write ({names}{more}); "
                         "move them away or pass --force to write beside them (they are kept)")
    clashes = [p for p in foreign if p.relative_to(out).as_posix() in files]
    if clashes:
        raise BuildError(f"{clashes[0]}: a file tilegen did not write has the name of a generated file; "
                         "it is not overwritten")
    staged = []
    try:
        for index, (relative, text) in enumerate(files.items()):
            if _fail_after is not None and index >= _fail_after:
                raise OSError("injected failure (tests)")
            target = out / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            temporary = target.with_name(f".{target.name}{_STAGED}")
            temporary.write_text(text, encoding="utf-8")
            staged.append((temporary, target))
    except BaseException:
        for temporary, _ in staged:
            temporary.unlink(missing_ok=True)
        raise
    for temporary, target in staged:
        os.replace(temporary, target)
    for relative in _left_over(files, out):
        (out / relative).unlink()


def _create_whole(files: dict[str, str], out: Path, _fail_after: int | None) -> bool:
    """A first build: the package is written in a staging folder beside `out` and renamed into
    place whole, so no reader sees it half written. False where another build created `out`
    meanwhile (this one then updates it in place, in turn)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.tilegen-", dir=out.parent))
    held = os.open(staging, os.O_RDONLY)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)  # a live build's staging: _clear_interrupted leaves it alone
        for index, (relative, text) in enumerate(files.items()):
            if _fail_after is not None and index >= _fail_after:
                raise OSError("injected failure (tests)")
            target = staging / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(staging, 0o777 & ~mask)  # as mkdir would make it (mkdtemp makes it private)
        try:
            os.rename(staging, out)
        except OSError:
            if out.exists():
                return False
            raise
        return True
    finally:
        os.close(held)
        shutil.rmtree(staging, ignore_errors=True)


def _clear_interrupted(out: Path) -> None:
    """Remove what a killed build left: staged files in `out`, and staging folders beside it that
    no live build holds."""
    for path in out.rglob(f"*{_STAGED}"):
        if stat.S_ISREG(path.lstat().st_mode):
            path.unlink()
    for path in out.parent.glob(f".{out.name}.*"):
        if path.is_dir() and not path.is_symlink() and any(path.name.startswith(f".{out.name}{mark}")
                                                          for mark in _OLD_STAGING):
            try:
                held = os.open(path, os.O_RDONLY)
            except OSError:
                continue
            try:
                fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # a build is writing it
            finally:
                os.close(held)
            shutil.rmtree(path, ignore_errors=True)


@dataclass
class Staleness:
    missing: list[str]
    changed: list[str]
    extra: list[str]
    diff: str

    @property
    def clean(self) -> bool:
        return not (self.missing or self.changed or self.extra)


def compare_package(files: dict[str, str], out: Path, diff_text: bool = True) -> Staleness:
    """What differs between freshly rendered `files` and the folder `out` (for --check); without
    `diff_text`, only which files differ (a build's report needs no diff)."""
    missing, changed, diff = [], [], []
    for relative, text in files.items():
        path = out / relative
        if not path.is_file():
            missing.append(relative)
            continue
        current = path.read_text(encoding="utf-8", errors="replace")
        if current != text:
            changed.append(relative)
            if diff_text:
                diff.extend(difflib.unified_diff(current.splitlines(True), text.splitlines(True),
                                                 f"{out.name}/{relative} (on disk)",
                                                 f"{out.name}/{relative} (from specs)", n=2))
    return Staleness(missing, changed, _left_over(files, out), "".join(diff))


def _left_over(files: dict[str, str], out: Path) -> list[str]:
    """Files under `out` that tilegen wrote and `files` no longer holds (caches aside)."""
    if not out.is_dir():
        return []
    return [path.relative_to(out).as_posix() for path in sorted(out.rglob("*"))
            if path.relative_to(out).as_posix() not in files
            and not any(part in DISPOSABLE for part in path.relative_to(out).parts) and _is_ours(path)]


def spec_summary(spec: Spec) -> tuple[str, str, str]:
    """(op, kind, signature) of a spec, for `tilegen list`."""
    ins = ", ".join(f"{t.name}[{','.join(t.shape)}]" if t.shape else t.name for t in spec.inputs)
    outs = ", ".join(t.name for t in spec.outputs)
    return spec.op, spec.kind, f"({ins}) -> {outs}"