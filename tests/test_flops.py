"""Matmul ops' FLOP counts under torch.utils.flop_counter.FlopCounterMode (runtime/flops.py):
those PyTorch counts for the same math (2*M*N*K a product, forward and backward, nothing for
pointwise ops), so a training loop's MFU accounting is right with generated ops in the model."""

import os

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

pytestmark = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET", "0") in ("", "0") and not torch.cuda.is_available(),
    reason="needs a CUDA GPU, or TRITON_INTERPRET=1")

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def counted(fn, inputs):
    """FLOPs FlopCounterMode counts for fn's forward and the backward of the inputs that require grad."""
    with FlopCounterMode(display=False) as counter:
        result = fn(*inputs)
        asked = [t for t in inputs if t.requires_grad]
        if asked:
            torch.autograd.grad(result.float().sum(), asked)
    return counter.get_total_flops()


def tensors(*shapes, needs=None):
    g = torch.Generator().manual_seed(0)
    needs = needs or (True,) * len(shapes)
    return [torch.randn(*s, generator=g).to(DEVICE).requires_grad_(n) for s, n in zip(shapes, needs)]


@pytest.mark.parametrize("needs", [(True, True, True), (False, True, True), (True, False, False), (False, False, False)])
def test_a_matmul_op_counts_what_pytorch_counts_for_its_math(needs):
    from generated import matmul_bias_gelu

    inputs = tensors((48, 32), (32, 24), (24,), needs=needs)
    mine = counted(matmul_bias_gelu, inputs)
    assert mine == counted(lambda a, b, bias: F.gelu(a @ b + bias), inputs)
    assert mine == 2 * 48 * 24 * 32 * (1 + needs[0] + needs[1])


def test_a_batched_matmul_counts_each_matrix():
    from generated import bmm, bmm_bias_silu

    a, b = tensors((3, 16, 32), (3, 32, 8))
    assert counted(bmm, [a, b]) == counted(torch.matmul, [a, b]) == 3 * 2 * 16 * 8 * 32 * 3
    shared = tensors((4, 16, 32), (32, 8), (8,))  # one B for every matrix
    assert counted(bmm_bias_silu, shared) == counted(lambda a, b, c: F.silu(a @ b + c), shared)


def test_a_recomputed_accumulator_counts_as_the_product_it_is():
    # The registered op itself keeps no accumulator (its training variant does): its backward
    # multiplies A @ B again, and that product is counted.
    import generated  # noqa: F401 - registers the ops

    a, b, bias = tensors((48, 32), (32, 24), (24,))
    assert counted(torch.ops.generated.matmul_bias_gelu, [a, b, bias]) == 2 * 48 * 24 * 32 * 4


def test_pointwise_ops_and_reductions_count_none_as_pytorchs():
    from generated import scaled_silu_mul, softmax

    x, y = tensors((8, 64), (8, 64))
    assert counted(lambda a, b: scaled_silu_mul(a, b, alpha=2.0), [x, y]) == 0
    assert counted(softmax, [x]) == counted(lambda a: torch.softmax(a, -1), [x]) == 0
