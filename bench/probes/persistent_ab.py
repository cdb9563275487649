"""Persistent launch against tiled, on each shape's table config, and the tiled kernel of the
previous commit (before the tile body became a jit helper) beside both: three interleaved rounds,
timed as bench times (do_bench median, L2 emptied), the PyTorch counterpart in the same rounds.

Needs generated/_v_main.py, the kernel before the helper
(`git show a2f1867:generated/matmul.py > generated/_v_main.py`, made before the call)."""
import importlib
import sys

import torch
import torch.nn.functional as F
from triton.testing import do_bench

import generated  # noqa: F401  (the package exports the functions; the modules are below)

mods = {name: sys.modules[f"generated.{name}"] for name in ("matmul", "matmul_relu", "matmul_bias_gelu")}
old = importlib.import_module("generated._v_main")

big = [(1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192),
       (128, 4096, 4096), (4096, 11008, 4096)]
cases = [("matmul", shape, dt) for dt in (torch.float16, torch.bfloat16) for shape in big]
cases += [("matmul_bias_gelu", (4096, 4096, 4096), torch.float16), ("matmul_bias_gelu", (8192, 8192, 8192), torch.float16),
          ("matmul_relu", (128, 4096, 4096), torch.float16), ("matmul_bias_gelu", (128, 4096, 4096), torch.bfloat16)]


def ms(fn):
    fn()
    return do_bench(fn, return_mode="median") * 1e3


for rnd in range(3):
    for op, (M, N, K), dt in cases:
        a = torch.randn(M, K, device="cuda", dtype=dt)
        b = torch.randn(K, N, device="cuda", dtype=dt)
        mod = mods[op]
        fn_op = getattr(mod, op)
        if op == "matmul_bias_gelu":
            bias = torch.randn(N, device="cuda", dtype=dt)
            call = lambda m: getattr(m, op)(a, b, bias)  # noqa: E731
            ref = lambda: F.gelu(a @ b + bias)  # noqa: E731
        else:
            call = lambda m: getattr(m, op)(a, b)  # noqa: E731
            ref = (lambda: a @ b) if op == "matmul" else (lambda: torch.relu(a @ b))
        mod._CONFIGS.reset()
        call(mod)
        table = dict(mod._CONFIGS.cache[mod._CONFIGS.last_key])
        times = {"torch": ms(ref)}
        if op == "matmul":
            times["previous tiled"] = ms(lambda: call(old))
        for style in (0, 1):
            with mod._CONFIGS.forcing(dict(table, PERSISTENT=style)):
                want = ref()
                got = call(mod)
                err = (got.float() - want.float()).abs().max().item() / max(want.float().abs().max().item(), 1e-6)
                times["persistent" if style else "tiled"] = ms(lambda: call(mod))
        line = "  ".join(f"{k} {v:7.1f}" for k, v in times.items())
        print(f"round {rnd} {str(dt)[6:]:9} {op:16} {M}x{N}x{K:<6} {line}  rel.err {err:.1e}  "
              f"persistent/tiled {times['tiled'] / times['persistent']:.3f}  {table}", flush=True)
