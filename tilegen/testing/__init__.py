"""What every op's generated tests share: its inputs (samples), how results are compared with the
float64 oracle (compare), and the checks of the op as a PyTorch op (pytorch_op). The generated
tests read it as one namespace: `from tilegen import testing as s`, then `s.random(...)`.

Imports pytest, so it is for test runs only (tilegen.runtime is what a generated op needs)."""

import tilegen.runtime as rt
from tilegen.testing.compare import (
    TOLERANCES, assert_identical, assert_matches, assert_same_gradients, assert_same_results, computes_in_float64,
    float32_allowances, float32_error, float32_parts, float32_yardsticks, float64_allowances, gradient_key, held_by,
    within_allowance,
)
from tilegen.testing.pytorch_op import (
    COMPILE_BACKEND, OPCHECK_AOT, OPCHECK_UTILS, OPCHECK_UTILS_WITHOUT_AOT, OPCHECK_UTILS_WITHOUT_SCHEMA, AsPyTorchOp,
    as_module, check_compiles_whole, check_cuda_graph_replay, check_export_keeps, check_out_is_an_input,
    compiled_afresh, opcheck, opcheck_compared, opcheck_tolerances, recorded_gradients,
)
from tilegen.testing.samples import (
    CONFIG_PARTS, DEVICE, FP8_DOTS, FP8_DTYPES, INTERPRET, NUDGE, another_dtype, as_tuple, dtype_params, exact,
    generator, needs_backend, oracle_float, oracle_in, oracle_product, poison_floats, random, reducing_along, unwritten,
    with_layout,
)

# Training calls are checked through the autograd node they settle on: built here before the
# first test (it builds in the background at a process's first training call, and calls record
# torch.autograd.Function's node until it is ready). TILEGEN_AUTOGRAD_NODE=0 checks the Function's.
rt.autograd.native_module(wait=True)

__all__ = [
    "AsPyTorchOp", "COMPILE_BACKEND", "CONFIG_PARTS", "DEVICE", "FP8_DOTS", "FP8_DTYPES", "INTERPRET", "NUDGE",
    "OPCHECK_AOT", "OPCHECK_UTILS", "OPCHECK_UTILS_WITHOUT_AOT", "OPCHECK_UTILS_WITHOUT_SCHEMA", "TOLERANCES",
    "another_dtype", "as_module", "as_tuple", "assert_identical", "assert_matches", "assert_same_gradients",
    "assert_same_results", "check_compiles_whole", "check_cuda_graph_replay", "check_export_keeps",
    "check_out_is_an_input", "compiled_afresh", "computes_in_float64", "dtype_params", "exact", "float32_allowances",
    "float32_error", "float32_parts", "float32_yardsticks", "float64_allowances", "generator", "gradient_key", "held_by", "needs_backend", "opcheck",
    "opcheck_compared", "opcheck_tolerances", "oracle_float", "oracle_in", "oracle_product", "poison_floats", "random",
    "recorded_gradients", "reducing_along", "unwritten", "with_layout", "within_allowance",
]
