"""Sizes past 32-bit offsets, compiled on a GPU (skipped elsewhere: they need ~15 GB of GPU memory)."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_properties(0).total_memory < 40 * 2**30,
    reason="needs a CUDA GPU with 40 GB or more")


def test_elementwise_past_2_31_elements():
    from generated import add

    n = 2**31 + 4099
    a = torch.randn(n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, device="cuda", dtype=torch.float16)
    c = add(a, b)
    assert torch.equal(c, a + b)
    # Strided: every other element of a longer buffer reaches past 2**32 elements.
    wide = torch.randn(2 * (2**31 + 5), device="cuda", dtype=torch.float16)
    x = wide[::2]
    assert torch.equal(add(x, x), x + x)


def test_matmul_offsets_past_int32():
    from generated import matmul_relu

    m, k, n = 70000, 32768, 64  # A has 2.3e9 elements: row offsets overflow int32
    a = torch.randn(m, k, device="cuda", dtype=torch.float16) * k**-0.25
    b = torch.randn(k, n, device="cuda", dtype=torch.float16) * k**-0.25
    c = matmul_relu(a, b)
    want = torch.relu(a @ b)
    for rows in (slice(0, 64), slice(m // 2, m // 2 + 64), slice(m - 64, m)):
        torch.testing.assert_close(c[rows], want[rows], atol=2e-2, rtol=2e-2)


def test_batched_matmul_offsets_past_int32():
    # Matrices of a batch that does not fold (b batched too): matrix 40's first element lies past
    # 2**31 in A, whose batch offsets then run in 64 bits.
    from generated import bmm

    batch, m, k, n = 41, 8192, 8192, 64
    a = torch.randn(batch, m, k, device="cuda", dtype=torch.float16) * k**-0.25  # 2.75e9 elements
    b = torch.randn(batch, k, n, device="cuda", dtype=torch.float16) * k**-0.25
    c = bmm(a, b)
    for index in (0, batch // 2, batch - 1):
        torch.testing.assert_close(c[index, -64:], a[index, -64:] @ b[index], atol=2e-2, rtol=2e-2)


def test_reduction_rows_past_int32():
    from generated import rms_norm, softmax

    rows, n = 2**31 // 4096 + 3, 4096  # 2^31 + 12288 elements: row offsets overflow int32
    x = torch.randn(rows, n, device="cuda", dtype=torch.float16)
    w = torch.randn(n, device="cuda", dtype=torch.float16)
    y, _ = rms_norm(x, w, eps=1e-6)
    for part in (slice(0, 64), slice(rows - 64, rows)):
        want = torch.nn.functional.rms_norm(x[part].float(), (n,), w.float(), 1e-6)
        torch.testing.assert_close(y[part].float(), want, atol=2e-2, rtol=2e-2)
    # Elements of a row 2^19 apart (a transposed input): offsets along the row pass 2^31 too.
    t = torch.randn(n, 2**19, device="cuda", dtype=torch.float16).t()
    got = softmax(t)
    torch.testing.assert_close(got[:64].float(), torch.softmax(t[:64].float(), -1), atol=1e-3, rtol=1e-3)
