"""Generated ops in an AOTInductor package: exported, compiled ahead of time into a .pt2 with their
Triton kernels, loaded back and run without the Python wrappers. One op of each kind, at the
shapes they were exported with."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="AOTInductor compiles the ops' Triton kernels for a GPU")


def packaged(model, args, tmp_path):
    """`model` exported on `args`, compiled by AOTInductor into a package and loaded back."""
    exported = torch.export.export(model, args)
    path = torch._inductor.aoti_compile_and_package(exported, package_path=str(tmp_path / "model.pt2"))
    return torch._inductor.aoti_load_package(path)


def randn(*shape, dtype=torch.float16, seed=0):
    return torch.randn(shape, dtype=dtype, device="cuda", generator=torch.Generator("cuda").manual_seed(seed))


class Block(torch.nn.Module):
    """A matmul with a fused epilogue, an elementwise op and a row reduction (over the channels:
    dim=1), composed with PyTorch ops."""

    def forward(self, x, w, bias, gain, norm_w, norm_b):
        from generated import bias_gelu, layer_norm, matmul_relu

        h = matmul_relu(x, w)
        h = bias_gelu(h, bias) * gain
        y, _, _ = layer_norm(h.unflatten(0, (4, -1)), norm_w, norm_b, dim=1)
        return y.sum(1)


def test_a_model_of_generated_ops_runs_from_an_aot_inductor_package(tmp_path):
    args = (randn(256, 512), randn(512, 384, seed=1), randn(384, seed=2), randn(384, seed=3),
            randn(64, seed=4), randn(64, seed=5))
    model = Block()
    want = model(*args)
    loaded = packaged(model, args, tmp_path)
    got = loaded(*args)
    torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2)
    fresh = tuple(randn(*a.shape, seed=10 + i) for i, a in enumerate(args))
    torch.testing.assert_close(loaded(*fresh), model(*fresh), atol=2e-2, rtol=2e-2)
