"""The memory a stack of frozen linear+GELU layers holds for its backward, where only the input
needs a gradient (prompt tuning, an input's saliency, the frozen base of an adapter): each layer's
backward reads its weight for dA and its pre-activation for gelu's gradient; its input (an
activation) is read for dB alone, which a frozen weight never asks for, so eager PyTorch's mm does
not keep it. Per case: the memory held between the forward and the backward, above the inputs and
weights, and the step's peak above them (torch.cuda.max_memory_allocated), and its time, for
tilegen's matmul_bias_gelu, eager autograd and torch.compile of the same math; bfloat16.

    PYTHONPATH=. python3 bench/probes/frozen_stack_memory.py
"""
import torch
import torch.nn.functional as F
import triton.testing

from generated import matmul_bias_gelu
from tilegen.measure import settle_call_path

LAYERS, DTYPE = 4, torch.bfloat16


def eager_layer(x, w, b):
    return F.gelu(x @ w + b)


def stack(layer):
    def run(x, weights):
        for w, b in weights:
            x = layer(x, w, b)
        return x
    return run


def measure(name, run, x, weights, seed):
    def step():
        return torch.autograd.grad(run(x, weights), [x], seed)

    for _ in range(3):  # (warm: compiled, learned by the call path)
        step()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    y = run(x, weights)
    torch.cuda.synchronize()
    held = torch.cuda.memory_allocated() - base
    del y
    torch.cuda.reset_peak_memory_stats()
    step()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    ms = triton.testing.do_bench(step, return_mode="median")
    print(f"  {name:<14} held {held / 2**20:8.1f} MiB   peak {peak / 2**20:8.1f} MiB   step {ms:.3f} ms", flush=True)


def main():
    print(torch.cuda.get_device_name(), torch.__version__)
    settle_call_path(training=True)
    for m, k in ((8192, 4096), (16384, 2048)):
        print(f"{LAYERS} layers of [{m}, {k}] x [{k}, {k}] + bias, GELU; weights frozen, the input requires grad")
        torch.manual_seed(0)
        x = torch.randn(m, k, device="cuda", dtype=DTYPE, requires_grad=True)
        weights = [(torch.randn(k, k, device="cuda", dtype=DTYPE) / k ** 0.5, torch.randn(k, device="cuda", dtype=DTYPE))
                   for _ in range(LAYERS)]
        seed = torch.randn(m, k, device="cuda", dtype=DTYPE)
        measure("tilegen", stack(matmul_bias_gelu), x, weights, seed)
        measure("eager", stack(eager_layer), x, weights, seed)
        measure("torch.compile", torch.compile(stack(eager_layer)), x, weights, seed)


if __name__ == "__main__":
    main()
