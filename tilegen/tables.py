"""Tuned config tables: measured best launch configs per GPU and shape bucket.

`tilegen tune` writes them (tilegen/tables/<kind>.json); `tilegen build` renders each op's share
of its kind's table into the op module, so a known GPU gets a measured config with no runtime
tuning. Keys are "M x N x K x itemsize" buckets (matmul) or "numel x itemsize" (elementwise).

An op may also have a table of its own (tilegen/tables/ops/<op>.json, `tilegen tune --scope op`),
measured on that op: its entries take the place of the kind's at the same key. Ops of one kind
share the kind's entries where their tile menus allow, but an op with a narrower menu, or an
epilogue that changes which tile is fastest, only gets its own best from its own table. An op's
backward kernel reads its own entries (tilegen/tables/ops/<op>_backward.json, `tilegen tune
--backward`): a backward holds more of a row at once, so its best tile can differ. An elementwise
backward also reads the op's entries beneath them; a reduction's reads its own only, the
heuristic without them (lowering._backward_table).
"""

from __future__ import annotations

import json
from pathlib import Path

from .naming import backward_op_name
from .schema import BLOCK_FIELDS, CONFIG_FIELDS, FIELD_DEFAULTS, SCHEDULE_FIELDS, rename_blocks
from .spec import Spec

TABLE_DIR = Path(__file__).resolve().parent / "tables"


SCOPES = ("kind", "op")


def backward_table_name(op: str) -> str:
    """The name of `op`'s backward kernel's own table (scope "op"): the kernel's op name."""
    return backward_op_name(op)


def table_path(name: str, folder: Path = TABLE_DIR, scope: str = "kind") -> Path:
    """Where the table of kind `name` (scope "kind") or of op `name` (scope "op") lives."""
    return folder / f"{name}.json" if scope == "kind" else folder / "ops" / f"{name}.json"


def load_table(name: str, folder: Path = TABLE_DIR, scope: str = "kind") -> dict:
    path = table_path(name, folder, scope)
    return json.loads(path.read_text()) if path.is_file() else {}


def merge_entries(name: str, gpu: str, entries: dict, folder: Path = TABLE_DIR, scope: str = "kind") -> Path:
    """Write `entries` ({key text: config}) into a table under `gpu`, replacing those keys only."""
    table = load_table(name, folder, scope)
    merged = {**table.get(gpu, {}), **entries}
    table[gpu] = {key: merged[key] for key in sorted(merged, key=parse_key)}
    path = table_path(name, folder, scope)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({g: table[g] for g in sorted(table)}, indent=1) + "\n")
    return path


def parse_key(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("x"))


def format_key(key) -> str:
    return "x".join(str(part) for part in key)


def block_names(spec: Spec) -> tuple[str, ...]:
    """The spec's names for its kind's block fields (BLOCK_FIELDS), in their order."""
    if spec.kind in ("elementwise", "reduction"):
        return (spec.tiles[0].block,)
    parts = spec.matmul_parts()
    return tuple(spec.tile(axis).block for axis in (parts.m, parts.n, parts.k))


def _block_sizes(spec: Spec) -> tuple[tuple[int, ...], ...]:
    if spec.kind == "elementwise":
        return (spec.tiles[0].sizes,)
    if spec.kind == "reduction":  # the loop's blocks, or a whole row's (any power of two); rows per program
        return (spec.tiles[0].sizes + tuple(1 << p for p in range(4, 16)), tuple(1 << p for p in range(7)))
    parts = spec.matmul_parts()
    return tuple(spec.tile(axis).sizes for axis in (parts.m, parts.n, parts.k)) + (spec.split_k,)


def table_for_spec(spec: Spec, table: dict, *own: dict | None) -> dict:
    """The entries this op can use: those of its kind's `table` and of its `own` tables (each
    winning at a key it shares with those before it: the op's, then its backward kernel's), with
    its own tile sizes only, their block fields named as the spec names them; none for fixed
    configs."""
    if spec.configs.mode != "auto":
        return {}
    fields = CONFIG_FIELDS[spec.kind]
    sizes = _block_sizes(spec)
    # A batched matmul's launches of several matrices have keys with a matrix count; other ops
    # never look such keys up.
    plain_matmul = spec.kind == "matmul" and not spec.matmul_parts().is_batched

    def usable(rows):
        entries = {}
        for key_text, row in rows.items():
            if plain_matmul and len(parse_key(key_text)) == 5:
                continue
            config = {**FIELD_DEFAULTS, **row}
            blocks = [config[name] for name in fields if name not in SCHEDULE_FIELDS]
            if all(b in allowed for b, allowed in zip(blocks, sizes)):
                canonical = {name: config[name] for name in fields}
                entries[parse_key(key_text)] = rename_blocks(canonical, BLOCK_FIELDS[spec.kind], block_names(spec))
        return entries

    tables = [table, *(t or {} for t in own)]
    out = {}
    for gpu in sorted(set().union(*tables)):
        entries = {key: entry for t in tables for key, entry in usable(t.get(gpu, {})).items()}
        if entries:
            out[gpu] = {key: entries[key] for key in sorted(entries)}
    return out


def render_table(entries: dict) -> str:
    """Python source for a table literal, one entry a line, deterministic."""
    if not entries:
        return "{}"
    lines = ["{"]
    for gpu, rows in entries.items():
        lines.append(f"    {gpu!r}: {{")
        for key, config in rows.items():
            body = ", ".join(f"{k}={v}" for k, v in config.items())
            lines.append(f"        {key!r}: dict({body}),")
        lines.append("    },")
    lines.append("}")
    return "\n".join(lines)
