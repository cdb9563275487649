"""A gradient penalty through generated ops: the gradient of a loss by the input, taken with
create_graph=True, its squared norm then differentiated by the weights (as WGAN-GP's penalty and
input-gradient regularizers are), through rms_norm, matmul_relu, scaled_silu_mul and softmax. The backward under create_graph runs the op's derived math in
PyTorch's ops (`_<op>_backward_in_torch`), not its kernel; this measures what that costs against
the same math written in eager PyTorch, and checks both agree. torch.compile of the eager math is
tried too (its AOT autograd takes no double backward: the error is printed).

Per case (x [rows, n], a norm's weight w [n] and a matrix m [n, n], all requiring grad): the
step's median time by do_bench, the first-order step's beside it (no create_graph: the kernels'
backward), and how far each side's penalty gradients are from eager's in float64 (largest
difference, relative to the largest element).

    PYTHONPATH=. python3 bench/probes/second_derivative.py
"""
import torch
import torch.nn.functional as F
import triton.testing

from generated import matmul_relu, rms_norm, scaled_silu_mul, softmax
from tilegen.measure import settle_call_path


def eager_block(x, w, m):
    return torch.softmax(F.silu(F.rms_norm(x, (x.shape[-1],), w, 1e-6)) * torch.relu(x @ m), -1)


def tilegen_block(x, w, m):
    return softmax(scaled_silu_mul(rms_norm(x, w, eps=1e-6)[0], matmul_relu(x, m)))


def penalty_step(block, x, w, m, target):
    """The weights' gradients of the squared norm of the input's gradient of a loss."""
    (dx,) = torch.autograd.grad((block(x, w, m) * target).sum(), x, create_graph=True)
    return torch.autograd.grad(dx.square().sum(), (w, m))


def plain_step(block, x, w, m, target):
    """The first-order step, for scale: the gradients of the loss itself."""
    return torch.autograd.grad((block(x, w, m) * target).sum(), (x, w, m))


def main():
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    settle_call_path(training=True)
    for rows, n in ((4096, 1024), (16384, 4096)):
        for dtype in (torch.bfloat16, torch.float32):
            torch.manual_seed(0)
            x = torch.randn(rows, n, device="cuda", dtype=dtype, requires_grad=True)
            w = torch.randn(n, device="cuda", dtype=dtype, requires_grad=True)
            m = (torch.randn(n, n, device="cuda", dtype=dtype) / n ** 0.5).requires_grad_()
            target = torch.randn(rows, n, device="cuda", dtype=dtype)
            ours, theirs = penalty_step(tilegen_block, x, w, m, target), penalty_step(eager_block, x, w, m, target)
            exact = penalty_step(eager_block, *(t.detach().double().requires_grad_() for t in (x, w, m)), target.double())
            ours_off, theirs_off = (max((p.double() - q).abs().max().item() / q.abs().max().item() for p, q in zip(got, exact))
                                    for got in (ours, theirs))
            times = {name: 1e3 * triton.testing.do_bench(lambda: step(block, x, w, m, target), return_mode="median")
                     for name, step, block in (("tilegen penalty", penalty_step, tilegen_block),
                                               ("eager penalty", penalty_step, eager_block),
                                               ("tilegen first-order", plain_step, tilegen_block),
                                               ("eager first-order", plain_step, eager_block))}
            line = ", ".join(f"{name} {us:.1f} us" for name, us in times.items())
            print(f"[{rows}, {n}] {str(dtype)[6:]}: {line}; the penalty's gradients off float64 eager's by "
                  f"{ours_off:.2e} (tilegen), {theirs_off:.2e} (eager) of their largest", flush=True)
    x = torch.randn(64, 256, device="cuda", requires_grad=True)
    w = torch.randn(256, device="cuda", requires_grad=True)
    m = torch.randn(256, 256, device="cuda", requires_grad=True)
    try:
        penalty_step(torch.compile(eager_block), x, w, m, torch.randn(64, 256, device="cuda"))
        print("torch.compile of the eager block: the penalty ran")
    except Exception as exc:  # (its error, as a user meets it)
        print(f"torch.compile of the eager block: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")


if __name__ == "__main__":
    main()
