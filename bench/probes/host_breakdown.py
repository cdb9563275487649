"""Where add's host time goes on the hot path: each piece timed alone on the GPU machine,
beside torch.add and torch.empty_like (not yet run; for the next GPU session)."""
import sys
import time

import torch

from generated import add

add_mod = sys.modules["generated.add"]


def per_call_us(fn, calls=20000):
    for _ in range(500):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / calls * 1e6


a = torch.randn(4096, device="cuda")
b = torch.randn(4096, device="cuda")
c = torch.empty_like(a)
add(a, b)  # leaves the plan
signature = add_mod._signature(a, b)
plan = add_mod._CONFIGS.plans[signature]
pieces = {
    "add (whole hot path)": lambda: add(a, b),
    "add(out=c)": lambda: add(a, b, out=c),
    "_signature": lambda: add_mod._signature(a, b),
    "plans.get": lambda: add_mod._CONFIGS.plans.get(signature),
    "a.new_empty": lambda: a.new_empty(a.shape),
    "plan(a, b, c)": lambda: plan(a, b, c),
    "torch.cuda.current_device": torch.cuda.current_device,
    "torch.add": lambda: torch.add(a, b),
    "torch.add(out=)": lambda: torch.add(a, b, out=c),
    "torch.empty_like": lambda: torch.empty_like(a),
}
for name, fn in pieces.items():
    print(f"{name:28} {per_call_us(fn):6.2f} us", flush=True)
