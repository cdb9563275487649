"""What a direct launch costs, layer by layer, for add's plan on 4096 floats: the plan as made by
rt.Launcher, the compiled kernel's run() called with the same arguments, and the pieces of the
plan around it. Prints the source of this Triton's launcher call, for a leaner path later."""
import inspect
import sys
import time

import torch
import triton

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
add(a, b)
plan = add_mod._CONFIGS.plans[add_mod._signature(a, b)]
print("triton", triton.__version__, "torch", torch.__version__)
cells = dict(zip(plan.__code__.co_freevars, (cell.cell_contents for cell in plan.__closure__ or ())))
run, function, packed, tail = cells.get("run"), cells.get("function"), cells.get("packed"), cells.get("tail", ())
grid = (cells.get("grid_x"), cells.get("grid_y"), cells.get("grid_z"))
stream = triton.runtime.driver.active.get_current_stream(0)
pieces = {
    "plan(a, b, c)": lambda: plan(a, b, c),
    "run(...) with tensors": lambda: run(*grid, stream, function, packed, None, None, None, a, b, c, *tail),
    "run(...) with addresses": lambda: run(*grid, stream, function, packed, None, None, None,
                                           a.data_ptr(), b.data_ptr(), c.data_ptr(), *tail),
    "get_current_stream": lambda: triton.runtime.driver.active.get_current_stream(0),
    "knobs hooks": lambda: (triton.knobs.runtime.launch_enter_hook, triton.knobs.runtime.launch_exit_hook),
    "torch.add": lambda: torch.add(a, b),
    "torch.add(out=)": lambda: torch.add(a, b, out=c),
}
for name, fn in pieces.items():
    print(f"{name:28} {per_call_us(fn):6.2f} us", flush=True)
torch.testing.assert_close(c, a + b)
print("tail", tail, "grid", grid)
print(inspect.getsource(type(run).__call__))
