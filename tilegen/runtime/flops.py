"""Matmul ops' FLOP counts for torch.utils.flop_counter.FlopCounterMode (what a training loop's
MFU accounting reads): 2*M*N*K a matrix product, as PyTorch counts its mm, bmm and addmm, and
none for an epilogue, an elementwise op or a reduction, as none for PyTorch's pointwise ops. Each
formula takes the op's arguments as FlopCounterMode hands them over: tensors as their shapes."""

import math

import torch


def product_flops(a_shape, b_shape):
    """2*M*N*K for each matrix of [..., M, K] @ [..., K, N], the batch axes broadcast."""
    *a_batch, m, k = a_shape
    *b_batch, _, n = b_shape
    return 2 * math.prod(torch.broadcast_shapes(tuple(a_batch), tuple(b_batch))) * m * n * k


def forward_flops(*args, out_shape=None, **kwargs):
    """A matmul op's (or its training variant's): A and B are its first two arguments."""
    return product_flops(args[0], args[1])


def backward_flops(acc_at, recomputes, products=True):
    """A matmul op's backward op (A and B first, the accumulator at `acc_at`, `needed` last):
    dA = dZ @ B^T and dB = A^T @ dZ for the gradients asked for, and A @ B again where the backward
    reads an accumulator it was not given (`recomputes`: the epilogue's gradient reads it). None
    where the operands get no gradient (`products` False: an epilogue that gives the accumulator none)."""
    def formula(*args, out_shape=None, **kwargs):
        if not products:
            return 0
        a_shape, b_shape, acc_shape, needed = args[0], args[1], args[acc_at], args[-1]
        count = int(needed[0]) + int(needed[1]) + int(recomputes and acc_shape is None)
        return count * product_flops(a_shape, b_shape)
    return formula
