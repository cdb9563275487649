"""torch.vmap of generated ops inside torch.compile(fullgraph=True): does Dynamo trace the vmapped
call to the registered op and its batching rule? Prints each case's outcome against eager vmap."""

import torch

import generated

DEVICE = "cuda"
CASES = {
    "add (one call)": (generated.add, [(3, 5, 7), (5, 7)], (0, None)),
    "softmax (one call)": (generated.softmax, [(3, 64, 128)], (0,)),
    "matmul_relu (a sample at a time)": (generated.matmul_relu, [(3, 64, 32), (32, 64)], (0, None)),
}
for name, (fn, shapes, dims) in CASES.items():
    args = [torch.randn(*s, device=DEVICE, dtype=torch.float16) for s in shapes]
    eager = torch.func.vmap(fn, in_dims=dims)(*args)
    try:
        compiled = torch.compile(torch.func.vmap(fn, in_dims=dims), fullgraph=True)(*args)
        torch.testing.assert_close(compiled, eager)
        print(f"{name}: compiled matches eager vmap")
    except Exception as exc:  # (a probe: each case's outcome is its finding)
        print(f"{name}: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
