"""A matmul op's training step where not every input needs a gradient (the first layer's input, a
frozen weight): its backward runs only the products asked for (rt.Gradients' `selective`), as
eager PyTorch's mm backward does. Each step (forward, then torch.autograd.grad of the inputs that
require grad) beside eager autograd and torch.compile of the same math, bfloat16.

    PYTHONPATH=. python3 bench/probes/selective_backward.py
"""
import torch
import torch.nn.functional as F
import triton.testing

from generated import matmul_bias_gelu
from tilegen.measure import settle_call_path

DTYPE = torch.bfloat16
# Which of (a, b, bias) require grad: all, the first layer's (no input gradient), a frozen weight.
CASES = {"all": (True, True, True), "input frozen": (False, True, True), "weight frozen": (True, False, False)}


def eager(a, b, bias):
    return F.gelu(a @ b + bias)


def step_of(fn, inputs):
    asked = [t for t in inputs if t.requires_grad]

    def step():
        c = fn(*inputs)
        return torch.autograd.grad(c, asked, torch.ones_like(c))
    return step


def main():
    print(torch.cuda.get_device_name(), torch.__version__)
    settle_call_path(training=True)  # (the first steps were timed while the C++ autograd node was built)
    print("training step, ms (do_bench median); eager/tilegen and compile/tilegen above 1: tilegen faster")
    compiled = torch.compile(eager)
    for m, n, k in ((4096, 4096, 4096), (8192, 8192, 8192)):
        torch.manual_seed(0)
        base = [torch.randn(*shape, device="cuda", dtype=DTYPE) for shape in ((m, k), (k, n), (n,))]
        for case, needs in CASES.items():
            inputs = [t.clone().requires_grad_(need) for t, need in zip(base, needs)]
            got, want = step_of(matmul_bias_gelu, inputs)(), step_of(eager, inputs)()
            for g, w in zip(got, want):
                torch.testing.assert_close(g, w, rtol=2e-2, atol=2e-2 * w.abs().max().item())
            times = {name: triton.testing.do_bench(step_of(fn, inputs), return_mode="median")
                     for name, fn in (("tilegen", matmul_bias_gelu), ("eager", eager), ("compile", compiled))}
            print(f"  {m}x{n}x{k} {case:14s} tilegen {times['tilegen']:.3f}  eager {times['eager']:.3f}  "
                  f"compile {times['compile']:.3f}  eager/tilegen {times['eager'] / times['tilegen']:.2f}x  "
                  f"compile/tilegen {times['compile'] / times['tilegen']:.2f}x")


if __name__ == "__main__":
    main()
