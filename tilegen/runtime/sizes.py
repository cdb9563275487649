"""Sizes that may be symbolic: a call traced with dynamic shapes (`torch.export` with a `Dim`,
`torch.compile(dynamic=True)`, or the automatic dynamic shapes of a recompile) hands the ops
SymInts for its sizes and strides.

A traced launch takes the sizes themselves, so its graph serves every size the trace stands for.
What the runtime chooses from sizes comes in two kinds:

- choices that only make a launch faster or slower (a config's key, a tile across the rows) read
  the size the trace was made with (`hint`), adding no guard: the graph keeps them for every size;
- choices a launch is wrong without (a mask left off, 32-bit offsets, a row held in one tile)
  are taken where they hold (`known`): under torch.export only where they hold for every size
  the exported graph must serve (a guard would narrow its Dims); under torch.compile with a
  guard, which a size that breaks recompiles (taken for every size, with every axis dynamic,
  they cost 1.6-4.4x on the H200: bench/results/h200/dynamic_shapes/).

Eager calls pass plain ints, for which both are the plain value.
"""

import torch

import torch._guards
import torch.fx.experimental.symbolic_shapes as _shapes
from torch.fx.experimental.symbolic_shapes import statically_known_true

# A traced size's value for optimization, read without a guard, where its node holds none (a
# size computed from others): optimization_hint from torch 2.12, hint_int before (which torch
# 2.11 warns about on every call, so that sizes read their node's hint first).
_hint = getattr(_shapes, "optimization_hint", None) or _shapes.hint_int


def hint(size):
    """`size` as an int: itself, or a traced size's example value, read without a guard."""
    if not isinstance(size, torch.SymInt):
        return int(size)
    example = getattr(size.node, "hint", None)
    return int(example) if example is not None else _hint(size)


def known(condition):
    """Whether `condition` holds: a plain bool as it is; a traced one under torch.compile as it
    does for the sizes traced, with a guard; elsewhere (torch.export, make_fx) only where it holds
    for every size the trace stands for, with no guard."""
    if not isinstance(condition, torch.SymBool):
        return bool(condition)
    if guarding():
        return bool(condition)  # (a guard: the compiled graph serves the sizes that keep it)
    return statically_known_true(condition)


def guarding():
    """Whether a traced size may be decided by a guard: under torch.compile, never under
    torch.export (a guard would narrow its Dims into an error) or a bare make_fx trace. A traced
    launch runs in Dynamo's trace and again in AOT autograd's (where Inductor takes a triton_op
    into its kernels); torch 2.11 says is_compiling() only in the first, so the second is told by
    the TracingContext that torch.compile holds around both."""
    if torch.compiler.is_exporting():
        return False
    return torch.compiler.is_compiling() or torch._guards.TracingContext.try_get() is not None


def same_shape(a, b):
    """Whether shapes `a` and `b` (tuples or torch.Size) are equal, comparing sizes only where the
    ranks agree: a tuple's == compares sizes before lengths, and a traced size compared with
    another adds a guard (a [B, 16] input beside a [16] bias: B != 16, which narrows an exported
    Dim into an error)."""
    return len(a) == len(b) and a == b


def symbolic(*sizes):
    """Whether any of `sizes` is a traced size."""
    return any(isinstance(s, torch.SymInt) for s in sizes)


def smaller(a, b):
    """min(a, b) with no guard where either is traced."""
    return torch.sym_min(a, b) if symbolic(a, b) else min(a, b)
