"""tilegen: YAML specs in, tested and benchmarked Triton kernels out."""

__version__ = "0.1.0"
