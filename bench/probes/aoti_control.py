"""AOTInductor with nothing of tilegen in the model: relu(a + b) in PyTorch's ops, exported,
packaged and loaded back (bench/results/h200/aoti_load/: it crashed loading on the GPU image).

    PYTHONPATH=. python3 bench/probes/aoti_control.py plain|runtime|generated

`runtime` imports tilegen.runtime first and `generated` the generated package (their import-time
effects alone); `plain` neither. Prints "ok" and the largest difference from eager where it ran.
"""

import importlib
import sys
import tempfile

import torch

mode = sys.argv[1]
if mode != "plain":
    importlib.import_module({"runtime": "tilegen.runtime", "generated": "generated"}[mode])
x = torch.randn(64, 64, device="cuda")


class M(torch.nn.Module):
    def forward(self, a, b):
        return torch.relu(a + b)


ep = torch.export.export(M(), (x, x))
p = torch._inductor.aoti_compile_and_package(ep, package_path=tempfile.mkdtemp() + "/m.pt2")
print("load", flush=True)
loaded = torch._inductor.aoti_load_package(p)
print("ok", (loaded(x, x) - torch.relu(x + x)).abs().max().item(), flush=True)
