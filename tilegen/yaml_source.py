"""Load a spec file with YAML safe semantics, keeping the line of every key.

PyYAML's composer gives nodes with positions; we build plain Python values from
them ourselves so that we can reject duplicate keys, anchors and any tag outside
the safe schema, and record `key.path -> line` for error messages.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from .errors import ErrorLog

MAX_SPEC_BYTES = 256 * 1024
MAX_DEPTH = 32

_SAFE_SCALAR_TAGS = {
    "tag:yaml.org,2002:str",
    "tag:yaml.org,2002:int",
    "tag:yaml.org,2002:float",
    "tag:yaml.org,2002:bool",
    "tag:yaml.org,2002:null",
}


@dataclass
class Document:
    """A parsed spec: its data plus the source line of every key path."""

    path: str
    data: object
    lines: dict[str, int] = field(default_factory=dict)

    def line(self, key: str) -> int:
        """Line of `key`, or of its closest parent that has one."""
        while key:
            if key in self.lines:
                return self.lines[key]
            key = key.rpartition(".")[0]
        return self.lines.get("", 1)


class _Invalid(Exception):
    def __init__(self, line: int, key: str, message: str, allowed: str = ""):
        super().__init__(message)
        self.line, self.key, self.message, self.allowed = line, key, message, allowed


def _join(parent: str, child: str) -> str:
    return f"{parent}.{child}" if parent else child


class _Builder:
    def __init__(self, loader: yaml.SafeLoader):
        self.loader = loader
        self.lines: dict[str, int] = {}

    def build(self, node: yaml.Node, key: str, depth: int) -> object:
        line = node.start_mark.line + 1
        self.lines.setdefault(key, line)
        if depth > MAX_DEPTH:
            raise _Invalid(line, key, f"nesting deeper than {MAX_DEPTH} levels")
        if isinstance(node, yaml.MappingNode):
            if node.tag != "tag:yaml.org,2002:map":
                raise _Invalid(line, key, f"tag {node.tag!r} is not allowed", "plain YAML only")
            out: dict[str, object] = {}
            for key_node, value_node in node.value:
                key_line = key_node.start_mark.line + 1
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                    raise _Invalid(key_line, key, "keys must be plain scalars", "no merge keys or complex keys")
                name = str(self.scalar(key_node, key))
                child = _join(key, name)
                if name in out:
                    first = self.lines.get(child, key_line)
                    raise _Invalid(key_line, child, f"duplicate key (first defined on line {first})")
                self.lines[child] = key_line
                out[name] = self.build(value_node, child, depth + 1)
            return out
        if isinstance(node, yaml.SequenceNode):
            if node.tag != "tag:yaml.org,2002:seq":
                raise _Invalid(line, key, f"tag {node.tag!r} is not allowed", "plain YAML only")
            items = []
            for index, item in enumerate(node.value):
                child = _join(key, str(index))
                self.lines[child] = item.start_mark.line + 1
                items.append(self.build(item, child, depth + 1))
            return items
        return self.scalar(node, key)

    def scalar(self, node: yaml.ScalarNode, key: str) -> object:
        if node.tag not in _SAFE_SCALAR_TAGS:
            raise _Invalid(node.start_mark.line + 1, key, f"tag {node.tag!r} is not allowed",
                           "plain strings, numbers, booleans and null")
        try:
            return self.loader.construct_object(node, deep=True)
        except ValueError as exc:  # an int past Python's 4,300-digit conversion limit
            raise _Invalid(node.start_mark.line + 1, key, f"a number of {len(node.value)} characters "
                           f"cannot be read ({' '.join(str(exc).split()).split(':')[0]})",
                           "a number that fits a kernel argument") from None


class _NoAliasLoader(yaml.SafeLoader):
    """Rejects anchors and aliases: a spec never needs them and they can explode in size.

    Booleans are YAML 1.2's, `true` and `false` alone: under YAML 1.1's rules an input named `on`,
    `off`, `yes` or `no` would be read as a boolean."""

    def compose_node(self, parent, index):  # noqa: D401 - PyYAML hook
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise _Invalid(event.start_mark.line + 1, "", "YAML aliases are not allowed",
                           "write each value out")
        event = self.peek_event()
        if getattr(event, "anchor", None):
            raise _Invalid(event.start_mark.line + 1, "", "YAML anchors are not allowed",
                           "write each value out")
        return super().compose_node(parent, index)


# YAML 1.2's booleans: the safe loader's resolvers with the bool pattern narrowed to true / false.
_NoAliasLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
for _first in "tTfF":
    _NoAliasLoader.yaml_implicit_resolvers.setdefault(_first, []).insert(
        0, ("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")))


def load_document(path: Path, errors: ErrorLog, display: str | None = None) -> Document | None:
    """Parse one spec file; on failure log one error and return None."""
    shown = display or str(path)
    try:
        with path.open("rb") as handle:  # at most one byte past the limit: a huge file is never read whole
            raw = handle.read(MAX_SPEC_BYTES + 1)
    except OSError as exc:
        errors.add(shown, 1, "", f"cannot read file: {exc.strerror or exc}")
        return None
    if len(raw) > MAX_SPEC_BYTES:
        errors.add(shown, 0, "", f"file is larger than {MAX_SPEC_BYTES} bytes", f"at most {MAX_SPEC_BYTES} bytes")
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        errors.add(shown, 1, "", f"not UTF-8 text (byte {exc.start})")
        return None
    loader = None
    try:
        loader = _NoAliasLoader(text)
        node = loader.get_single_node()
        if node is None:
            errors.add(shown, 1, "", "the file is empty", "a mapping with op, kind, inputs, outputs, ...")
            return None
        builder = _Builder(loader)
        data = builder.build(node, "", 0)
    except _Invalid as exc:
        errors.add(shown, exc.line, exc.key, exc.message, exc.allowed)
        return None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 1
        problem = " ".join(str(exc.problem or exc.context or "invalid YAML").split())
        errors.add(shown, line, "", f"YAML syntax error: {problem}")
        return None
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        code = exc.character if isinstance(exc.character, int) else ord(exc.character)
        errors.add(shown, line, "", f"character U+{code:04X} is not allowed in YAML", "printable text")
        return None
    except (yaml.YAMLError, RecursionError, ValueError, OverflowError) as exc:
        errors.add(shown, 1, "", f"YAML error: {' '.join(str(exc).split())[:200]}")
        return None
    finally:
        if loader is not None:
            loader.dispose()
    if not isinstance(data, dict):
        errors.add(shown, builder.lines.get("", 1), "", f"the document is a {type(data).__name__}",
                   "a mapping with op, kind, inputs, outputs, ...")
        return None
    return Document(shown, data, builder.lines)
