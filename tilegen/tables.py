"""Tuned config tables: measured best launch configs per GPU and shape bucket.

`tilegen tune` writes them (tilegen/tables/<kind>.json); `tilegen build` renders each op's share
of its kind's table into the op module, so a known GPU gets a measured config with no runtime
tuning. Keys are "M x N x K x itemsize" buckets (matmul) or "numel x itemsize" (elementwise).
"""

from __future__ import annotations

import json
from pathlib import Path

from .spec import Spec

TABLE_DIR = Path(__file__).resolve().parent / "tables"
CONFIG_FIELDS = {"matmul": ("BM", "BN", "BK", "SPLIT_K", "num_warps", "num_stages", "TMA", "PERSISTENT"),
                 "elementwise": ("BLOCK", "num_warps")}
# Fields that say how a tile is computed, not which: an entry applies to an op whose candidates
# hold its other fields, whatever these say.
SCHEDULE_FIELDS = ("num_warps", "num_stages", "TMA", "PERSISTENT")
# Fields that entries written before the field existed leave out, with the value they meant.
FIELD_DEFAULTS = {"SPLIT_K": 1, "TMA": 0, "PERSISTENT": 0}


def table_path(kind: str, folder: Path = TABLE_DIR) -> Path:
    return folder / f"{kind}.json"


def load_table(kind: str, folder: Path = TABLE_DIR) -> dict:
    path = table_path(kind, folder)
    return json.loads(path.read_text()) if path.is_file() else {}


def parse_key(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("x"))


def format_key(key) -> str:
    return "x".join(str(part) for part in key)


def _block_sizes(spec: Spec) -> tuple[tuple[int, ...], ...]:
    if spec.kind == "elementwise":
        return (spec.tiles[0].sizes,)
    parts = spec.matmul_parts()
    return tuple(spec.tile(axis).sizes for axis in (parts.m, parts.n, parts.k)) + (spec.split_k,)


def table_for_spec(spec: Spec, table: dict) -> dict:
    """The entries of `table` this op can use: its own tile sizes only; none for fixed configs."""
    if spec.configs.mode != "auto":
        return {}
    fields = CONFIG_FIELDS[spec.kind]
    sizes = _block_sizes(spec)
    out = {}
    for gpu in sorted(table):
        entries = {}
        for key_text in sorted(table[gpu], key=parse_key):
            config = {**FIELD_DEFAULTS, **table[gpu][key_text]}
            blocks = [config[name] for name in fields if name not in SCHEDULE_FIELDS]
            if all(b in allowed for b, allowed in zip(blocks, sizes)):
                entries[parse_key(key_text)] = {name: config[name] for name in fields}
        if entries:
            out[gpu] = entries
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
