"""Compile generated kernels for an H100/H200 (CUDA sm_90) on a machine without a GPU: Triton
lowers them all the way to a cubin (ttir, ttgir, llir, ptx, ptxas), which finds every kernel that
does not compile, though it runs none. For the kernels of the test specs in tests/test_categories.py
that int and bool math emits (a bool divided by an int, numbers typed by the math beside ints, int
and bool results stored through int_as_float_output), and the backward kernels of the test specs
in tests/test_unusual_specs.py whose gradients changed (a per-row value's share summed as the row
length times it; a matmul epilogue that gives the accumulator no gradient), each in the dtypes
given below, with the row-held and looped forms of a reduction and float32 and float64 math.

    PYTHONPATH=. python bench/probes/compile_for_hopper.py
"""
import importlib
import itertools
import sys
import tempfile
from pathlib import Path

import triton
from click.testing import CliRunner
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from tests.test_categories import BOOLS_DIVIDED, FLOATS_BESIDE_INTS, INT_RESULTS_IN_HALF_OUTPUTS
from tests.test_unusual_specs import NO_GRADIENT_AT_THE_ACCUMULATOR, ROW_VALUES_SUMMED_ALONG_THE_ROW
from tilegen.cli import main

HOPPER = GPUTarget("cuda", 90, 32)
# (spec file, its text, the op, the Triton type of each tensor by name, one dict per dtype tried)
CASES = [
    ("bools_divided.yaml", BOOLS_DIVIDED, "bools_divided",
     [dict(x="fp32", j=j, m="i1", a="fp32", b="fp32", c="fp32", d="fp32") for j in ("i32", "i64")]),
    ("floats_beside_ints.yaml", FLOATS_BESIDE_INTS, "floats_beside_ints",
     [dict(x="fp64", j="i64", m="i1", beside_int="fp64", beside_bool="fp64", numbers="fp64",
           numbers_meet_int="fp64", scalar_and_number="fp64")]),
    ("int_to_half.yaml", INT_RESULTS_IN_HALF_OUTPUTS["int_to_half.yaml"], "int_to_half",
     [dict(x=f, j=j, m="i1", y=f, z=f, w=f) for f, j in itertools.product(("bf16", "fp16", "fp32", "fp64"), ("i32", "i64"))]),
    ("bools_of_rows.yaml", INT_RESULTS_IN_HALF_OUTPUTS["bools_of_rows.yaml"], "bools_of_rows",
     [dict(x=f, keep="i1", y=f, z=f, _kept_0="fp32") for f in ("bf16", "fp16", "fp32")]),
    # Backward kernels (their names end in _backward_kernel, taken where the op's name says so).
    ("shifted_sums.yaml", ROW_VALUES_SUMMED_ALONG_THE_ROW["shifted_sums.yaml"], "shifted_sums_backward",
     [dict(x=f, _g_z=f, _g_m=f, _d_x=f, _d_r=f) for f in ("fp32", "fp64")]),
    ("mm_bias_only.yaml", NO_GRADIENT_AT_THE_ACCUMULATOR["mm_bias_only.yaml"], "mm_bias_only_backward",
     [dict(_g_c="fp32", _d_bias="fp32")]),
    ("bmm_sign_gate.yaml", NO_GRADIENT_AT_THE_ACCUMULATOR["bmm_sign_gate.yaml"], "bmm_sign_gate_backward",
     [dict(acc="fp32", r="fp32", bias="fp32", _g_c="fp32", _d_r="fp32", _d_bias="fp32")]),
]
SCALARS = {"flag": "i1", "n": "i64"}
CONSTEXPRS = {"BLOCK": 256, "EVEN": False, "INDEX_64": False, "LINES": False, "BLOCK_N": 64, "ROWS": 2,
              "UNROLL": 1, "AHEAD": False, "FIXED_N": 0, "EVICT": False, "READ_BACK": False, "PER_SM": 0, "LOOP": False,
              "STORES": 0b11}  # (a backward kernel: every gradient it computes stored)


def compiled(kernel, types, constexprs):
    signature, values = {}, {}
    for param in kernel.params:
        if param.is_constexpr:
            signature[param.name], values[param.name] = "constexpr", constexprs[param.name]
        elif param.name.endswith("_ptr"):
            signature[param.name] = "*" + types[param.name[:-4]]
        else:
            signature[param.name] = SCALARS.get(param.name, "i32")
    return triton.compile(ASTSource(fn=kernel, signature=signature, constexprs=values), target=HOPPER)


def main_():
    failures = 0
    with tempfile.TemporaryDirectory() as root:
        specs = Path(root) / "specs"
        specs.mkdir()
        for file, text, _, _ in CASES:
            (specs / file).write_text(text)
        result = CliRunner().invoke(main, ["build", str(specs), "-o", str(Path(root) / "hopper_check")])
        assert result.exit_code == 0, result.output
        sys.path.insert(0, root)
        for _, _, op, dtypes in CASES:
            backward = op.endswith("_backward")
            module = importlib.import_module(f"hopper_check.{op.removesuffix('_backward')}")
            kernels = [(name, k) for name, k in vars(module).items()
                       if isinstance(k, triton.runtime.jit.JITFunction) and name.endswith("_kernel")
                       and ("backward" in name) == backward]
            for (name, kernel), types in itertools.product(kernels, dtypes):
                forms = [True, False] if any(p.name == "ONE_TILE" for p in kernel.params) else [True]
                for math_64, one_tile in itertools.product((False, True), forms):
                    label = f"{name} {types} MATH_64={math_64}" + ("" if len(forms) == 1 else f" ONE_TILE={one_tile}")
                    try:
                        binary = compiled(kernel, types, dict(CONSTEXPRS, MATH_64=math_64, ONE_TILE=one_tile))
                        print(f"{label}: compiled ({len(binary.asm['cubin'])} bytes of cubin)")
                    except Exception as error:  # noqa: BLE001 - every failure is reported, then counted
                        failures += 1
                        lines = [line for line in str(error).splitlines() if line.strip(" ^")]
                        print(f"{label}: {type(error).__name__}: {lines[-1] if lines else ''}")
    print(f"triton {triton.__version__}, target sm_90: {failures} failed")
    return failures


if __name__ == "__main__":
    sys.exit(1 if main_() else 0)
