"""A matmul op inside torch.autocast (runtime/amp.py): the host time a call pays for the region's
check and casts, and a training step on float32 leaves in a bfloat16 region beside the eager
composition autocast runs (F.linear then GELU) and its torch.compile.

    PYTHONPATH=. python3 bench/probes/autocast_step.py
"""
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import triton.testing

sys.path.insert(0, str(Path(__file__).resolve().parent))
from host_timing import interleaved_medians  # noqa: E402

from generated import matmul_bias_gelu  # noqa: E402

HALF = torch.bfloat16


def eager(a, b, bias):
    return F.gelu(F.linear(a, b.t(), bias))  # autocast casts all three, as the op does


def leaves(m, n, k, dtype=torch.float32):
    torch.manual_seed(0)
    return [torch.randn(*shape, device="cuda", dtype=dtype).requires_grad_() for shape in ((m, k), (k, n), (n,))]


def host():
    print("host time a call (us, median of 9 rounds of 1000 calls), 256x256x256:")
    a, b, bias = (t.detach() for t in leaves(256, 256, 256, HALF))
    a32, b32, bias32 = (t.detach() for t in leaves(256, 256, 256))
    outside = interleaved_medians({"op, bfloat16 inputs, no region": lambda: matmul_bias_gelu(a, b, bias),
                                   "eager, bfloat16 inputs, no region": lambda: eager(a, b, bias)})
    with torch.autocast("cuda", dtype=HALF):
        inside = interleaved_medians({"op, bfloat16 inputs, in a region": lambda: matmul_bias_gelu(a, b, bias),
                                      "op, float32 inputs, in a region (3 casts)":
                                          lambda: matmul_bias_gelu(a32, b32, bias32),
                                      "eager, float32 inputs, in a region (3 casts)": lambda: eager(a32, b32, bias32)})
    for name, (median, least) in {**outside, **inside}.items():
        print(f"  {name:48s} {median:7.2f} (min {least:.2f})")


def step_of(fn):
    def step(a, b, bias):
        with torch.autocast("cuda", dtype=HALF):
            c = fn(a, b, bias)
        return torch.autograd.grad(c, (a, b, bias), torch.ones_like(c))
    return step


def steps():
    print("training step on float32 leaves in a bfloat16 region: ms (do_bench median), peak MiB above the inputs")
    compiled = torch.compile(eager)
    for m, n, k in ((1024, 1024, 1024), (4096, 4096, 4096), (8192, 4096, 4096)):
        a, b, bias = leaves(m, n, k)
        got = step_of(matmul_bias_gelu)(a, b, bias)
        want = step_of(eager)(a, b, bias)
        for g, w in zip(got, want):  # the same math in bfloat16: agree to its rounding
            torch.testing.assert_close(g, w, rtol=2e-2, atol=2e-2 * w.abs().max().item())
        row = []
        for name, fn in (("tilegen", matmul_bias_gelu), ("eager", eager), ("compile", compiled)):
            step = step_of(fn)
            step(a, b, bias)
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            step(a, b, bias)
            peak = (torch.cuda.max_memory_allocated() - base) / 2**20
            ms = triton.testing.do_bench(lambda: step(a, b, bias), return_mode="median")
            row.append((name, ms, peak))
        mine = row[0][1]
        print(f"  {m}x{n}x{k}: " + ", ".join(f"{name} {ms:.3f} ms {peak:.0f} MiB" for name, ms, peak in row)
              + f"; eager/tilegen {row[1][1] / mine:.2f}x, compile/tilegen {row[2][1] / mine:.2f}x")
        # The same step on bfloat16 leaves, no region: what the kernels take without the casts.
        half = [t.detach().to(HALF).requires_grad_() for t in (a, b, bias)]
        plain = [triton.testing.do_bench(lambda: plain_step(fn, half), return_mode="median")
                 for fn in (matmul_bias_gelu, eager)]
        print(f"    bfloat16 leaves, no region: tilegen {plain[0]:.3f} ms, eager {plain[1]:.3f} ms "
              f"({plain[1] / plain[0]:.2f}x)")


def plain_step(fn, inputs):
    c = fn(*inputs)
    return torch.autograd.grad(c, inputs, torch.ones_like(c))


if __name__ == "__main__":
    print(torch.cuda.get_device_name(), torch.__version__)
    host()
    steps()
