"""The identifiers generated code gives a spec's values, so that no name a spec may take collides
with the code around it.

A spec names its inputs, outputs and scalars freely (`rest`, `k`, `len`, `torch`, `a_ptr`...).
The public wrapper keeps those names (they are its parameters and keywords); everywhere else,
kernels, registered ops, oracles and benchmarks, a value is written as its *identifier*: the name
itself, or the name with underscores appended where the name would be one the templates use
(`rest` -> `rest_`) or one derived from another value (`a_ptr` beside `a`). Specs whose names
collide with nothing render exactly as written.
"""

from __future__ import annotations

import re

# The tilegen.runtime kernel helpers generated modules import by their own names (torch.compile
# copies a called function by the name it is defined with): module-level names of every module.
KERNEL_HELPERS = frozenset({"finish_share", "int_as_float_output", "operand_tile", "precise_tanh", "store_tile",
                            "strided_indices", "sum_split_k"})
# Identifiers the generated package uses besides the spec's values (op modules, tests,
# benchmarks). tests/test_build.py renders every example spec and fails if a template uses a
# lowercase identifier missing here.
TEMPLATE_NAMES = frozenset({
    "acc", "arrived", "cells", "compute", "count_ptr", "finishing", "group_id", "group_size_m",
    "i_0", "i_1", "i_2", "i_3", "in_bounds", "k", "k_first", "k_left", "k_stop", "k_whole", "mask",
    "numel", "offsets", "other", "out", "partial_ptr", "per_split", "pid", "rest", "result", "rt",
    "size_1", "size_2", "size_3", "split", "tile", "tile_ptr", "tl", "torch", "triton", "first_pid_m",
    "saved_ptr", "keep_acc", "acc_ptr", "math", "grid", "config", "tests", "bench", "self", "cls",
    "pytest", "scalars", "inputs", "dtype", "shape", "got", "want", "layout", "seed",
    "num_pid_in_group", "num_pid_m", "num_pid_n", "num_tiles", "num_programs", "offs_am", "offs_bn", "offs_k",
    "offs_m", "offs_n", "pid_m", "pid_n", "tilegen",
    "rows", "cols", "row_mask", "row_block", "start", "n_rows", "row_length", "scale",
    "batch", "launch_tile", "tiles_per_matrix",
    "first", "chunk", "others", "step", "sum_cols", "group", "block", "workspace_ptr", "strip", "kept", "dim", "whole",
}) | KERNEL_HELPERS
# What the generated tests and benchmark of an op define at their top level beside the op they
# import by its name (tests/test_build.py checks every rendered module against this): an op of one
# of these names would be shadowed there.
TEST_MODULE_NAMES = frozenset({
    "across_rows", "broadcast_inputs", "broadcast_rows", "bytes_moved", "check", "flops", "gradient_sample", "input_dtypes",
    "input_shapes", "input_specs", "kept_reference", "library_sample", "make_batched", "make_inputs",
    "output_dtypes", "output_shapes", "output_specs", "pytestmark", "reference", "run_tilegen", "run_torch", "s",
    "tolerance_key",
})
# Python builtins the generated package calls.
BUILTIN_NAMES = frozenset({"dict", "enumerate", "float", "int", "isinstance", "len", "list", "max", "min", "range",
                           "set", "str", "sum", "tuple", "type", "zip", "any", "all", "abs", "bool"})
# What generated code derives from a value's identifier `x`: its pointer and offsets in kernels,
# its out= tensor, its view (a matmul's epilogue input broadcast to its axes), its strides (a
# batched matmul's batch stride too).
_DERIVED = re.compile(r"^(?:(?P<base>.+)_(?:ptr|ptrs|offsets|out|view)|stride_(?P<strided>.+)_(?:\d+|batch))$")

RESERVED = TEMPLATE_NAMES | BUILTIN_NAMES


def backward_op_name(op: str) -> str:
    """The name `op`'s backward kernel is registered as (torch.ops.<package>.<op>_backward)."""
    return f"{op}_backward"


def training_op_name(op: str) -> str:
    """The name a matmul `op`'s training forward is registered as: the op that also returns the
    accumulator it kept for its backward."""
    return f"{op}_training"


def registered_ops(op: str, kind: str) -> tuple[str, ...]:
    """Every op name the module of a spec `op` of `kind` registers: the op, its backward's, and a
    matmul's training forward. Two specs must not share one: the second registration would take
    the first's name, and a traced backward would call another op."""
    return (op, backward_op_name(op)) + ((training_op_name(op),) if kind == "matmul" else ())


def _base(identifier: str) -> str | None:
    """The value identifier that `identifier` is derived from, if it has a derived form."""
    derived = _DERIVED.match(identifier)
    return (derived["base"] or derived["strided"]) if derived else None


# The values whose derived forms generated code uses for its own (`workspace_ptr`: a value named
# `workspace` would get a pointer of that name).
_RESERVED_BASES = frozenset(filter(None, map(_base, RESERVED)))


def _clashes(candidate: str, taken: set[str]) -> bool:
    return (candidate in RESERVED or candidate in _RESERVED_BASES or candidate in taken
            or _base(candidate) in taken or any(_base(other) == candidate for other in taken))


def identifiers(names: list[str], op: str = "") -> dict[str, str]:
    """Each spec value name (in spec order) -> the identifier generated code gives it.

    An identifier is never a template identifier or another value's, is not derived from another
    value's (the `_ptr` of another, say), and derives none of them. Renaming appends underscores,
    which no template identifier or derived form ends with, so it always ends. Nor is it the op's
    name (`op`), which tests and benchmarks call beside the values.
    """
    out: dict[str, str] = {}
    for name in names:
        candidate = name
        while _clashes(candidate, set(out.values())) or candidate == op:
            candidate += "_"
        out[name] = candidate
    return out
