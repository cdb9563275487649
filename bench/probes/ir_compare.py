"""Compiled code of the matmul kernel before and after the tile body became a jit helper (and of
the persistent variant), on each given table config: registers, spills, and PTX instruction counts
by kind, so a difference in their timings can be told apart from noise.

Needs generated/_v_main.py, the kernel before the helper
(`git show a2f1867:generated/matmul.py > generated/_v_main.py`, made before the call).
Writes each kernel's PTX under the folder given as the first argument."""
import collections
import importlib
import pathlib
import re
import sys

import torch

import generated  # noqa: F401  (the package exports the functions; the modules are below)

new = sys.modules["generated.matmul"]
old = importlib.import_module("generated._v_main")
folder = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "ir")
folder.mkdir(parents=True, exist_ok=True)


def binaries(jit_function):
    for caches in jit_function.device_caches.values():
        yield from caches[0].values()


def summary(kernel):
    ptx = kernel.asm["ptx"]
    body = [line.strip() for line in ptx.splitlines() if line.strip() and not line.strip().startswith("//")]
    kinds = collections.Counter(re.split(r"[\s.]", line, maxsplit=1)[0] for line in body if not line.endswith(":"))
    keep = ("mma", "wgmma", "ld", "st", "cp", "bar", "ldmatrix", "stmatrix", "cvt", "fma", "mov", "add", "mul", "setp", "bra", "selp")
    return kernel.n_regs, kernel.n_spills, len(body), {k: kinds[k] for k in keep if kinds[k]}, ptx


shapes = [(1024, 1024, 1024), (4096, 4096, 4096), (128, 4096, 4096)]
for M, N, K in shapes:
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    new._CONFIGS.reset()
    new.matmul(a, b)
    table = dict(new._CONFIGS.cache[new._CONFIGS.last_key])
    with old._CONFIGS.forcing({k: v for k, v in table.items() if k != "PERSISTENT"}):
        old.matmul(a, b)
    for style in (0, 1):
        with new._CONFIGS.forcing(dict(table, PERSISTENT=style)):
            new.matmul(a, b)
seen = {}
for label, fn in (("previous", old._matmul_kernel), ("new", new._matmul_kernel)):
    for kernel in binaries(fn):
        constants = {k: v for k, v in kernel.src.constants.items()} if hasattr(kernel.src, "constants") else {}
        names = kernel.src.fn.arg_names
        named = {names[k[0]] if isinstance(k, tuple) else k: v for k, v in constants.items()}
        tag = "_".join(f"{k}{named.get(k)}" for k in ("BM", "BN", "BK", "USE_TMA", "PERSISTENT") if k in named)
        regs, spills, lines, kinds, ptx = summary(kernel)
        (folder / f"{label}_{tag}.ptx").write_text(ptx)
        print(f"{label:9} {tag:40} warps {kernel.metadata.num_warps} stages {kernel.metadata.num_stages} "
              f"regs {regs} spills {spills} ptx lines {lines} {kinds}", flush=True)
