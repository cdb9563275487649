"""tilegen.runtime: what every generated op shares, as a library.

It imports only torch, triton and tilegen.schema (plain constants it shares with the build), and,
for the compiled call path, builds its C++ source with the machine's compiler, so a package built
by tilegen needs only `pip install tilegen` to import.

- checks: argument checks that name the op and the argument
- layout: strided layouts, 64-bit offsets, alignment facts
- configs: candidate configs, heuristics, tuned-table lookup, the ConfigChooser
- launch: Triton's launch, split-K scratch
- sync: a grid-wide barrier and the share of a finish generated kernels call (wait_for_every_program, finish_share)
- tiles: tile helpers matmul kernels call (operand_tile, store_tile, sum_split_k)
- callpath, native: the compiled call path and the one mechanism that builds native code
- batch: a batched matmul's batch axes (broadcasting, one stride per tensor)
- axis: a reduction over another axis than the last (`dim=`), on views with it moved last
- ops: each kind's launch logic (ElementwiseOp, MatmulOp, ReductionOp)
- library: registration with torch.library, and how wrappers route traced calls
- autograd: the autograd formula registered with each op, and the eager training path (its C++
  node: csrc/autograd_node.cpp)

Generated modules call `require(VERSION_THEY_WERE_BUILT_FOR, module name)` on import, as
protobuf's generated code checks its runtime: a module built for another runtime version is
refused with one error that says to rebuild.
"""

from .checks import (broadcast_shape, check_axes, check_dim, check_divisible, epilogue_view, check_interpretable, check_same_device, check_same_dtype,
                     check_scalar, check_tensor, prepare_out, split_out)
from .amp import autocast_inputs, autocasting
from .batch import batch_shape
from .configs import ConfigChooser, ElementwiseSpace, MatmulSpace, ReductionSpace
from .device import INTERPRET, cdiv, device_facts, on_device
from .autograd import Gradients, call, in_precision, summed_gradient_dtype
from .library import copy_out, formula_of, refuse_grad, refuse_out_with_grad, register, tracing, vmapped, wants_grad
from . import autograd, flops, launch, layout, library, ops  # noqa: F401 - submodules reached as rt.layout, rt.flops, ...
from .ops import ElementwiseOp, MatmulOp, ReductionOp, backward_op_of, op_of
from .sync import finish_share, wait_for_every_program
from ..schema import RUNTIME_VERSION as VERSION, bucket, tile_of


class RuntimeVersionError(ImportError):
    pass


def require(version, module):
    """Called by each generated module on import with the runtime version it was built for."""
    if version != VERSION:
        raise RuntimeVersionError(
            f"{module} was generated for tilegen.runtime version {version}, but the installed tilegen "
            f"provides version {VERSION}; rebuild the package with `tilegen build` (or install the tilegen "
            "it was built with)")


__all__ = [
    "VERSION", "RuntimeVersionError", "require", "autocast_inputs", "autocasting", "INTERPRET", "cdiv", "device_facts", "on_device", "batch_shape",
    "broadcast_shape", "check_axes", "check_dim", "check_divisible", "epilogue_view", "check_interpretable", "check_same_device", "check_same_dtype",
    "check_scalar", "check_tensor", "prepare_out", "split_out",
    "ConfigChooser", "ElementwiseSpace", "MatmulSpace", "ReductionSpace", "ElementwiseOp", "MatmulOp", "ReductionOp",
    "backward_op_of",
    "op_of",
    "bucket", "tile_of", "call", "in_precision", "summed_gradient_dtype", "copy_out", "formula_of", "Gradients", "refuse_grad", "refuse_out_with_grad", "register",
    "tracing", "vmapped", "wants_grad", "finish_share", "wait_for_every_program",
]
