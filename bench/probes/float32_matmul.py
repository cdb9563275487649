"""matmul_relu on float32 operands (its spec's `precision: ieee`, Triton's float32 dot) against
eager PyTorch's `relu(a @ b)` (cuBLAS's SGEMM, TF32 off as PyTorch's default), forward and a
training step (torch.autograd.grad of both operands), medians of do_bench. The benchmark's tables
time half precision only; this is the float32 side, which a training step of float32 weights meets.

    PYTHONPATH=. python3 bench/probes/float32_matmul.py
"""
import torch
import triton.testing as tt

from generated import matmul_relu
from tilegen.measure import settle_call_path


def main():
    settle_call_path(training=True)
    print(torch.cuda.get_device_name(), torch.__version__, "allow_tf32", torch.backends.cuda.matmul.allow_tf32)
    for m, n, k in ((4096, 1024, 1024), (4096, 4096, 4096), (16384, 4096, 4096)):
        a = torch.randn(m, k, device="cuda")
        b = torch.randn(k, n, device="cuda") / k ** 0.5
        f = 1e3 * tt.do_bench(lambda: matmul_relu(a, b), return_mode="median")
        e = 1e3 * tt.do_bench(lambda: torch.relu(a @ b), return_mode="median")
        al, bl = a.clone().requires_grad_(), b.clone().requires_grad_()
        g = torch.randn(m, n, device="cuda")
        fs = 1e3 * tt.do_bench(lambda: torch.autograd.grad(matmul_relu(al, bl), (al, bl), g), return_mode="median")
        es = 1e3 * tt.do_bench(lambda: torch.autograd.grad(torch.relu(al @ bl), (al, bl), g), return_mode="median")
        tf = 2 * m * n * k / f / 1e6
        print(f"{m}x{n}x{k} float32: forward tilegen {f:.1f} us ({tf:.1f} TFLOP/s), eager {e:.1f} us ({e / f:.2f}x); "
              f"training step tilegen {fs:.1f} us, eager {es:.1f} us ({es / fs:.2f}x)", flush=True)


if __name__ == "__main__":
    main()
