"""Host time per call with plans on the native launcher (generated/_native.py) against plans on
torch's static launcher, beside PyTorch's own call, on each op's bench input for host time
(SMALL_SHAPE, first dtype). The two kinds of plan are made once each, checked to give the same
result, then swapped in turn into the op's plan cache: batches of 1000 calls rotate over the
three callers for 9 rounds, and each prints its median batch (as `tilegen bench` times host
work). Then the launch calls alone, on add's plan: native launch against static launch, and each
plan as a whole (the native plan is a _native.Launch: device, hook and stream checks in C)."""
import os
import importlib
import statistics
import sys

# The times here are of launch plans: the compiled call path (_fastpath.py) stays off.
os.environ.setdefault("TILEGEN_FAST_PATH", "0")

import torch
import triton

import generated  # noqa: F401  (loads the ops)
from generated import _native
import host_timing

rt = sys.modules["generated._runtime"]
ROUNDS, CALLS = 9, 1000


def per_call_us(fn, calls=CALLS):
    return host_timing.per_call_us(fn, calls, warmup=0)


def launchers(module):
    return [v for v in vars(module).values() if isinstance(v, rt.Launcher)]


def plan_of(module, call, native):
    """Make the op's plan for `call` with the native launcher on or off; return (plan cache, result)."""
    module._CONFIGS.plans = {}
    for launcher in launchers(module):
        launcher.native = native
    first = call()
    second = call()  # through the plan
    torch.cuda.synchronize()
    torch.testing.assert_close(first, second, atol=0, rtol=0)
    return dict(module._CONFIGS.plans), second


print("triton", triton.__version__, "torch", torch.__version__, "native:", _native.load() is not None,
      _native.UNAVAILABLE or "")
for op in ("add", "scaled_silu_mul", "matmul", "matmul_relu"):
    module = sys.modules[f"generated.{op}"]
    bench = importlib.import_module(f"generated.bench.bench_{op}")
    inputs = bench.make_inputs(bench.SMALL_SHAPE, bench.DTYPES[0])
    call = lambda: bench.run_tilegen(inputs)  # noqa: E731
    native_plans, native_out = plan_of(module, call, True)
    static_plans, static_out = plan_of(module, call, False)
    torch.testing.assert_close(native_out, static_out, atol=0, rtol=0)
    counts = [(launcher.native_plans, launcher.static_plans) for launcher in launchers(module)]

    def with_plans(plans):
        def run():
            module._CONFIGS.plans = plans
            return per_call_us(call)
        return run

    callers = {"native plans": with_plans(native_plans), "static plans": with_plans(static_plans),
               "torch": lambda: per_call_us(lambda: bench.run_torch(inputs))}
    for fn in callers.values():  # warm up
        fn()
    samples = {name: [] for name in callers}
    for turn in range(ROUNDS):
        order = list(callers) if turn % 2 == 0 else list(reversed(callers))
        for name in order:
            samples[name].append(callers[name]())
    line = "  ".join(f"{name} {statistics.median(values):6.2f}" for name, values in samples.items())
    print(f"{op:16} {str(bench.SMALL_SHAPE):16} {line}   (plans native/static per launcher: {counts})", flush=True)
    module._CONFIGS.plans = native_plans

# The launch calls alone, on add's plan for 4096 floats.
add_mod = sys.modules["generated.add"]
a, b = torch.randn(4096, device="cuda"), torch.randn(4096, device="cuda")
c = torch.empty_like(a)
native_plans, _ = plan_of(add_mod, lambda: add_mod.add(a, b), True)
static_plans, _ = plan_of(add_mod, lambda: add_mod.add(a, b), False)


def cells(fn):
    return dict(zip(fn.__code__.co_freevars, (cell.cell_contents for cell in fn.__closure__ or ())))


native_plan = next(iter(native_plans.values()))  # a _native.Launch
static_cells = cells(next(iter(static_plans.values())))
stream = triton.runtime.driver.active.get_current_stream(0)
prepared, launch = native_plan.plan, _native.load().launch
grid = (static_cells["grid_x"], static_cells["grid_y"], static_cells["grid_z"])
static_head = (static_cells["function"], *grid, static_cells["warps"], static_cells["shared"], static_cells["codes"])
static_tail, launch_static = static_cells["tail_args"], static_cells["launch_static"]
addresses = (a.data_ptr(), b.data_ptr(), c.data_ptr())
print("native plan:", _native.load().describe(prepared))
pieces = {
    "native launch, tensors": lambda: launch(prepared, stream, a, b, c),
    "native launch, addresses": lambda: launch(prepared, stream, *addresses),
    "static launch, addresses": lambda: launch_static(*static_head, (*addresses, *static_tail), stream),
    "native plan(a, b, c)": lambda: native_plan(a, b, c),
    "static plan(a, b, c)": lambda: next(iter(static_plans.values()))(a, b, c),
    "torch.add(a, b, out=c)": lambda: torch.add(a, b, out=c),
}
samples = {name: [] for name in pieces}
for turn in range(ROUNDS):
    for name in (list(pieces) if turn % 2 == 0 else list(reversed(pieces))):
        samples[name].append(per_call_us(pieces[name], 5000))
for name, values in samples.items():
    print(f"{name:28} {statistics.median(values):6.2f} us (min {min(values):.2f})", flush=True)
