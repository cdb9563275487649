"""What a stack of elementwise gates holds for its backward where the gate is frozen: each layer
is c = alpha * silu(a) * b (scaled_silu_mul) with `a` a frozen tensor (features computed without
grad, a fixed modulation) and `b` the activation that needs a gradient. b's gradient reads a
alone; b is read only for a's gradient, which no call asks for, so eager PyTorch's mul does not
keep it (it keeps alpha * silu(a), a tensor of its own, for b's gradient). Per case: the memory
held between the forward and the backward, above the inputs, the step's peak above them
(torch.cuda.max_memory_allocated) and its time, for tilegen, eager autograd and torch.compile of
the same math; then the backward op alone asked for b's gradient only (it reads a and the
incoming gradient, and no longer b), and for both; bfloat16.

    PYTHONPATH=. python3 bench/probes/frozen_gate_memory.py
"""
import torch
import torch.nn.functional as F
import triton.testing

from frozen_stack_memory import measure  # (this folder: held, peak and step time, as that probe takes them)
from generated import scaled_silu_mul
from tilegen.measure import settle_call_path

LAYERS, DTYPE, ALPHA = 4, torch.bfloat16, 0.5


def eager_gate(a, b):
    return ALPHA * F.silu(a) * b


def tilegen_gate(a, b):
    return scaled_silu_mul(a, b, alpha=ALPHA)


def stack(gate):
    def run(x, gates):
        for a in gates:
            x = gate(a, x)
        return x
    return run


def main():
    print(torch.cuda.get_device_name(), torch.__version__)
    settle_call_path(training=True)
    backward = torch.ops.generated.scaled_silu_mul_backward
    for m, n in ((8192, 2048), (16384, 4096)):
        print(f"{LAYERS} layers of scaled_silu_mul on [{m}, {n}]; the gates a frozen, the activation b requires grad")
        torch.manual_seed(0)
        x = torch.randn(m, n, device="cuda", dtype=DTYPE, requires_grad=True)
        gates = [torch.randn(m, n, device="cuda", dtype=DTYPE) for _ in range(LAYERS)]
        seed = torch.randn(m, n, device="cuda", dtype=DTYPE)
        measure("tilegen", stack(tilegen_gate), x, gates, seed)
        measure("eager", stack(eager_gate), x, gates, seed)
        measure("torch.compile", torch.compile(stack(eager_gate)), x, gates, seed)
        a, b = gates[0], x.detach()
        for needed in ([False, True], [True, True]):
            us = 1e3 * triton.testing.do_bench(lambda: backward(a, b, seed, ALPHA, needed), return_mode="median")
            print(f"  backward op, needed {needed}: {us:.1f} us", flush=True)


if __name__ == "__main__":
    main()
