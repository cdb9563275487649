"""Without a CUDA GPU, run kernels in Triton's interpreter on CPU tensors.

This runs before any test module imports a kernel: triton.jit reads TRITON_INTERPRET when a
kernel is defined, so the variable must be set before the generated package is imported.
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
