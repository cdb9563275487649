"""Starting specs for `tilegen new`: valid, commented, ready to edit."""

from __future__ import annotations

import keyword
import re

from .build import BuildError

SCAFFOLD_KINDS = ("elementwise", "matmul", "reduction")

_ELEMENTWISE = """\
# {name}: describe the op in one line below; every key is explained in docs/spec.md.
op: {name}
kind: elementwise
doc: out = alpha * x + y, computed in float32.
inputs:
  x: {{dtype: [float16, bfloat16, float32]}}
  y: {{dtype: x}}                    # same dtype as x
outputs:
  out_value: {{dtype: x}}
scalars:
  alpha: {{type: float, default: 1.0}}
dtypes:
  compute: float32
compute:
  out_value: alpha * x + y
tiles:
  N: {{block: BLOCK, sizes: [1024, 2048, 4096]}}
masks:
  N: auto
"""

_MATMUL = """\
# {name}: describe the op in one line below; every key is explained in docs/spec.md.
op: {name}
kind: matmul
doc: C = A @ B with an epilogue on the float32 accumulator.
inputs:
  a: {{shape: [M, K], dtype: [float16, bfloat16, float32]}}
  b: {{shape: [K, N], dtype: a}}
outputs:
  c: {{shape: [M, N], dtype: a}}
dtypes:
  accumulate: float32
tiles:
  M: {{block: BM, sizes: [64, 128, 256]}}
  N: {{block: BN, sizes: [64, 128, 256]}}
  K: {{block: BK, sizes: [32, 64, 128]}}
masks:
  M: always
  N: always
  K: auto
epilogue:
  c: acc
"""


_REDUCTION = """\
# {name}: describe the op in one line below; every key is explained in docs/spec.md.
op: {name}
kind: reduction
doc: y = softmax(x * scale) over the last axis, computed in float32.
inputs:
  x: {{dtype: [float16, bfloat16, float32], shape: [..., N]}}   # rows of N; N is reduced
outputs:
  y: {{dtype: x, shape: [..., N]}}
scalars:
  scale: {{type: float, default: 1.0}}
steps:                              # named values, in order; sum, mean, max, min reduce a row
  s: x * scale
  m: max(s)
  e: exp(s - m)
compute:
  y: e / sum(e)
tiles:
  N: {{block: BLOCK_N, sizes: [1024, 2048, 4096]}}   # the blocks a row too long for one tile loops in
"""

_TEMPLATES = {"elementwise": _ELEMENTWISE, "matmul": _MATMUL, "reduction": _REDUCTION}


def scaffold_spec(name: str, kind: str) -> str:
    if not re.match(r"^[a-z][a-z0-9_]{0,62}$", name) or keyword.iskeyword(name):
        raise BuildError(f"{name!r} is not a valid op name (lowercase letters, digits and _, not a keyword)")
    return _TEMPLATES[kind].format(name=name)
