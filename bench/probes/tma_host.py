"""Where a call through tensor descriptors spends its host time (about 28 us more than through
pointers, edge_ab.txt), and what a launch with its descriptors encoded once would cost. For the
matmul TMA config at 1000^3, us per call: the whole call, the two TensorDescriptor.from_tensor,
Triton 3.6's per-launch encoding of each descriptor (make_tensordesc_arg -> fill_tma_descriptor),
the plan's launch through Triton's launcher, and Triton's C launcher called directly with the
expanded arguments made once (what a cache of encoded descriptors per address would leave).
Checks the direct launch's result. Triton 3.6 internals: prints what it cannot find and stops.
"""
import os
import sys

# The times here are of launch plans: the compiled call path (_fastpath.py) stays off.
os.environ.setdefault("TILEGEN_FAST_PATH", "0")

import torch

import generated  # noqa: F401
import host_timing

mm = sys.modules["generated.matmul"]
rt = sys.modules["generated._runtime"]


def closure(fn):
    return dict(zip(fn.__code__.co_freevars, (cell.cell_contents for cell in fn.__closure__ or ())))


def per_call_us(fn, calls=5000):
    return host_timing.per_call_us(fn, calls, warmup=100)


M = N = K = 1000
a = torch.randn(M, K, device="cuda", dtype=torch.float16) * K ** -0.25
b = torch.randn(K, N, device="cuda", dtype=torch.float16) * K ** -0.25
config = dict(BM=64, BN=128, BK=128, SPLIT_K=1, num_warps=4, num_stages=4, TMA=1, PERSISTENT=0)
with mm._CONFIGS.forcing(config):
    c = mm.matmul(a, b)
    plan = mm._CONFIGS.plans[mm._signature(a, b)]
    repeat = closure(plan)["repeat"]  # the launch plan; TMA plans wrap it to make descriptors per call
    cells = closure(repeat)
    binary, tail = cells["binary"], cells["tail"]
    operands = rt.with_descriptors((a, b, c), 0, (config["BM"], config["BK"]), 1, (config["BK"], config["BN"]))
    print("triton", __import__("triton").__version__, "binary signature:", binary.src.signature)
    inner = binary.run.launch
    parts = closure(inner) if hasattr(inner, "__code__") else {}
    if not {"launcher", "tensordesc_indices", "tensordesc_meta"} <= parts.keys():
        sys.exit(f"not Triton 3.6's launcher wrapper: {sorted(parts)}")
    from triton.backends.nvidia.driver import make_tensordesc_arg
    indices, meta, c_launch = parts["tensordesc_indices"], parts["tensordesc_meta"], parts["launcher"]
    kernel_args = (None, None, *operands, *tail)
    expanded, j = [], 0
    for i, arg in enumerate(kernel_args):
        if i in indices:
            expanded.extend(make_tensordesc_arg(arg, meta[j]))
            j += 1
        else:
            expanded.append(arg)
    stream = torch.cuda.current_stream().cuda_stream
    grid = (cells["grid_x"], cells["grid_y"], cells["grid_z"])
    base = (*grid, stream, binary.function, binary.metadata.launch_cooperative_grid, binary.metadata.launch_pdl,
            None, None, binary.packed_metadata, None, None, None)
    c.zero_()
    c_launch(*base, *expanded)
    torch.testing.assert_close(c.float(), a.float() @ b.float(), atol=2e-2, rtol=2e-2)
    pieces = {
        "matmul(a, b), TMA config": lambda: mm.matmul(a, b),
        "rt.with_descriptors (two from_tensor)": lambda: rt.with_descriptors((a, b, c), 0, (64, 128), 1, (128, 128)),
        "make_tensordesc_arg (encode), a": lambda: make_tensordesc_arg(operands[0], meta[0]),
        "plan's launch, descriptors made": lambda: repeat(None, None, *operands),
        "C launcher, encoded once": lambda: c_launch(*base, *expanded),
    }
    for name, fn in pieces.items():
        print(f"{name:40} {per_call_us(fn):7.2f} us", flush=True)
with mm._CONFIGS.forcing(dict(config, TMA=0)):
    print(f"{'matmul(a, b), pointer twin':40} {per_call_us(lambda: mm.matmul(a, b)):7.2f} us")
