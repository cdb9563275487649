"""Generated ops in an AOTInductor package: a model exported, compiled ahead of time into a .pt2,
loaded back and run without the Python wrappers, at fresh inputs of the shapes it was exported
with. On a GPU the ops' Triton kernels are compiled into the package; in Triton's interpreter the
ops are custom ops, which the package calls back through AOTInductor's proxy executor.

Each package is made and run in a process of its own (this file, run as a script), so that a crash
fails one test rather than taking the worker along. A model of PyTorch's ops alone goes first:
where AOTInductor cannot load even that package, the test skips and says so (torch 2.11's CUDA
packages crash in the loader's own device-string parsing on the GPU image:
bench/results/h200/aoti_load/)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent  # (also run as a script, which imports no conftest)

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
DTYPE = torch.float16 if DEVICE == "cuda" else torch.float32  # (the interpreter runs no float16 products fast)


class Block(torch.nn.Module):
    """A matmul with a fused epilogue, an elementwise op with a broadcast bias and a row reduction
    over the channels (dim=1), composed with PyTorch's ops."""

    def forward(self, x, w, bias, gain, norm_w, norm_b):
        from generated import bias_gelu, layer_norm, matmul_relu

        h = matmul_relu(x, w)
        h = bias_gelu(h, bias) * gain
        y, _, _ = layer_norm(h.unflatten(0, (4, -1)), norm_w, norm_b, dim=1)
        return y.sum(1)


class PyTorchOnly(torch.nn.Module):
    """The same shapes through PyTorch's ops alone: whether AOTInductor works here at all."""

    def forward(self, x, w, bias, gain, norm_w, norm_b):
        h = torch.nn.functional.gelu(torch.relu(x @ w) + bias) * gain
        h = h.unflatten(0, (4, -1)).movedim(1, -1)
        return torch.nn.functional.layer_norm(h, norm_w.shape, norm_w, norm_b).movedim(-1, 1).sum(1)


def sample(seed):
    g = torch.Generator(DEVICE).manual_seed(seed)
    shapes = [(64, 32), (32, 48), (48,), (48,), (16,), (16,)]  # 64 rows: 4 x 16 channels
    return tuple(torch.randn(s, dtype=DTYPE, device=DEVICE, generator=g) for s in shapes)


def package_and_run(which, folder):
    """Export `which` model, package it, load it back and compare it with the model at new inputs."""
    model = {"pytorch": PyTorchOnly, "generated": Block}[which]()
    exported = torch.export.export(model, sample(0))
    path = torch._inductor.aoti_compile_and_package(exported, package_path=f"{folder}/{which}.pt2")
    loaded = torch._inductor.aoti_load_package(path)
    for seed in (0, 1):
        args = sample(seed)
        torch.testing.assert_close(loaded(*args), model(*args), atol=2e-2, rtol=2e-2)
    print("ran from its package")


def run_packaged(which, folder):
    return subprocess.run([sys.executable, __file__, which, str(folder)], cwd=REPO, capture_output=True, text=True,
                          timeout=600)


def test_a_model_of_generated_ops_runs_from_an_aot_inductor_package(tmp_path):
    control = run_packaged("pytorch", tmp_path)
    if control.returncode != 0:
        pytest.skip(f"AOTInductor cannot run a package of PyTorch's ops alone here (exit {control.returncode}: "
                    f"{(control.stderr.strip().splitlines() or ['no output'])[-1][:200]})")
    ours = run_packaged("generated", tmp_path)
    assert ours.returncode == 0 and "ran from its package" in ours.stdout, ours.stdout + ours.stderr[-3000:]


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    package_and_run(sys.argv[1], sys.argv[2])
