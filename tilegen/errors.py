"""Spec errors: collected, never raised one at a time, printed one per line."""

from __future__ import annotations

from dataclasses import dataclass, field

from .escaping import code_text


@dataclass(frozen=True, order=True)
class SpecError:
    """One problem in one spec, printed as `path:line: key.path: message (allowed)`; a problem with
    the file itself rather than a line of it (line 0) as `path: message (allowed)`."""

    path: str
    line: int
    key: str
    message: str
    allowed: str = ""

    def __str__(self) -> str:
        # Paths and keys come from the user's files: escaped, so that an error stays on one line.
        path, key = code_text(self.path), code_text(self.key)
        if self.line == 0 and not self.key:
            text = f"{path}: {self.message}"
        else:
            text = f"{path}:{self.line}: {key or '<document>'}: {self.message}"
        if self.allowed:
            text += f" ({self.allowed})"
        return text


@dataclass
class ErrorLog:
    """Accumulates every error of a run so the user sees all of them at once."""

    errors: list[SpecError] = field(default_factory=list)

    def add(self, path: str, line: int, key: str, message: str, allowed: str = "") -> None:
        self.errors.append(SpecError(str(path), int(line), key, message, allowed))

    def extend(self, other: "ErrorLog") -> None:
        self.errors.extend(other.errors)

    def __bool__(self) -> bool:
        return bool(self.errors)

    def lines(self) -> list[str]:
        return [str(e) for e in sorted(set(self.errors))]


class SpecFailure(Exception):
    """Raised at the end of a phase that found errors; carries all of them."""

    def __init__(self, log: ErrorLog):
        super().__init__("\n".join(log.lines()))
        self.log = log
