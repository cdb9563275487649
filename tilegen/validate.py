"""Turn a parsed spec document into a `Spec`, reporting every problem found.

Validation never stops at the first error: each section is checked on its own
so that one run tells the author everything that is wrong with the file.
"""

from __future__ import annotations

import ast
import copy
import difflib
import keyword
import re

from .categories import FLOAT, CategoryError, Kind, as_logic, can_hold, category_of, int_scalars_met
from .dtypes import (ACCUMULATE_DTYPES, DTYPES, ELEMENTWISE_DTYPES, FLOAT_DTYPES, INT_RANGES, MATMUL_DTYPES,
                     PRECISIONS, REDUCTION_DTYPES, category, narrowest_int)
from .errors import ErrorLog
from .expressions import INFINITY, Expression, ExpressionError, parse_expression
from .rows import ELEMENT, LEVEL_NAMES, ROW, ROW_LENGTH, ROW_LENGTH_KIND, UNIFORM, level_of
from .schema import PER_SM_COUNTS, UNROLL_SIZES
from .naming import KERNEL_HELPERS, RESERVED, TEST_MODULE_NAMES, identifiers
from .shape_rules import ShapeRules, matmul_axes
from .spec import SIZE_ONE, ConfigPolicy, ScalarSpec, Spec, TensorSpec, TileSpec, fixed_axes
from .yaml_source import Document

KINDS = ("elementwise", "matmul", "reduction")
MASK_POLICIES = ("always", "never", "auto")
CONFIG_MODES = ("auto", "autotune", "fixed")
ORDERS = ("grouped", "row_major")
LAUNCHES = ("auto", "tiled", "persistent")
# Split-K factors tried by default: 1 (no split) and the splits that fill the GPU for skinny shapes.
SPLIT_K_AUTO = (1, 2, 4, 8)
TOP_LEVEL_KEYS = ("op", "kind", "doc", "inputs", "outputs", "scalars", "steps", "compute", "epilogue",
                  "dtypes", "tiles", "masks", "schedule", "configs", "test", "bench", "reference")

OP_NAME = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
VALUE_NAME = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
AXIS_NAME = re.compile(r"^[A-Z][A-Z0-9_]{0,30}$")
BLOCK_NAME = re.compile(r"^[A-Z][A-Z0-9_]{0,30}$")

# Value names the spec language or the public wrapper gives a meaning: `acc` is the matmul
# accumulator in epilogues, `out` the wrapper's keyword for output tensors. Any other name works:
# generated code renames values that collide with its own identifiers (naming.py).
LANGUAGE_NAMES = frozenset({"acc", "out", INFINITY})
# An op name is a module and the public function in it: it may not shadow what the module uses,
# nor what its tests and benchmark define beside it (nor start with "test": pytest would collect
# the op its tests import as a test).
RESERVED_OP_NAMES = RESERVED | KERNEL_HELPERS | TEST_MODULE_NAMES | {"generated", "support", "route", "is_compiling"}
# The constexprs generated kernels take beside a spec's blocks, which a block may not be named
# (tests/test_build.py checks every kernel the specs render against these).
RESERVED_BLOCK_NAMES = frozenset({"GROUP_M", "INDEX_64", "MATH_64", "NUM_SMS", "DOT_PRECISION", "EPILOGUE",
                                  "SAVE_ACC", "SPLIT_K", "USE_TMA", "USE_TMA_STORE", "TRANS_A", "TRANS_B", "PEEL_K",
                                  "PERSISTENT", "FLATTEN", "BATCHED", "EVEN",
                                  "ROWS", "ONE_TILE", "UNROLL", "AHEAD", "PER_SM", "FIXED_N", "EVICT",
                                  "READ_BACK", "SHARED_FINISH", "COLS", "COL_ROWS", "STORES"})
RESERVED_BLOCK_PREFIXES = ("EVEN_", "MASK_", "HAS_", "OUT_", "IN_")
# A reduction's on/off config fields, each with what its values mean.
REDUCTION_FLAGS = {"FIXED_N": "1: the row length compiled in where it is a power of two, or 0: read at run time",
                   "EVICT": "1: a looped row's loads hint the cache, or 0: no hints",
                   "LOOP": "1: pass over a row its block holds as over a longer one, or 0: hold it whole"}
RESERVED_BLOCK_SUFFIXES = ("_FACTOR",)  # a size's or a stride's known factor (M_FACTOR, STRIDE_A_0_FACTOR)
# A decimal number as text (a float scalar's default YAML did not read as a number).
DECIMAL = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")
MAX_SIZES = 8
MAX_TEST_SHAPES = 32
MAX_DIM = 1 << 20

ELEMENTWISE_BLOCK_RANGE = (16, 1 << 16)
REDUCTION_BLOCK_RANGE = (16, 1 << 15)
MAX_STEPS = 16  # a backward substitutes every step where it is read: keep the terms shallow
MATMUL_BLOCK_RANGE = (16, 256)


def _listing(values) -> str:
    return ", ".join(str(v) for v in values)


class _Validator(ShapeRules):
    def __init__(self, doc: Document, errors: ErrorLog):
        self.doc = doc
        self.data: dict = doc.data  # type: ignore[assignment]
        self.errors = errors
        self.count = len(errors.errors)
        # What later sections read of earlier ones: the kind, the axes `tiles` names (valid or
        # not), a reduction's steps with errors of their own and the levels of the others.
        self.kind: str | None = None
        self.named_axes: set = set()
        self.shape_axes: set = set()  # the axes the tensors' shapes name (an expression reading one: its own error)
        self.named_blocks: set = set()
        self.tiles_refused = False
        self.broken_steps: set = set()
        # Names declared with errors of their own (a reserved name, an output that is no mapping):
        # an expression that reads one, or a `compute` entry for one, is not reported again.
        self.refused_names: set = set()
        self.taken: dict[str, str] = {}  # name -> what declares it ("input", "output", "scalar", "step")
        self.step_levels: dict | None = None
        # Each step's kind of number (categories.Kind): float math, or bool where it compares.
        self.step_kinds: dict[str, Kind] = {}
        self.dtypes: dict = {}  # each tensor's accepted dtypes, once resolved

    def error(self, key: str, message: str, allowed: str = "") -> None:
        self.errors.add(self.doc.path, self.doc.line(key), key, message, allowed)

    @property
    def failed(self) -> bool:
        return len(self.errors.errors) > self.count

    # ---- generic shape checks -------------------------------------------------------------

    def mapping(self, key: str, value, allowed_keys=None, required=()) -> dict | None:
        if not isinstance(value, dict):
            self.error(key, f"expected a mapping, got {_type_name(value)}",
                       f"keys: {_listing(allowed_keys)}" if allowed_keys else "name: value entries")
            return None
        if allowed_keys is not None:
            for name in value:
                if name not in allowed_keys:
                    self.unknown_key(f"{key}.{name}" if key else name, name, allowed_keys)
        for name in required:
            if name not in value:
                self.error(key, f"missing required key {name!r}", f"required: {_listing(required)}")
        return value

    def unknown_key(self, key: str, name: str, allowed) -> None:
        guess = difflib.get_close_matches(str(name), list(allowed), n=1)
        hint = f"; did you mean {guess[0]!r}?" if guess else ""
        self.error(key, f"unknown key {name!r}{hint}", f"allowed: {_listing(allowed)}")

    def string(self, key: str, value, pattern: re.Pattern | None = None, what: str = "") -> str | None:
        if not isinstance(value, str):
            self.error(key, f"expected a string, got {_type_name(value)}", f"a {what or 'string'}")
            return None
        if pattern is not None and not pattern.match(value):
            self.error(key, f"{value!r} is not a valid {what}", f"must match {pattern.pattern}")
            return None
        return value

    def choice(self, key: str, value, choices) -> str | None:
        if not isinstance(value, str) or value not in choices:
            self.error(key, f"{_show(value)} is not allowed", f"one of: {_listing(choices)}")
            return None
        return value

    def int_list(self, key: str, value, low: int, high: int, power_of_two=False) -> tuple[int, ...]:
        if not isinstance(value, list) or not value:
            self.error(key, f"expected a non-empty list, got {_show(value)}", f"a list of integers {low} to {high}")
            return ()
        if len(value) > MAX_SIZES:
            self.error(key, f"{len(value)} entries", f"at most {MAX_SIZES}")
            return ()
        out = []
        for index, item in enumerate(value):
            item_key = f"{key}.{index}"
            if type(item) is not int:
                self.error(item_key, f"expected an integer, got {_show(item)}", f"{low} to {high}")
            elif not low <= item <= high:
                self.error(item_key, f"{item} is out of range", f"{low} to {high}")
            elif power_of_two and item & (item - 1):
                self.error(item_key, f"{item} is not a power of two", "16, 32, 64, ...")
            elif item in out:
                self.error(item_key, f"{item} is listed twice", "each once")
            else:
                out.append(item)
        return tuple(out)

    def value_name(self, key: str, name, taken: dict[str, str]) -> bool:
        self.refused_names.add(name)  # until it passes, below
        if not isinstance(name, str) or not VALUE_NAME.match(name):
            self.error(key, f"{_show(name)} is not a valid name", f"must match {VALUE_NAME.pattern}")
            return False
        # (The float dtypes' names only: values named int32, int64 or bool were accepted before those
        # were dtypes, and stay accepted; `dtype: bool` means the dtype.)
        if keyword.iskeyword(name) or name in LANGUAGE_NAMES or name in FLOAT_DTYPES:
            what = "a Python keyword" if keyword.iskeyword(name) else \
                "a dtype" if name in FLOAT_DTYPES else "the wrapper's output keyword" if name == "out" else \
                "infinity in expressions" if name == INFINITY else \
                "the accumulator in epilogues"
            self.error(key, f"name {name!r} is reserved: it is {what}", "choose another name")
            return False
        if name in taken:
            self.error(key, f"name {name!r} is already used by {taken[name]}",
                       "each name once among inputs, outputs, scalars and steps")
            return False
        self.refused_names.discard(name)
        return True

    # ---- sections ---------------------------------------------------------------------------

    def run(self) -> Spec | None:
        for name in self.data:
            if name not in TOP_LEVEL_KEYS:
                self.unknown_key(str(name), name, TOP_LEVEL_KEYS)
        op = self.op_name()
        kind = self.kind = self.choice("kind", self.data.get("kind"), KINDS) if "kind" in self.data else None
        if "kind" not in self.data:
            self.error("", "missing required key 'kind'", f"one of: {_listing(KINDS)}")
        doc = self.doc_line(op)
        taken = self.taken
        inputs = self.tensors("inputs", taken, kind, required=True)
        outputs = self.tensors("outputs", taken, kind, required=True)
        self.shape_axes = {axis for shape in [*inputs.values(), *outputs.values()] for axis in fixed_axes(shape or ())
                           if AXIS_NAME.match(axis)}
        scalars = self.scalars(taken)
        dtypes = self.dtypes = self.resolve_dtypes(inputs, outputs, kind)
        tiles = self.tiles(kind, inputs, outputs)
        masks = self.masks(tiles)
        policy = self.dtype_policy(kind)
        group_m, split_k, launch = self.schedule(kind)
        configs = self.configs(kind, tiles)
        self.structure(kind, inputs, outputs)
        steps = self.steps(kind, inputs, scalars, taken)
        body = self.body(kind, inputs, outputs, scalars, steps)
        reference = self.reference(kind, inputs, outputs, scalars)
        # A batched matmul's shapes lead with the batch: [B, M, N, K].
        batched = kind == "matmul" and any(shape and shape[:1] == ("...",) for shape in inputs.values())
        test_shapes = self.shape_list("test", kind, batched)
        bench_shapes = self.shape_list("bench", kind, batched)
        if self.failed or op is None or kind is None:
            return None
        # Generated code writes each value as its identifier; the spec's names stay as labels.
        ident = identifiers([*inputs, *outputs, *scalars, *steps], op)

        def tensor(name, shape):
            accepted, source = dtypes[name]
            return TensorSpec(ident[name], accepted, ident.get(source, source), shape, label=name)

        kinds = self.value_kinds(scalars)

        def renamed(entries):
            return tuple((ident[name], _logical(expression, kinds).renamed(ident)) for name, expression in entries)

        return Spec(
            path=self.doc.path, op=op, kind=kind, doc=doc,
            inputs=tuple(tensor(n, s) for n, s in inputs.items()),
            outputs=tuple(tensor(n, s) for n, s in outputs.items()),
            scalars=tuple(ScalarSpec(ident[s.name], s.type, s.default, label=s.name) for s in scalars.values()),
            body=renamed(body), accumulate=policy[0], compute=policy[1], precision=policy[2],
            tiles=tiles, masks=masks, group_m=group_m, split_k=split_k, launch=launch, configs=configs,
            test_shapes=test_shapes, bench_shapes=bench_shapes, reference=renamed(reference),
            steps=renamed(steps.items()),
        )

    def op_name(self) -> str | None:
        if "op" not in self.data:
            self.error("", "missing required key 'op'", "a lowercase name such as matmul_relu")
            return None
        op = self.string("op", self.data["op"], OP_NAME, "op name")
        if op is None:
            return None
        if op.startswith("test"):
            self.error("op", f"{op!r} starts with 'test': pytest would collect the op as a test where its "
                       "generated tests import it", "a name that does not start with 'test'")
            return None
        if keyword.iskeyword(op) or keyword.issoftkeyword(op) or op.startswith("_") or op in RESERVED_OP_NAMES:
            where = "tests define" if op in TEST_MODULE_NAMES else "module uses"
            self.error("op", f"{op!r} is reserved: the op's generated {where} it",
                       "a name that is not a Python keyword or builtin, nor one tilegen's modules use")
            return None
        return op

    def doc_line(self, op: str | None) -> str:
        if "doc" not in self.data:
            return f"The {op} op." if op else ""
        doc = self.string("doc", self.data["doc"])
        if doc is None:
            return ""
        if len(doc) > 300 or any(ord(ch) < 32 for ch in doc):
            self.error("doc", "doc must be one line of at most 300 printable characters", "a one-line docstring")
            return ""
        return doc.strip()

    def tensors(self, section: str, taken: dict[str, str], kind, required: bool) -> dict:
        value = self.data.get(section)
        if value is None:
            if required:
                self.error("", f"missing required key {section!r}", "a mapping of name -> {dtype, shape}")
            return {}
        entries = self.mapping(section, value)
        if not entries:
            if entries is not None:
                self.error(section, "needs at least one entry", "name -> {dtype, shape}")
            return {}
        out = {}
        for name, entry in entries.items():
            key = f"{section}.{name}"
            if not self.value_name(key, name, taken):
                continue
            taken[name] = section[:-1]
            entry = self.mapping(key, entry, ("dtype", "shape"), required=("dtype",))
            if entry is None:
                self.refused_names.add(name)
                continue
            shape = None
            if "shape" in entry:
                shape = self.axes(f"{key}.shape", entry["shape"], leading=kind in KINDS)
            elif kind == "matmul":
                self.error(key, "missing required key 'shape'", "a list of axis symbols such as [M, K]")
            elif kind == "reduction":
                self.error(key, "missing required key 'shape'", "[..., N], [N] or [...]")
            out[name] = shape
        return out

    def axes(self, key: str, value, leading: bool = False) -> tuple[str, ...] | None:
        """Axis symbols; with `leading` (elementwise), a first "..." stands for any leading axes."""
        if not isinstance(value, list) or not value or len(value) > 8:
            self.error(key, f"expected a list of 1 to 8 axis symbols, got {_show(value)}", "such as [M, K] or [..., N]")
            return None
        axes = []
        for index, axis in enumerate(value):
            if axis == "..." and index == 0 and leading:
                axes.append(axis)
                continue
            if axis == "...":
                self.error(f"{key}.{index}", "'...' (any leading axes) may only come as the first item",
                           "[..., N], [M, N] or [N]")
                return None
            if axis == 1 and not isinstance(axis, bool) and self.kind == "elementwise":
                axes.append(SIZE_ONE)  # an axis of size 1, broadcast as PyTorch broadcasts
                continue
            if not isinstance(axis, str) or not AXIS_NAME.match(axis):
                ones = "; 1 (an axis of size 1) in elementwise shapes" if self.kind == "elementwise" else ""
                self.error(f"{key}.{index}", f"{_show(axis)} is not an axis symbol",
                           f"uppercase, must match {AXIS_NAME.pattern}{ones}")
                return None
            axes.append(axis)
        named = [axis for axis in axes if axis != SIZE_ONE]
        if len(set(named)) != len(named):
            self.error(key, f"axis repeated in {axes}", "each axis once")
            return None
        return tuple(axes)

    def scalars(self, taken: dict[str, str]) -> dict[str, ScalarSpec]:
        value = self.data.get("scalars")
        if value is None:
            return {}
        entries = self.mapping("scalars", value) or {}
        out = {}
        for name, entry in entries.items():
            key = f"scalars.{name}"
            if not self.value_name(key, name, taken):
                continue
            taken[name] = "scalar"
            # Refused until it passes (a bad entry, type or default): expressions that read it
            # then say nothing of their own, the problem being reported once, here.
            self.refused_names.add(name)
            entry = self.mapping(key, entry, ("type", "default"), required=("type",))
            if entry is None or "type" not in entry:
                continue
            kind = self.choice(f"{key}.type", entry["type"], ("float", "int", "bool"))
            default = entry.get("default")
            if kind == "float" and isinstance(default, str) and DECIMAL.fullmatch(default.strip()):
                default = float(default)  # (YAML 1.1 reads 1e30 and 1.0e30, no exponent sign, as text)
            if kind and default is not None:
                ok = type(default) is {"int": int, "bool": bool}[kind] if kind != "float" \
                    else type(default) in (int, float)
                if not ok or (kind == "float" and not abs(default) <= 1e30):
                    self.error(f"{key}.default", f"{_show(default)} is not a valid {kind}",
                               {"int": "an integer", "bool": "true or false"}.get(kind, "a number from -1e30 to 1e30"))
                    continue
                if kind == "int" and not -(2**63) <= default < 2**63:  # a kernel argument holds 64 bits
                    self.error(f"{key}.default", f"{_show(default)} does not fit in 64 bits",
                               f"{-(2**63)} to {2**63 - 1}")
                    continue
                default = float(default) if kind == "float" else default
            if kind:
                out[name] = ScalarSpec(name, kind, default)
                self.refused_names.discard(name)
        return out

    def resolve_dtypes(self, inputs: dict, outputs: dict, kind) -> dict[str, tuple]:
        """Each tensor's accepted dtypes and the input whose dtype it follows."""
        raw = {}
        for section, names in (("inputs", inputs), ("outputs", outputs)):
            for name in names:
                raw[name] = (section, self.data[section][name].get("dtype"))
        allowed_dtypes = {"matmul": MATMUL_DTYPES, "reduction": REDUCTION_DTYPES}.get(kind, ELEMENTWISE_DTYPES)
        resolved: dict[str, tuple] = {}

        def resolve(name: str, trail: tuple[str, ...]):
            if name in resolved:
                return resolved[name]
            section, value = raw[name]
            key = f"{section}.{name}.dtype"
            result = None
            if value is None:  # no dtype key: reported as missing with the tensor's other keys
                resolved[name] = None
                return None
            if isinstance(value, str) and value in DTYPES:
                value = [value]
            if isinstance(value, list):
                listed = []
                for index, item in enumerate(value):
                    if not isinstance(item, str) or item not in allowed_dtypes:
                        self.error(f"{key}.{index}", f"unknown or unsupported dtype {_show(item)}",
                                   f"one of: {_listing(allowed_dtypes)}")
                    elif item in listed:
                        self.error(f"{key}.{index}", f"dtype {item} is listed twice", "each once")
                    else:
                        listed.append(item)
                if not value:
                    self.error(key, "the dtype list is empty", f"one or more of: {_listing(allowed_dtypes)}")
                if listed and len(listed) == len(value):
                    kinds = sorted({category(d) for d in listed})
                    if len(kinds) > 1:  # one kind of number per tensor: the kernel's math depends on it
                        self.error(key, f"the dtype list mixes {' and '.join(kinds)} dtypes",
                                   "dtypes of one kind: float ones, int ones, or bool")
                    elif section == "outputs" and len(listed) > 1:
                        self.error(key, "an output needs one dtype or the name of an input",
                                   "for example dtype: a")
                    else:
                        result = (tuple(listed), name)
            elif isinstance(value, str):
                if value in trail or value == name:
                    self.error(key, f"dtype reference cycle: {' -> '.join(trail + (name, value))}",
                               "list the dtypes in one of them, e.g. dtype: [float16, float32]")
                elif value not in inputs:
                    known = _listing(inputs) or "none"
                    self.error(key, f"{value!r} is neither a dtype nor an input",
                               f"dtypes: {_listing(allowed_dtypes)}; inputs: {known}")
                else:
                    target = resolve(value, trail + (name,))
                    if target is not None:
                        result = target
            else:
                self.error(key, f"expected a dtype list or an input name, got {_show(value)}",
                           "such as [float16, float32], or x")
            resolved[name] = result
            return result

        for name in raw:
            resolve(name, ())
        if kind == "reduction":
            for name in outputs:  # (a bool mask is an input's only)
                if resolved.get(name) is not None and category(resolved[name][0][0]) != FLOAT:
                    self.error(f"outputs.{name}.dtype", f"output {name!r} of a reduction holds "
                               f"{category(resolved[name][0][0])} values", f"one of: {_listing(FLOAT_DTYPES)}")
                    resolved[name] = None
        return {name: value for name, value in resolved.items() if value is not None}

    def tiles(self, kind, inputs: dict, outputs: dict) -> tuple[TileSpec, ...]:
        value = self.data.get("tiles")
        if value is None:
            self.error("", "missing required key 'tiles'", "axis -> {block: NAME, sizes: [...]}")
            return ()
        errors_before = len(self.errors.errors)
        entries = self.mapping("tiles", value) or {}
        # Axes and block names in tiles, valid entries or not: a key elsewhere that names one is no
        # error of its own (the tile's error is reported once, with no follow-on errors).
        self.named_axes = {axis for axis in entries if isinstance(axis, str) and AXIS_NAME.match(axis)}
        self.named_blocks = {entry["block"] for entry in entries.values()
                             if isinstance(entry, dict) and isinstance(entry.get("block"), str)}
        low, high = {"matmul": MATMUL_BLOCK_RANGE, "reduction": REDUCTION_BLOCK_RANGE}.get(kind, ELEMENTWISE_BLOCK_RANGE)
        tiles, blocks = [], set()
        for axis, entry in entries.items():
            key = f"tiles.{axis}"
            if not isinstance(axis, str) or not AXIS_NAME.match(axis):
                self.error(key, f"{_show(axis)} is not an axis symbol", f"must match {AXIS_NAME.pattern}")
                continue
            entry = self.mapping(key, entry, ("block", "sizes"), required=("block", "sizes"))
            if entry is None or "block" not in entry or "sizes" not in entry:
                continue
            block = self.string(f"{key}.block", entry["block"], BLOCK_NAME, "constexpr name")
            if block and (block in RESERVED_BLOCK_NAMES or block.startswith(RESERVED_BLOCK_PREFIXES)
                          or block.endswith(RESERVED_BLOCK_SUFFIXES)):
                self.error(f"{key}.block", f"block name {block!r} is reserved", "choose another name")
                block = None
            if block and block in blocks:
                self.error(f"{key}.block", f"block name {block!r} is used twice", "a block name for each tile")
                block = None
            sizes = self.int_list(f"{key}.sizes", entry["sizes"], low, high, power_of_two=True)
            if block and sizes:
                blocks.add(block)
                tiles.append(TileSpec(axis, block, sizes))
        if kind == "elementwise" and len(entries) != 1:
            self.error("tiles", f"an elementwise op tiles exactly one axis, got {len(entries)}",
                       "for example N: {block: BLOCK, sizes: [1024]}")
        if kind == "reduction" and len(entries) != 1:
            self.error("tiles", f"a reduction op reduces exactly one axis, its last, got {len(entries)} tiled axes "
                       f"({_listing(map(str, entries))})",
                       "one axis: N: {block: BLOCK_N, sizes: [1024, 4096]} (the tile a long row loops in)")
        if kind == "matmul":
            expected = matmul_axes(inputs, outputs)
            if expected is not None and set(entries) != set(expected):
                self.error("tiles", f"tiles cover {_listing(sorted(map(str, entries)))}",
                           f"a matmul tiles exactly its axes {_listing(expected)}")
        self.tiles_refused = len(self.errors.errors) > errors_before
        return tuple(tiles)

    def masks(self, tiles) -> tuple[tuple[str, str], ...]:
        if self.kind == "reduction" and "masks" in self.data:
            self.error("masks", "a reduction masks the ends of its rows itself", "leave masks out")
            return tuple((t.axis, "auto") for t in tiles)
        value = self.data.get("masks", {})
        entries = self.mapping("masks", value) or {}
        axes = [t.axis for t in tiles]
        out = {axis: "auto" for axis in axes}
        for axis, policy in entries.items():
            key = f"masks.{axis}"
            if axis not in axes:
                if axis not in self.named_axes:
                    self.error(key, f"{_show(axis)} is not a tiled axis", f"tiled axes: {_listing(axes) or 'none'}")
                continue
            policy = self.choice(key, policy, MASK_POLICIES)
            if policy:
                out[axis] = policy
        return tuple(out.items())

    def dtype_policy(self, kind) -> tuple[str, str | None, str]:
        value = self.data.get("dtypes", {})
        entries = self.mapping("dtypes", value, ("accumulate", "compute", "precision")) or {}
        accumulate, compute, precision = "float32", None, "ieee"
        if "accumulate" in entries:
            accumulate = self.choice("dtypes.accumulate", entries["accumulate"], ACCUMULATE_DTYPES) or accumulate
            if kind in ("elementwise", "reduction"):
                self.error("dtypes.accumulate", "only matmul kinds accumulate", "use dtypes.compute")
        if "compute" in entries:
            compute = self.choice("dtypes.compute", entries["compute"], ("float32", "float64"))
            if kind == "matmul":
                self.error("dtypes.compute", "a matmul epilogue computes in the accumulator dtype",
                           "use dtypes.accumulate")
        if "precision" in entries:
            precision = self.choice("dtypes.precision", entries["precision"], PRECISIONS) or precision
            if kind in ("elementwise", "reduction"):
                self.error("dtypes.precision", "precision applies to matmul dots only", "leave it out")
        return accumulate, compute, precision

    def schedule(self, kind) -> tuple[int, tuple[int, ...], str]:
        """(group_m, split-K factors, launch style) from the optional `schedule` mapping."""
        value = self.data.get("schedule")
        if value is None:
            return 8, SPLIT_K_AUTO, "auto"
        entries = self.mapping("schedule", value, ("order", "group_m", "launch", "split_k")) or {}
        if kind != "matmul":
            self.error("schedule", "a schedule applies to matmul kinds only", "leave it out")
            return 8, SPLIT_K_AUTO, "auto"
        order = self.choice("schedule.order", entries.get("order", "grouped"), ORDERS)
        launch = self.choice("schedule.launch", entries.get("launch", "auto"), LAUNCHES)
        split_k = self.split_k(entries.get("split_k", "auto"))
        group_m = entries.get("group_m", 8)
        if type(group_m) is not int or not 1 <= group_m <= 64:
            self.error("schedule.group_m", f"{_show(group_m)} is not allowed", "an integer from 1 to 64")
            group_m = 8
        if order == "row_major":
            if "group_m" in entries:
                self.error("schedule.group_m", "group_m needs order: grouped", "order: grouped, or leave group_m out")
            return 1, split_k, launch
        return group_m, split_k, launch

    def split_k(self, value) -> tuple[int, ...]:
        """Split-K factors the config choice may use: `auto` (the default), `never`, or a list."""
        if value == "auto":
            return SPLIT_K_AUTO
        if value == "never":
            return (1,)
        if not isinstance(value, list):
            self.error("schedule.split_k", f"{_show(value)} is not allowed", "auto, never, or a list of integers 1 to 64")
            return SPLIT_K_AUTO
        return tuple(sorted(self.int_list("schedule.split_k", value, 1, 64))) or SPLIT_K_AUTO

    def configs(self, kind, tiles) -> ConfigPolicy:
        value = self.data.get("configs")
        if value is None:
            return ConfigPolicy("auto", tuple(t.axis for t in tiles))
        keys = ("mode", "key", "num_warps", "num_stages", "fixed")
        entries = self.mapping("configs", value, keys, required=("mode",)) or {}
        mode = self.choice("configs.mode", entries.get("mode"), CONFIG_MODES) if "mode" in entries else None
        axes = [t.axis for t in tiles]
        key: tuple[str, ...] = ()
        if "key" in entries:
            raw = entries["key"]
            named = self.named_axes
            if not isinstance(raw, list) or not raw or any(a not in axes and a not in named for a in raw):
                self.error("configs.key", f"{_show(raw)} is not a list of tiled axes", f"from: {_listing(axes)}")
            elif any(a not in axes for a in raw):
                pass  # an axis whose tile entry has its own error
            else:
                key = tuple(raw)
            if mode != "autotune":
                self.error("configs.key", "a key applies to mode: autotune only", "mode: autotune, or leave key out")
        warps = self.int_list("configs.num_warps", entries["num_warps"], 1, 16, True) \
            if "num_warps" in entries else ()
        stages = self.int_list("configs.num_stages", entries["num_stages"], 1, 8) \
            if "num_stages" in entries else ()
        fixed: tuple = ()
        if mode == "fixed":
            raw = self.mapping("configs.fixed", entries.get("fixed")) if "fixed" in entries else None
            if "fixed" not in entries:
                self.error("configs", "mode: fixed needs a 'fixed' mapping",
                           "block names with a size each, plus optional num_warps, num_stages")
            if raw is not None:
                fixed = self.fixed_config(raw, tiles)
        elif "fixed" in entries:
            self.error("configs.fixed", "'fixed' needs mode: fixed", "mode: fixed, or leave fixed out")
        return ConfigPolicy(mode or "auto", key or tuple(axes), fixed, warps, stages)

    def fixed_config(self, raw: dict, tiles) -> tuple[tuple[str, int], ...]:
        sizes = {t.block: t.sizes for t in tiles}
        out = {}
        for name, value in raw.items():
            key = f"configs.fixed.{name}"
            if name in sizes:
                if value not in sizes[name]:
                    self.error(key, f"{_show(value)} is not a candidate size", f"one of: {_listing(sizes[name])}")
                    continue
            elif name == "num_warps":
                if type(value) is not int or value not in (1, 2, 4, 8, 16):
                    self.error(key, f"{_show(value)} is not allowed", "1, 2, 4, 8 or 16")
                    continue
            elif name == "num_stages":
                if type(value) is not int or not 1 <= value <= 8:
                    self.error(key, f"{_show(value)} is not allowed", "an integer from 1 to 8")
                    continue
            elif name == "ROWS" and self.kind == "reduction":
                if type(value) is not int or value not in (1, 2, 4, 8, 16, 32, 64):
                    self.error(key, f"{_show(value)} is not allowed", "rows per program: 1, 2, 4, ... 64")
                    continue
            elif name == "UNROLL" and self.kind == "reduction":
                if type(value) is not int or value not in (0,) + UNROLL_SIZES:
                    self.error(key, f"{_show(value)} is not allowed",
                               "blocks a loop trip: 1, 2, 4 or 8, or 0 for the row's blocks up to 8")
                    continue
            elif name == "PER_SM" and self.kind == "reduction":
                if type(value) is not int or value not in (0,) + PER_SM_COUNTS:
                    self.error(key, f"{_show(value)} is not allowed",
                               "programs a multiprocessor: 1, 2 or 4, or 0 for a program a row block")
                    continue
            elif name in REDUCTION_FLAGS and self.kind == "reduction":
                if type(value) is not int or value not in (0, 1):
                    self.error(key, f"{_show(value)} is not allowed", REDUCTION_FLAGS[name])
                    continue
            elif name in self.named_blocks:
                continue  # a tile entry with an error of its own
            else:
                self.unknown_key(key, name, list(sizes) + ["num_warps", "num_stages"]
                                 + (["ROWS", "UNROLL", "PER_SM", *REDUCTION_FLAGS] if self.kind == "reduction" else []))
                continue
            out[name] = value
        for block in sizes:
            if block not in raw and not self.tiles_refused:  # (else which blocks it needs is unsure)
                self.error("configs.fixed", f"missing block size {block!r}", f"one of: {_listing(sizes[block])}")
        return tuple(sorted(out.items()))

    def steps(self, kind, inputs: dict, scalars: dict, taken: dict) -> dict[str, Expression]:
        """A reduction's named values, each reading inputs, scalars and the steps before it."""
        value = self.data.get("steps")
        if value is None:
            return {}
        if kind != "reduction":
            if kind is not None:
                self.error("steps", f"steps are not used by {kind} kinds",
                           "write the math in " + ("epilogue" if kind == "matmul" else "compute"))
            return {}
        entries = self.mapping("steps", value) or {}
        if len(entries) > MAX_STEPS:
            self.error("steps", f"{len(entries)} steps", f"at most {MAX_STEPS}")
            return {}
        names = set(inputs) | set(scalars)
        later = [name for name in entries if isinstance(name, str)]
        out: dict[str, Expression] = {}
        # Steps with errors of their own: expressions that read them are not checked further
        # (no follow-on errors), but they may read them.
        for index, (name, source) in enumerate(entries.items()):
            key = f"steps.{name}"
            if not self.value_name(key, name, taken):
                names.add(str(name))
                self.broken_steps.add(str(name))
                continue
            taken[name] = "step"
            expression = self.reduction_expression(key, source, names | set(later[index:]), names)
            names.add(name)
            kind = None if expression is None or set(expression.names) & self.broken_steps else \
                self.step_kind(key, expression, scalars)
            if kind is None:
                self.broken_steps.add(name)
            else:
                out[name] = expression
                self.step_kinds[name] = kind
        self.step_levels = self.levels_of(inputs, scalars, out)
        return out

    def step_kind(self, key: str, expression: Expression, scalars: dict) -> Kind | None:
        """The kind of number a step holds (bool where it is a comparison: `keep: x > m`, read by a
        later where()), or None with its error, where its math is not defined for its arguments."""
        names = self.value_kinds(scalars)
        if any(n not in names for n in expression.names):
            return Kind(FLOAT, False)  # an unresolved dtype: its own error
        try:
            return Kind(category_of(expression.tree.body, names), False)
        except CategoryError as exc:
            self.error(key, exc.message, exc.allowed)
            return None

    def value_kinds(self, scalars: dict) -> dict[str, Kind]:
        """The kind of number of each name an expression may read: tensors by their dtypes, the
        accumulator, scalars (Python numbers: weak), and a reduction's steps known so far."""
        names = {name: Kind(category(found[0][0]), False) for name, found in self.dtypes.items()}
        names["acc"] = Kind(FLOAT, False)
        names.update({name: Kind(s.type, True) for name, s in scalars.items()})
        if self.kind == "reduction":
            names[ROW_LENGTH] = ROW_LENGTH_KIND  # (the reduced axis's name, as parsed)
        names.update(self.step_kinds)
        return names

    def reduction_expression(self, key: str, source, readable: set, defined: set) -> Expression | None:
        """Parse one expression of a reduction; a name of a step defined later (or the step itself)
        is an error of its own."""
        expression = self.parsed(key, source, readable, reductions=True)
        if expression is None:
            return None
        step = key.split(".", 1)[1] if key.startswith("steps.") else None
        ahead = [n for n in expression.names if n not in defined and n != ROW_LENGTH]
        for name in ahead:
            what = "itself" if name == step else f"step {name!r}, which comes after it (steps run in order)"
            self.error(key, f"the step reads {what}", "read only inputs, scalars and earlier steps")
        return None if ahead else expression

    def levels_of(self, inputs: dict, scalars: dict, steps: dict) -> dict[str, int]:
        axis = next(iter(self.named_axes), None)
        levels = {name: ROW if shape == ("...",) else ELEMENT for name, shape in inputs.items()}
        levels.update({name: UNIFORM for name in scalars})
        # Without an input of rows (its own error) every level is moot.
        has_rows = any(shape is None or shape[:1] == ("...",) and len(shape) > 1 for shape in inputs.values())
        for name, expression in steps.items():
            problems: list[str] = []
            levels[name] = level_of(expression.tree.body, levels, problems)
            if not has_rows or set(expression.names) & self.broken_steps:
                self.broken_steps.add(name)
                continue
            for problem in problems:
                self.error(f"steps.{name}", problem, f"reduce a value that reads an input of shape [..., {axis}]")
        return levels

    def reduction_body(self, inputs: dict, outputs: dict, scalars: dict, steps: dict):
        value = self.data.get("compute")
        if value is None:
            self.error("", "missing required key 'compute'", "output name -> expression")
            return ()
        entries = self.mapping("compute", value) or {}
        levels = self.step_levels or self.levels_of(inputs, scalars, {})
        names = set(inputs) | set(scalars) | set(steps) | self.broken_steps
        out = []
        for key, name, source in self.output_entries("compute", entries, outputs, required=True):
            expression = self.reduction_expression(key, source, names, names)
            if expression is None or set(expression.names) & self.broken_steps:
                continue
            problems: list[str] = []
            level = level_of(expression.tree.body, levels, problems)
            for problem in problems:
                self.error(key, problem, "reduce a value that varies along the row")
            if level == UNIFORM:
                self.error(key, "the expression reads no tensor", "use at least one input or step")
                continue
            if outputs[name] == ("...",) and level == ELEMENT:
                self.error(key, f"output {name!r} has one value per row (shape [...]) but its expression "
                           f"{LEVEL_NAMES[ELEMENT]}", "reduce it (sum, mean, max, min), or give the output the rows' shape")
                continue
            if not problems and self.categories_hold(key, name, expression, scalars):
                out.append((name, expression))
        return tuple(out)

    def body(self, kind, inputs: dict, outputs: dict, scalars: dict, steps: dict) -> tuple[tuple[str, Expression], ...]:
        if kind == "reduction":
            if "epilogue" in self.data:
                self.error("epilogue", "'epilogue' is not used by reduction kinds", "use 'compute'")
            return self.reduction_body(inputs, outputs, scalars, steps)
        section = "compute" if kind == "elementwise" else "epilogue"
        other = "epilogue" if kind == "elementwise" else "compute"
        if other in self.data and kind:
            self.error(other, f"{other!r} is not used by {kind} kinds", f"use {section!r}")
        value = self.data.get(section)
        if value is None:
            if kind == "elementwise":
                self.error("", "missing required key 'compute'", "output name -> expression")
                return ()
            value = {name: "acc" for name in outputs}
        if kind is None:
            return ()
        entries = self.mapping(section, value) or {}
        return self.expressions(section, entries, outputs, kind, inputs, scalars, required=True)

    def reference(self, kind, inputs: dict, outputs: dict, scalars: dict):
        value = self.data.get("reference")
        if value is None or kind is None:
            return ()
        entries = self.mapping("reference", value) or {}
        return self.expressions("reference", entries, outputs, kind, inputs, scalars, required=False)

    def expressions(self, section, entries, outputs, kind, inputs, scalars, required):
        """Check output -> expression entries; the names they may read depend on the kind.

        Elementwise: every input and scalar. Matmul: `acc`, the scalars, and the epilogue inputs
        (not the operands, which only the accumulator reads). A reduction's reference: every input
        and scalar, with the row reductions and PyTorch's row ops (its compute: reduction_body).
        """
        if kind in ("elementwise", "reduction"):
            tensors = set(inputs)
        else:
            tensors = (set(inputs) - set(self._operands(inputs, outputs))) | {"acc"}
        names = tensors | set(scalars)
        out = []
        for key, name, source in self.output_entries(section, entries, outputs, required):
            expression = self.parsed(key, source, names, reductions=kind == "reduction", oracles=kind == "reduction")
            if expression is None:
                continue
            if not set(expression.names) & tensors:
                self.error(key, "the expression reads no tensor", f"use at least one of: {_listing(sorted(tensors))}")
                continue
            if self.categories_hold(key, name, expression, scalars):
                out.append((name, expression))
        return tuple(out)

    def parsed(self, key: str, source, names: set, **language) -> Expression | None:
        """`source` parsed and checked (parse_expression's `language` options), or None with each
        of its problems logged under `key`. A reduction's math may read its reduced axis's name
        (`N`: the row's length, as `x.shape[-1]`), which it then reads as rows.ROW_LENGTH, the
        name the lowering gives it (a mean's divisor)."""
        axis = self.row_length_name()
        try:
            expression = parse_expression(source, names | ({axis} if axis else set()), **language)
        except ExpressionError as exc:
            for problem in exc.all():
                if problem.unknown_name is not None and self.taken.get(problem.unknown_name) == "output":
                    self.error(key, f"output {problem.unknown_name!r} is read here, but expressions read no "
                               "outputs", "name its expression as a step and read the step in both"
                               if self.kind == "reduction" else
                               "write its expression here too")
                elif problem.unknown_name in self.named_axes | self.shape_axes:
                    # (a matmul's epilogue and its backward run where the axes' lengths differ:
                    # the dZ kernel has no K, the dA product's own K is N)
                    self.error(key, f"axis {problem.unknown_name!r} is read here, but only a reduction's math "
                               "reads an axis's length (the reduced axis's, by its name)",
                               "pass the length as an int scalar, `length: {type: int}` under scalars")
                elif problem.unknown_name is None or problem.unknown_name not in self.refused_names:
                    self.error(key, problem.message, problem.allowed)
            return None
        return expression.renamed({axis: ROW_LENGTH}) if axis else expression

    def row_length_name(self) -> str | None:
        """The axis a reduction reduces, by its name in `tiles` (`N`), where its math may read it."""
        if self.kind != "reduction" or len(self.named_axes) != 1:
            return None
        return next(iter(self.named_axes))

    def output_entries(self, section: str, entries: dict, outputs: dict, required: bool):
        """(key, output, expression source) of each entry of `section` that names an output; an entry
        that names none is an error, and so, where `required`, is an output with no entry."""
        for name, source in entries.items():
            key = f"{section}.{name}"
            if name not in outputs:
                if name not in self.refused_names:
                    self.error(key, f"{_show(name)} is not an output", f"outputs: {_listing(outputs) or 'none'}")
                continue
            yield key, name, source
        if required:
            for name in outputs:
                if name not in entries:
                    self.error(section, f"no expression for output {name!r}", f"{name}: an expression")

    def categories_hold(self, key: str, output: str, expression: Expression, scalars: dict) -> bool:
        """Whether the expression's math is defined for its arguments' kinds of number (bool,
        int, float) and `output` can hold its result; if not, say so once."""
        dtypes = self.dtypes
        names = self.value_kinds(scalars)
        if output not in dtypes or any(n not in names for n in expression.names):
            return True  # an unresolved dtype: its own error
        try:
            result = category_of(expression.tree.body, names)
        except CategoryError as exc:
            self.error(key, exc.message, exc.allowed)
            return False
        if not self.int_literals_fit(key, output, expression, names):
            return False
        held = category(dtypes[output][0][0])
        if isinstance(expression.tree.body, ast.Compare) and held != "bool":
            self.error(key, f"a comparison gives bool values, but output {output!r} holds {held} values",
                       "a comparison as the first argument of where(), or a bool output's whole expression")
            return False
        if not can_hold(held, result):
            self.error(key, f"output {output!r} holds {held} values but its expression gives {result} values",
                       f"an output of a dtype that holds {result} values, or other math")
            return False
        return True

    def int_literals_fit(self, key: str, output: str, expression: Expression, names: dict) -> bool:
        """Whether each int literal computed with int inputs fits the narrowest dtype they accept
        (PyTorch takes their dtype for it; categories.int_scalars_met), and one stored alone in
        `output` (`y: where(m, 5, 3000000000)`) the output's; if not, say so once."""
        for value, tensors in int_scalars_met(expression.tree.body, names, result=output).items():
            if isinstance(value, str):
                continue
            for name in sorted(tensors):
                narrowest = narrowest_int(d for d, *_ in self.dtypes[name])
                if narrowest is None:
                    continue
                low, high = INT_RANGES[narrowest]
                if not low <= value <= high:
                    what = "output" if name == output else "input"
                    self.error(key, f"the literal {value} does not fit in {narrowest}, a dtype of {what} {name!r} "
                                    f"it is computed with", f"a literal in [{low}, {high}], or int64 {what}s only")
                    return False
        return True

    @staticmethod
    def _operands(inputs: dict, outputs: dict) -> list[str]:
        out_axes = {axis for s in outputs.values() if s for axis in s}
        return [name for name, s in inputs.items() if s is not None and set(s) - out_axes]

    def shape_list(self, section: str, kind, batched=False) -> tuple[tuple[int, ...], ...]:
        value = self.data.get(section)
        if value is None:
            return ()
        entries = self.mapping(section, value, ("shapes",)) or {}
        raw = entries.get("shapes", [])
        want = ("[B, M, N, K] (a batch of B)" if batched else "[M, N, K]") if kind == "matmul" \
            else "a list of 1 to 8 sizes"
        if not isinstance(raw, list) or len(raw) > MAX_TEST_SHAPES:
            self.error(f"{section}.shapes", f"expected a list of at most {MAX_TEST_SHAPES} shapes",
                       f"each {want}")
            return ()
        shapes = []
        for index, shape in enumerate(raw):
            key = f"{section}.shapes.{index}"
            matmul_rank = 4 if batched else 3
            rank_ok = isinstance(shape, list) and (len(shape) == matmul_rank if kind == "matmul" else 1 <= len(shape) <= 8)
            if not rank_ok or any(type(d) is not int or not 0 <= d <= MAX_DIM for d in shape):
                self.error(key, f"{_show(shape)} is not a shape", f"{want}, each 0 to {MAX_DIM}")
                continue
            shapes.append(tuple(shape))
        return tuple(shapes)


def _type_name(value) -> str:
    return "nothing" if value is None else type(value).__name__


def _logical(expression: Expression, kinds: dict[str, Kind]) -> Expression:
    """`expression` with `+` and `*` of two bools spelled as the or/and PyTorch computes
    (categories.as_logic); the source stays the author's."""
    tree = as_logic(copy.deepcopy(expression.tree), kinds)
    if ast.dump(tree) == ast.dump(expression.tree):
        return expression
    return Expression(expression.source, tree, expression.names)


def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def validate_document(doc: Document, errors: ErrorLog) -> Spec | None:
    """The `Spec` for `doc`, or None with every problem logged to `errors`."""
    return _Validator(doc, errors).run()
