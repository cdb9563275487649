"""Without a CUDA GPU, run kernels in Triton's interpreter on CPU tensors; and how many workers
`pytest -n auto` starts.

This runs before any test module imports a kernel: triton.jit reads TRITON_INTERPRET when a
kernel is defined, so the variable must be set before the generated package is imported.
"""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.hookimpl(optionalhook=True)  # (a hook of pytest-xdist's: without it, `-n` is not an option either)
def pytest_xdist_auto_num_workers(config):
    """`-n auto`: a worker a core the process may run on, 16 at most. On a GPU machine every
    worker holds a CUDA context and its own compiled kernels on the one GPU; 16 is what the GPU
    check runs (bench/h200_check.sh)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return min(cores, 16)
