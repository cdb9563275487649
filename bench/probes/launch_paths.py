"""What a direct launch costs, layer by layer, for add's plan on 4096 floats: the plan as made by
rt.Launcher (through torch's static launcher where it applies) and one on Triton's launcher, the
compiled kernel's run() and the static launch called alone, and the pieces around them. Prints
the source of this Triton's launcher call."""
import os
import inspect
import sys

# The times here are of launch plans: the compiled call path (_fastpath.py) stays off.
os.environ.setdefault("TILEGEN_FAST_PATH", "0")

import torch
import triton

from generated import add
import host_timing

add_mod = sys.modules["generated.add"]


def per_call_us(fn, calls=20000):
    return host_timing.per_call_us(fn, calls, warmup=500)


a = torch.randn(4096, device="cuda")
b = torch.randn(4096, device="cuda")
c = torch.empty_like(a)
add(a, b)
signature = add_mod._signature(a, b)
plan = add_mod._CONFIGS.plans[signature]
print("triton", triton.__version__, "torch", torch.__version__)
launcher = add_mod._LAUNCH_FLAT
print("static launcher in use:", bool(getattr(launcher, "static_plans", 0)))
triton_plan = plan
if getattr(launcher, "static_plans", 0):  # a plan on Triton's launcher beside the static one
    launcher.static = False
    add_mod._CONFIGS.plans.clear()
    add(a, b)
    triton_plan = add_mod._CONFIGS.plans[signature]
    launcher.static = True
    add_mod._CONFIGS.plans[signature] = plan  # add(a, b) below takes the static plan again


def closure(fn):
    return dict(zip(fn.__code__.co_freevars, (cell.cell_contents for cell in fn.__closure__ or ())))


cells = closure(triton_plan)
run, function, packed, tail = cells.get("run"), cells.get("function"), cells.get("packed"), cells.get("tail", ())
grid = (cells.get("grid_x"), cells.get("grid_y"), cells.get("grid_z"))
stream = triton.runtime.driver.active.get_current_stream(0)
static = closure(plan)
if static.get("codes") is not None:
    static_call = (static["function"], *grid, static["warps"], static["shared"], static["codes"])
    launch_static, static_tail = static["launch_static"], static["tail_args"]
pieces = {
    "plan(a, b, c)": lambda: plan(a, b, c),
    "plan, Triton's launcher": lambda: triton_plan(a, b, c),
    "add(a, b)": lambda: add(a, b),
    "run(...) with tensors": lambda: run(*grid, stream, function, packed, None, None, None, a, b, c, *tail),
    "run(...) with addresses": lambda: run(*grid, stream, function, packed, None, None, None,
                                           a.data_ptr(), b.data_ptr(), c.data_ptr(), *tail),
    "get_current_stream": lambda: triton.runtime.driver.active.get_current_stream(0),
    "knobs hooks": lambda: (triton.knobs.runtime.launch_enter_hook, triton.knobs.runtime.launch_exit_hook),
    "torch.add": lambda: torch.add(a, b),
    "torch.add(out=)": lambda: torch.add(a, b, out=c),
}
if static.get("codes") is not None:
    pieces["static launch, tensors"] = lambda: launch_static(*static_call, (a, b, c, *static_tail), stream)
    pieces["static launch, addresses"] = lambda: launch_static(
        *static_call, (a.data_ptr(), b.data_ptr(), c.data_ptr(), *static_tail), stream)
for name, fn in pieces.items():
    print(f"{name:28} {per_call_us(fn):6.2f} us", flush=True)
torch.testing.assert_close(c, a + b)
print("tail", tail, "grid", grid)
print(inspect.getsource(type(run).__call__))
