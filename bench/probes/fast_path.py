"""Host time per call of the compiled call path (generated/_fastpath.py) against the wrapper's
Python path and PyTorch, for add (two inputs), scaled_silu_mul (a scalar), rms_scale_exp (two
outputs) and matmul_relu (64^3), on small tensors: 9 interleaved rounds of 1000-call batches,
medians. Each op's compiled result is checked against its Python-path result first.

    PYTHONPATH=. python3 bench/probes/fast_path.py
"""
import sys
import time
from types import SimpleNamespace

import torch
import torch.nn.functional as F

import generated as ops
from generated import _fastpath
from host_timing import interleaved_medians

# The Python path alone: a stand-in that serves nothing and learns nothing.
NO_FAST_PATH = SimpleNamespace(call=lambda *args: None, learn=lambda *args: False)


def python_path(op, fn):
    """fn() with the op's compiled call path swapped out."""
    module = sys.modules[f"generated.{op}"]

    def call():
        saved, module._FAST = module._FAST, NO_FAST_PATH
        try:
            return fn()
        finally:
            module._FAST = saved
    return module, call


start = time.perf_counter()
assert _fastpath.load(wait=True) is not None, _fastpath.UNAVAILABLE
print(f"compiled call path ready after {time.perf_counter() - start:.1f} s (built or found in the cache)")
print("triton", __import__("triton").__version__, "torch", torch.__version__, torch.cuda.get_device_name())

a, b = torch.randn(4096, device="cuda"), torch.randn(4096, device="cuda")
x, v = torch.randn(4096, device="cuda"), torch.rand(4096, device="cuda")
m, n = torch.randn(64, 64, device="cuda", dtype=torch.float16), torch.randn(64, 64, device="cuda", dtype=torch.float16)
cases = {
    "add": (lambda: ops.add(a, b), lambda: torch.add(a, b)),
    "scaled_silu_mul": (lambda: ops.scaled_silu_mul(a, b, alpha=0.5), lambda: 0.5 * F.silu(a) * b),
    "rms_scale_exp": (lambda: ops.rms_scale_exp(x, v), lambda: (x * torch.rsqrt(v + 1e-6), torch.exp(-x.abs()))),
    "matmul_relu": (lambda: ops.matmul_relu(m, n), lambda: torch.relu(torch.mm(m, n))),
}
arguments = {"add": (a, b), "scaled_silu_mul": (a, b, 0.5), "rms_scale_exp": (x, v, 1e-6), "matmul_relu": (m, n)}
callers = {}
for op, (fast, eager) in cases.items():
    module, slow = python_path(op, fast)
    fast(), fast()  # the first call learns, the second is served compiled
    hits = module._FAST.table.hits
    got, want = fast(), slow()
    assert module._FAST.table.hits == hits + 1, op  # served compiled
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        torch.testing.assert_close(g, w, atol=0, rtol=0)  # the very kernel and config: bit for bit
    table = module._FAST.table
    callers[f"{op}: compiled path"] = fast
    callers[f"{op}: Python path"] = slow
    callers[f"{op}: table alone"] = (lambda t, args: lambda: t(*args))(table, arguments[op])
    callers[f"{op}: torch"] = eager
for name, (median, least) in interleaved_medians(callers).items():
    print(f"{name:36} {median:6.2f} us (min {least:.2f})", flush=True)
