"""Each kind's rules for the shapes a spec declares: elementwise inputs broadcast as PyTorch's,
a matmul's operands, batch axes and epilogue inputs, a reduction's rows, weights and per-row values.

A mixin of the validator (validate.py): the rules report through its `error`, and read the spec's
data, resolved dtypes and tiled axes from it.
"""

from __future__ import annotations

from .dtypes import FLOAT32_PRECISIONS, FP8_DTYPES, FP8_PRECISIONS, PRECISIONS
from .spec import SIZE_ONE, broadcast_axes_of, fixed_axes


class ShapeRules:
    def structure(self, kind, inputs: dict, outputs: dict):
        """Kind-specific shape rules: same shapes for elementwise, [M,K] @ [K,N] for matmul."""
        if kind == "elementwise":
            self.elementwise_shapes(inputs, outputs)
            return None
        if kind == "reduction":
            self.reduction_shapes(inputs, outputs)
            return None
        if kind != "matmul" or not outputs or not inputs:
            return None
        return self.matmul_shapes(inputs, outputs)

    def matmul_shapes(self, inputs: dict, outputs: dict):
        """[..., M, K] @ [..., K, N] -> [..., M, N]: a leading "..." stands for batch axes, which
        broadcast as torch.matmul's do (an operand may have none); epilogue inputs are indexed by
        output axes, with or without the batch axes."""
        declared = {name: fixed_axes(shape) for name, shape in outputs.items() if shape is not None}
        for name, shape in declared.items():
            if len(shape) > 2:  # named batch axes: the language writes them as "..."
                self.error(f"outputs.{name}.shape", f"a matmul's batch axes are written '...' (any number, "
                           f"broadcast as torch.matmul's), got {axes_text(outputs[name])}",
                           f"[..., {', '.join(shape[-2:])}], with operands [..., M, K] and [..., K, N]")
            elif len(shape) != 2:
                self.error(f"outputs.{name}.shape", f"a matmul output is [M, N] or [..., M, N] (batched), "
                           f"got {axes_text(outputs[name])}", "[M, N] or [..., M, N]")
        if len(set(declared.values())) != 1 or len({s[:1] == ("...",) for s in outputs.values()}) != 1:
            self.error("outputs", "matmul outputs must share one shape", "[M, N] or [..., M, N]")
            return None
        (m, n), = set(declared.values()) if len(next(iter(declared.values()))) == 2 else (("", ""),)
        if not m:
            return None
        out_batched = next(iter(outputs.values()))[:1] == ("...",)
        matrix = {name: fixed_axes(s) for name, s in inputs.items() if s is not None}
        operands = [name for name, axes in matrix.items() if set(axes) - {m, n}]
        pair = _agreeing_operands(operands, matrix, m, n)
        if len(operands) > 2 and pair:
            # Two inputs are the operands; the others name an axis the output lacks.
            for name in operands:
                if name not in pair:
                    self.epilogue_input_refused(name, inputs[name], m, n)
                    del matrix[name]
            operands = list(pair)
        if len(operands) != 2:
            self.error("inputs", f"a matmul needs exactly two operands over a reduction axis, found "
                       f"{len(operands)}", "a: [M, K] and b: [K, N]; other inputs use only output axes")
            return None
        a, b = (matrix[name] for name in operands)
        reduction = set(a) - {m, n}
        k = next(iter(reduction))
        if a == (k, n) and b == (m, k):  # both right, in the other order
            self.error(f"inputs.{operands[1]}.shape",
                       f"operands {operands[0]}: {axes_text(inputs[operands[0]])} and {operands[1]}: "
                       f"{axes_text(inputs[operands[1]])} are listed B first (the first operand is A, "
                       f"the output's rows)", f"list {operands[1]} before {operands[0]} in inputs")
            return None
        if len(a) != 2 or len(b) != 2 or a != (m, k) or b != (k, n):
            self.error(f"inputs.{operands[1]}.shape",
                       f"operands {operands[0]}: {axes_text(inputs[operands[0]])} and {operands[1]}: "
                       f"{axes_text(inputs[operands[1]])} do not agree",
                       f"{operands[0]}: [{m}, {k}] and {operands[1]}: [{k}, {n}] for an output [{m}, {n}]; either may "
                       "lead with ... (batch axes)")
            return None
        names = list(inputs)
        ahead = [name for name in names[:names.index(operands[1])] if name not in operands]
        if ahead:
            # (As torch.matmul's and F.linear's arguments: the op's signature, its tests and its
            # benchmark take the operands first.)
            behind = next(name for name in operands if names.index(name) > names.index(ahead[0]))
            self.error(f"inputs.{ahead[0]}", f"epilogue input {ahead[0]!r} is listed ahead of operand {behind}",
                       f"list {operands[0]} and {operands[1]} first in inputs, then the epilogue inputs")
            return None
        batched = [name for name, shape in inputs.items() if shape is not None and shape[:1] == ("...",)]
        if batched and not out_batched:
            self.error(f"inputs.{batched[0]}.shape", f"input {batched[0]!r} has batch axes (...) but the "
                       "output has none", f"outputs: [..., {m}, {n}]")
        elif out_batched and not any(name in batched for name in operands):
            self.error(f"outputs.{next(iter(outputs))}.shape", "a batched output needs a batched operand",
                       f"{operands[0]}: [..., {m}, {k}]")
        b_dtype = self.data["inputs"][operands[1]].get("dtype")
        a_dtype = self.data["inputs"][operands[0]].get("dtype")
        if b_dtype != operands[0] and b_dtype != a_dtype:
            self.error(f"inputs.{operands[1]}.dtype", "the second operand must have the first's dtype",
                       f"dtype: {operands[0]}")
        self.fp8_roles(operands)
        self.dot_precision(operands)
        for name, shape in matrix.items():
            if name not in operands and shape not in ((m,), (n,), (m, n)):
                self.epilogue_input_refused(name, inputs[name], m, n)
            elif name not in operands and name in batched and shape != (m, n):
                self.error(f"inputs.{name}.shape", "an epilogue input with batch axes has the output's "
                           f"matrix axes, got {axes_text(inputs[name])}", f"[..., {m}, {n}], or [{n}] for every batch")
        return m, n, k

    def epilogue_input_refused(self, name, shape, m, n) -> None:
        """An epilogue input whose axes are not the output's: reported here, and not again where
        the epilogue reads it."""
        self.error(f"inputs.{name}.shape", f"an epilogue input must be indexed by output axes, "
                   f"got {axes_text(shape or ())}", f"[{n}], [{m}], [{m}, {n}] or [..., {m}, {n}]")
        self.refused_names.add(name)

    def fp8_roles(self, operands) -> None:
        """8-bit floats are operands' dtypes only, and an operand's dtypes are all 8-bit or none:
        the float32 accumulator is scaled by epilogue inputs, and outputs are 16 or 32-bit."""
        for name, (accepted, source) in self.dtypes.items():
            fp8 = [d for d in accepted if d in FP8_DTYPES]
            if not fp8 or (source != name and name in operands):
                continue  # (an operand that follows the other is checked there)
            section = "inputs" if name in self.data.get("inputs", {}) else "outputs"
            if name not in operands:
                self.error(f"{section}.{name}.dtype", f"{fp8[0]} is a matmul operand's dtype only",
                           "float16, bfloat16 or float32 for scales, epilogue inputs and outputs")
            elif len(fp8) != len(accepted):
                self.error(f"{section}.{name}.dtype", "an operand's dtypes are all 8-bit floats or none",
                           "[float8_e4m3fn, float8_e5m2] or [float16, bfloat16, float32]")

    def dot_precision(self, operands) -> None:
        """A precision the operands' dots have: tf32 and tf32x3 are float32 dots' modes, fast_accum
        fp8 dots' (the tensor cores' own accumulation over the K loop)."""
        dtypes = self.data.get("dtypes")
        precision = dtypes.get("precision") if isinstance(dtypes, dict) else None
        fp8_dots = any(d in FP8_DTYPES for d in self.dtypes.get(operands[0], ((), None))[0])
        allowed = FP8_PRECISIONS if fp8_dots else FLOAT32_PRECISIONS
        if isinstance(precision, str) and precision in PRECISIONS and precision not in allowed:
            self.error("dtypes.precision", f"{precision} is not a precision of "
                       f"{'fp8' if fp8_dots else 'float16, bfloat16 or float32'} operands' dots", ", ".join(allowed))

    def elementwise_shapes(self, inputs: dict, outputs: dict) -> None:
        """Declared elementwise shapes broadcast as in PyTorch: axes line up from the last, so each
        input's axes are the last ones of the broadcast shape (the longest input's, "..." first
        where any input has it), and a declared output has that shape."""
        declared = {name: shape for name, shape in inputs.items() if shape is not None}
        if not declared:
            for name, shape in outputs.items():
                if shape is not None:
                    self.error(f"outputs.{name}.shape", "an output shape needs input shapes to follow",
                               "declare the inputs' shapes too, or omit it")
            return
        full = broadcast_axes_of(list(declared.values()))
        if set(full) == {SIZE_ONE}:
            self.error(f"inputs.{next(iter(declared))}.shape", f"every declared axis is 1 ({list(full)}): "
                       "the op would compute one element", "name an axis, or lead with ... (any leading axes)")
            return
        for name, shape in declared.items():
            axes = fixed_axes(shape)
            lined_up = full[len(full) - len(axes):]
            if any(axis not in (SIZE_ONE, there) for axis, there in zip(axes, lined_up)):
                self.error(f"inputs.{name}.shape", f"axes {list(shape)} do not line up with {list(full)} "
                           f"from the last (shapes broadcast as in PyTorch)",
                           f"the last axes of {list(full)}, e.g. {list(full[-1:])}")
        for name, shape in outputs.items():
            if shape is not None and shape != full:
                self.error(f"outputs.{name}.shape", f"an elementwise output has the inputs' broadcast shape "
                           f"{list(full)}, got {list(shape)}", f"{list(full)}, or omit it")

    def reduction_shapes(self, inputs: dict, outputs: dict) -> None:
        """A reduction's tensors lie along its rows: [..., N] (the rows), [N] (the same for every
        row, a weight) or [...] (one value per row, a saved statistic); outputs are rows or one
        value per row; at least one input is rows."""
        tiled = list(self.named_axes)
        if len(tiled) != 1:
            return  # the tiles' own error
        axis = tiled[0]
        rows, column, per_row = ("...", axis), (axis,), ("...",)
        allowed = {"inputs": ((rows, column, per_row), f"[..., {axis}] (rows), [{axis}] (the same for every row) "
                              "or [...] (one value per row)"),
                   "outputs": ((rows, per_row), f"[..., {axis}] (rows) or [...] (one value per row)")}
        refused_inputs = False
        for section, tensors in (("inputs", inputs), ("outputs", outputs)):
            forms, listing = allowed[section]
            for name, shape in tensors.items():
                if shape is None or shape in forms:
                    continue
                why = f"the reduced axis {axis} comes last" if axis in shape[:-1] else \
                    f"a reduction reduces one axis, {axis}, over rows of any leading shape"
                self.error(f"{section}.{name}.shape", f"{list(shape)} is not allowed: {why}", listing)
                refused_inputs |= section == "inputs"
        # (An input refused above may be the rows, over another axis: that error says it.)
        if inputs and not refused_inputs and all(shape is not None for shape in inputs.values()) \
                and rows not in inputs.values():
            self.error("inputs", "no input has the rows to reduce", f"at least one input of shape [..., {axis}]")


def matmul_axes(inputs: dict, outputs: dict) -> tuple[str, ...] | None:
    """A matmul's axis symbols (M, N, K, batch axes aside), where there are exactly three."""
    axes: list[str] = []
    for shape in list(outputs.values()) + list(inputs.values()):
        for axis in fixed_axes(shape or ()):
            if axis not in axes:
                axes.append(axis)
    return tuple(axes) if len(axes) == 3 else None


def axes_text(shape) -> str:
    """A declared shape as a spec writes it: [..., M, K]."""
    return "[" + ", ".join(shape) + "]"


def _agreeing_operands(candidates, matrix, m, n):
    """The first two of `candidates` (inputs with an axis the output lacks) that agree as
    [m, k] and [k, n] for one k, in order, or None."""
    for a in candidates:
        for b in candidates:
            if a != b and len(matrix[a]) == len(matrix[b]) == 2 and matrix[a][0] == m \
                    and matrix[b][1] == n and matrix[a][1] == matrix[b][0] not in (m, n):
                return a, b
    return None
