"""Training steps where not every input needs a gradient (the first layer's input, a frozen
weight): a backward computes only the gradients asked for (rt.Gradients' `selective`), as eager
PyTorch's do. A matmul's backward runs only the products asked for; a norm's skips a frozen
weight's (and bias's) column sums, an elementwise op's stores only the gradients asked for. Each
step (forward, then torch.autograd.grad of the inputs that require grad) beside eager autograd and
torch.compile of the same math, bfloat16.

    PYTHONPATH=. python3 bench/probes/selective_backward.py [matmul] [norms] [elementwise]
"""
import sys

import torch
import torch.nn.functional as F
import triton.testing

from generated import bias_gelu, layer_norm, matmul_bias_gelu, rms_norm
from tilegen.measure import settle_call_path

DTYPE = torch.bfloat16


def linear_gelu(a, b, bias):
    return F.gelu(a @ b + bias)


def eager_rms_norm(x, w):
    return F.rms_norm(x, (x.shape[-1],), w, 1e-6)


def eager_layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)


def eager_bias_gelu(x, bias):
    return F.gelu(x + bias)


# (op, eager math, the inputs' shapes at each size, which inputs require grad per case)
GROUPS = {
    "matmul": (matmul_bias_gelu, linear_gelu, [((m, k), (k, n), (n,)) for m, n, k in ((4096, 4096, 4096), (8192, 8192, 8192))],
               {"all": (True, True, True), "input frozen": (False, True, True), "weight frozen": (True, False, False)}),
    "norms": [
        (rms_norm, eager_rms_norm, [((r, n), (n,)) for r, n in ((16384, 1024), (4096, 4096), (512, 32768), (4096, 32768))],
         {"all": (True, True), "weight frozen": (True, False)}),
        (layer_norm, eager_layer_norm, [((r, n), (n,), (n,)) for r, n in ((16384, 1024), (4096, 4096), (512, 32768),
                                                                         (4096, 32768))],
         {"all": (True, True, True), "weight frozen": (True, False, False)}),
    ],
    "elementwise": (bias_gelu, eager_bias_gelu, [((m, n), (n,)) for m, n in ((4096, 4096), (16384, 8192))],
                    {"all": (True, True), "bias frozen": (True, False), "input frozen": (False, True)}),
}


def first(outputs):
    return outputs[0] if isinstance(outputs, tuple) else outputs


def step_of(fn, inputs):
    asked = [t for t in inputs if t.requires_grad]

    def step():
        c = first(fn(*inputs))
        return torch.autograd.grad(c, asked, torch.ones_like(c))
    return step


def bench(op, eager, sizes, cases):
    compiled = torch.compile(eager)
    for shapes in sizes:
        torch.manual_seed(0)
        base = [torch.randn(*shape, device="cuda", dtype=DTYPE) for shape in shapes]
        for case, needs in cases.items():
            inputs = [t.clone().requires_grad_(need) for t, need in zip(base, needs)]
            got, want = step_of(op, inputs)(), step_of(eager, inputs)()
            for g, w in zip(got, want):
                torch.testing.assert_close(g, w, rtol=2e-2, atol=2e-2 * w.abs().max().item())
            times = {name: triton.testing.do_bench(step_of(fn, inputs), return_mode="median")
                     for name, fn in (("tilegen", op), ("eager", eager), ("compile", compiled))}
            size = "x".join(str(d) for d in shapes[0])
            print(f"  {op.__name__} {size} {case:14s} tilegen {times['tilegen']:.3f}  eager {times['eager']:.3f}  "
                  f"compile {times['compile']:.3f}  eager/tilegen {times['eager'] / times['tilegen']:.2f}x  "
                  f"compile/tilegen {times['compile'] / times['tilegen']:.2f}x", flush=True)


def main():
    print(torch.cuda.get_device_name(), torch.__version__)
    settle_call_path(training=True)  # (the first steps were timed while the C++ autograd node was built)
    print("training step, ms (do_bench median); eager/tilegen and compile/tilegen above 1: tilegen faster")
    for name in sys.argv[1:] or ["matmul"]:
        group = GROUPS[name]
        for op, eager, sizes, cases in group if isinstance(group, list) else [group]:
            bench(op, eager, sizes, cases)


if __name__ == "__main__":
    main()
