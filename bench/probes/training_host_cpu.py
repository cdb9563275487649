"""Host time of an eager training step through tilegen's autograd wrapper, on a CPU: the
compiled call path (GPU only) stood in by torch.add, so what remains is the Python around it
(the wrapper's checks, the autograd node: torch.autograd.Function's, or the C++ one of
TILEGEN_AUTOGRAD_NODE=1, built here), beside eager PyTorch's own step on the same tensors; then
cProfile of tilegen's steps through the C++ node.

    PYTHONPATH=. python3 bench/probes/training_host_cpu.py > OUT.txt

A step: add(a, b) on 16 float32 elements that require grad, then torch.autograd.grad. Eager's
step computes on the CPU too (16 elements: microseconds); the difference is host overhead.
"""

import cProfile
import os
import pstats
import sys
import time
from types import SimpleNamespace

os.environ["TRITON_INTERPRET"] = "1"  # (CPU tensors; nothing is launched here)

import torch  # noqa: E402

from generated import add  # noqa: E402
from tilegen.runtime import autograd, native  # noqa: E402

OP = sys.modules["generated.add"]._OP
# The call path serves calls without grad (the forward inside the autograd function) in C++;
# torch.add stands in for it. Calls it would refuse (inputs that require grad) go on.
OP.fast = lambda a, b: None if torch.is_grad_enabled() and (a.requires_grad or b.requires_grad) else torch.add(a, b)


def main():
    a, b = torch.randn(16, requires_grad=True), torch.randn(16, requires_grad=True)
    seed = torch.ones(16)

    def step(fn):
        torch.autograd.grad(fn(), (a, b), seed)

    node = native.load("autograd_node")
    stand_in = OP.fast

    def through(module):
        def call():
            autograd.native_module = lambda: module
            OP.fast = stand_in
            return add(a, b)
        return call

    # The call path itself serving the training call and attaching the node: its table, learned
    # with a plan of no programs (a launch that launches nothing: host time only; the outputs are
    # left unwritten).
    table = native.load("callpath").Table(lambda: 0, lambda device: 0, SimpleNamespace(launch_enter_hook=None,
                                                                                     launch_exit_hook=None))
    out = torch.empty(16)
    plan = native.load("callpath").prepare(1, 0, 1, 1, 32, 0, 0, "ppp", 3, ())
    assert table.learn((a.detach(), b.detach()), (a.detach(), b.detach(), out), plan, 0, out, 0)
    autograd.native_module = lambda: node
    table.formula = sys.modules["generated.add"]._OP.call_path.formula.node_formula()

    def served():
        OP.fast = table
        return add(a, b)

    steps = {"tilegen, torch.autograd.Function": through(None), "tilegen, C++ node": through(node),
             "tilegen, C++ node attached by the call path (no launch)": served, "eager": lambda: a + b}
    # One thread (the 16-element adds gain nothing from more), and the fastest of five rounds a
    # step, taking turns: the other core's load moves single rounds by 10% and more.
    torch.set_num_threads(1)
    best = dict.fromkeys(steps, float("inf"))
    for _ in range(5):
        for name, fn in steps.items():
            for _ in range(100):
                step(fn)
            start = time.perf_counter()
            for _ in range(2000):
                step(fn)
            best[name] = min(best[name], (time.perf_counter() - start) / 2000 * 1e6)
    for name, us in best.items():
        print(f"{name}: {us:.1f} us a step (fastest of 5 rounds of 2000; call path stood in)")
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(2000):
        step(steps["tilegen, C++ node attached by the call path (no launch)"])
    profiler.disable()
    pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(16)


if __name__ == "__main__":
    main()
