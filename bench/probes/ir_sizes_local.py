"""Runs without a GPU: compiles the matmul kernel of 2879c8b (before sizes had factors) and the
current one for sm_90 on a 4096^3 pointer-load tile, and compares their TTGIR and PTX (debug
info left out). Multiples of 16 now come with factor 1, so the two should match.

    git show 2879c8b:generated/matmul.py > generated/_v_base.py
    PYTHONPATH=. python bench/probes/ir_sizes_local.py
"""
import difflib
import importlib
import re
import sys

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

import generated  # noqa: F401

now = sys.modules["generated.matmul"]
base = importlib.import_module("generated._v_base")
M = N = K = 4096
CONFIG = dict(BM=256, BN=128, BK=64, GROUP_M=8, SPLIT_K=1, MASK_M=True, MASK_N=True, MASK_K=False, PEEL_K=False,
              USE_TMA=False, INDEX_64=False, PERSISTENT=False, partial_ptr=None, count_ptr=None)
VALUES = dict(M=M, N=N, K=K, stride_a_0=K, stride_a_1=1, stride_b_0=N, stride_b_1=1, stride_c_0=N, stride_c_1=1)


def compiled(module):
    """The kernel as the wrapper launches it for this shape: factors (all 1 here but the unit
    strides' quotients) as constexprs, multiples of 16 marked as Triton marks them."""
    fn = module._matmul_kernel
    names = fn.arg_names
    constants = dict(CONFIG, **{n: 1 for n in names if n.endswith("_FACTOR")})
    signature, attrs = {}, {}
    for i, name in enumerate(names):
        if name in constants:
            signature[name] = "constexpr"
        elif name.endswith("_ptr"):
            signature[name], attrs[(i,)] = "*fp16", [["tt.divisibility", 16]]
        elif VALUES[name] == 1:  # Triton passes 1 as a constant
            signature[name], constants[name] = "constexpr", 1
        else:
            signature[name] = "i32"
            if VALUES[name] % 16 == 0:
                attrs[(i,)] = [["tt.divisibility", 16]]
    source = ASTSource(fn, signature, {(names.index(k),): v for k, v in constants.items()}, attrs)
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=8, num_stages=4)).asm


def code(text):
    text = re.sub(r"loc\(.*?\)|#loc\d*( = .*)?", "", text)
    return [line for line in text.splitlines() if line.strip() and "DW_" not in line
            and not line.strip().startswith((".b8", ".b16", ".b32", ".b64", ".loc", ".file", "//", ".section", "{", "}"))]


old, new = compiled(base), compiled(now)
for stage in ("ttgir", "ptx"):
    diff = list(difflib.unified_diff(code(old[stage]), code(new[stage]), lineterm="", n=0))
    print(f"{stage}: {len(code(new[stage]))} lines, {'identical' if not diff else 'differs:'}")
    print("\n".join(diff[:40]))
