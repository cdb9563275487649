"""Where matmul_bias_gelu's epilogue time goes at 4096^3, and which schedules hide it.

Variants of generated/matmul_bias_gelu.py (written as generated/_v_*.py, not part of the
package): the persistent loop flattened (`tl.range(..., flatten=True)`, so the pipeliner can
issue the next tile's loads during this tile's epilogue) or warp-specialized, the epilogue run on
two halves of the tile, and the epilogue without the erf (what the GELU itself costs). Each runs
under several forced configs, beside matmul and matmul_relu on the table's config, eager and
torch.compile max-autotune (whose chosen kernel source lands in $OUT). Every variant's output is
checked against eager first; registers and spills come from the compiled kernel. Three
interleaved rounds of do_bench medians.
"""
import contextlib
import importlib
import os
import sys
import traceback

import torch
import torch.nn.functional as F
from triton.testing import do_bench

out_dir = os.environ.get("OUT", "/tmp")
src = open("generated/matmul_bias_gelu.py").read()

OUTER = "for pid in range(tl.program_id(0), num_tiles, tl.num_programs(0)):"
TMA_LOOP = "        for k in range(k_first, k_stop):\n            a = a_ptr.load("
EPILOGUE = """        bias = tl.load(bias_ptr + offs_n * stride_bias_0, mask=offs_n < N if MASK_N else None).to(tl.float32)[None, :]
        c = 0.5 * (acc + bias) * (1.0 + tl.erf((acc + bias) * 0.7071067811865476))
        c_ptrs = c_ptr + offs_m[:, None] * stride_c_0 + offs_n[None, :] * stride_c_1
        tl.store(c_ptrs, c.to(c_ptr.dtype.element_ty), mask=mask)
"""
HALF = """        offs_nh = pid_n * BN + {h} * (BN // 2) + tl.arange(0, BN // 2)
        bias = tl.load(bias_ptr + offs_nh * stride_bias_0, mask=offs_nh < N if MASK_N else None).to(tl.float32)[None, :]
        c = 0.5 * (acc_{h} + bias) * (1.0 + tl.erf((acc_{h} + bias) * 0.7071067811865476))
        c_ptrs = c_ptr + offs_m[:, None] * stride_c_0 + offs_nh[None, :] * stride_c_1
        tl.store(c_ptrs, c.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_nh[None, :] < N))
"""
SUB2 = ("        acc_0, acc_1 = tl.split(tl.permute(tl.reshape(acc, (BM, 2, BN // 2)), (0, 2, 1)))\n"
        + HALF.format(h=0) + HALF.format(h=1))
STORE = "        tl.store(c_ptrs, c.to(c_ptr.dtype.element_ty), mask=mask)\n"
TSTORE = ("        if USE_TMA:\n"
          "            c_ptr.store([pid_m * BM, pid_n * BN], c.to(bias_ptr.dtype.element_ty))\n"
          "        else:\n"
          "            c_ptrs = c_ptr + offs_m[:, None] * stride_c_0 + offs_n[None, :] * stride_c_1\n"
          "            tl.store(c_ptrs, c.to(c_ptr.dtype.element_ty), mask=mask)\n")
TSTORE2 = ("        acc_0, acc_1 = tl.split(tl.permute(tl.reshape(acc, (BM, 2, BN // 2)), (0, 2, 1)))\n"
           + "".join(
               f"        offs_nh = pid_n * BN + {h} * (BN // 2) + tl.arange(0, BN // 2)\n"
               f"        bias = tl.load(bias_ptr + offs_nh * stride_bias_0, mask=offs_nh < N if MASK_N else None).to(tl.float32)[None, :]\n"
               f"        c = 0.5 * (acc_{h} + bias) * (1.0 + tl.erf((acc_{h} + bias) * 0.7071067811865476))\n"
               f"        c_ptr.store([pid_m * BM, pid_n * BN + {h} * (BN // 2)], c.to(bias_ptr.dtype.element_ty))\n" for h in (0, 1)))
HOST = "head = rt.with_descriptors(head, 0, (bm, bk), 1, (bk, bn))"
for needle in (OUTER, TMA_LOOP, EPILOGUE, STORE, HOST):
    assert needle in src, needle

texts = {
    "base": src,
    "flat": src.replace(OUTER, OUTER.replace("range(", "tl.range(").replace("):", ", flatten=True):")),
    "tstore": src.replace(EPILOGUE, EPILOGUE.replace("        c_ptrs = c_ptr + offs_m[:, None] * stride_c_0 + offs_n[None, :] * stride_c_1\n", "").replace(STORE, TSTORE))
              .replace(HOST, "head = rt._described(head, {0: [bm, bk], 1: [bk, bn], 3: [bm, bn]})"),
    "tstore2": src.replace(EPILOGUE, TSTORE2).replace(HOST, "head = rt._described(head, {0: [bm, bk], 1: [bk, bn], 3: [bm, bn // 2]})"),
    "ws": src.replace(OUTER, OUTER.replace("range(", "tl.range(").replace("):", ", warp_specialize=True):")),
    "ws_k": src.replace(TMA_LOOP, TMA_LOOP.replace("range(k_first, k_stop)", "tl.range(k_first, k_stop, warp_specialize=True)")),
    "sub2": src.replace(EPILOGUE, SUB2),
    "flat_sub2": src.replace(EPILOGUE, SUB2).replace(OUTER, OUTER.replace("range(", "tl.range(").replace("):", ", flatten=True):")),
    "bias_only": src.replace("c = 0.5 * (acc + bias) * (1.0 + tl.erf((acc + bias) * 0.7071067811865476))", "c = acc + bias"),
}
mods = {}
for name, text in texts.items():
    if os.environ.get("PROBE_CASE") is None:
        with open(f"generated/_v_{name}.py", "w") as f:
            f.write(text)
    mods[name] = importlib.import_module(f"generated._v_{name}")
matmul = sys.modules.get("generated.matmul") or importlib.import_module("generated.matmul")
relu = importlib.import_module("generated.matmul_relu")


def cfg(bm, bn, bk, w, s, persistent=0):
    return dict(BM=bm, BN=bn, BK=bk, SPLIT_K=1, num_warps=w, num_stages=s, TMA=1, PERSISTENT=persistent)


C1, C2, C3 = cfg(128, 256, 32, 8, 4), cfg(128, 256, 64, 8, 3), cfg(128, 128, 64, 8, 4)
C4, C5 = cfg(128, 128, 64, 4, 3), cfg(128, 128, 64, 4, 4)
P = lambda c: dict(c, PERSISTENT=1)  # noqa: E731
# The first run (all of these, warp-specialized ones too) ran out of time while compiling; these
# are the ones that tell the most.
cases = [("base", C1), ("base", C2), ("base", C3), ("sub2", C1), ("sub2", C2), ("tstore", C1), ("tstore", C2),
         ("tstore", C3), ("tstore2", C1), ("tstore2", C2), ("tstore", P(C1)), ("flat", P(C3)), ("bias_only", C1)]


def kernel_stats(mod):
    """Registers and spills of each compiled specialization of the module's kernel."""
    kernel = next(v for k, v in vars(mod).items() if k.endswith("_kernel") and hasattr(v, "device_caches"))
    out = []
    for caches in kernel.device_caches.values():
        for binary in caches[0].values():
            out.append((binary.n_regs, binary.n_spills))
    return out


M = N = K = 4096
only = os.environ.get("PROBE_CASE")
if only is None:
    # Compile every case first, in parallel processes (one case each, both dtypes): a compile
    # takes up to half a minute here. The runs below then find the kernels in Triton's cache.
    import subprocess
    procs = [subprocess.Popen([sys.executable, __file__], env=dict(os.environ, PROBE_CASE=str(i)),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for i in range(len(cases))]
    for proc in procs:
        proc.wait()
else:
    cases = [cases[int(only)]]
for dt in (torch.float16, torch.bfloat16):
    name = str(dt)[6:]
    torch.manual_seed(0)
    a = torch.randn(M, K, device="cuda", dtype=dt)
    b = torch.randn(K, N, device="cuda", dtype=dt) / 64
    bias = torch.randn(N, device="cuda", dtype=dt)
    want = F.gelu((a.float() @ b.float()) + bias.float())
    if only is not None:
        fns = {}
    else:
      fns = {"eager": lambda: F.gelu(a @ b + bias), "matmul(table)": lambda: matmul.matmul(a, b),
             "relu(table)": lambda: relu.matmul_relu(a, b), "gelu(table)": lambda: mods["base"].matmul_bias_gelu(a, b, bias)}
    if os.environ.get("WITH_COMPILE") and only is None:
      try:
        from torch._inductor.utils import run_and_get_code
        compiled = torch.compile(lambda a, b, bias: F.gelu(a @ b + bias), mode="max-autotune-no-cudagraphs", dynamic=False)
        got, code = run_and_get_code(compiled, a, b, bias)
        with open(f"{out_dir}/inductor_gelu_{name}.py", "w") as f:
            f.write("\n\n# ----\n\n".join(code))
        print(f"{name} inductor max err {(got.float() - want).abs().max().item():.3g}", flush=True)
        fns["torch.compile"] = lambda: compiled(a, b, bias)
      except Exception:
        traceback.print_exc()
    for variant, config in cases:
        mod = mods[variant]
        label = f"{variant} {config['BM']}x{config['BN']}x{config['BK']} w{config['num_warps']} s{config['num_stages']}" + (" P" if config["PERSISTENT"] else "")
        try:
            with mod._CONFIGS.forcing(config):
                got = mod.matmul_bias_gelu(a, b, bias)
                torch.cuda.synchronize()
            err = (got.float() - want).abs().max().item()
            if variant != "bias_only" and err > 0.1:
                print(f"{name} {label}: WRONG, max err {err:.3g}", flush=True)
                continue
            print(f"{name} {label}: max err {err:.3g}, regs/spills {kernel_stats(mod)[-1]}", flush=True)

            fns[label] = (lambda mod=mod: mod.matmul_bias_gelu(a, b, bias), mod, config)
        except Exception as e:
            print(f"{name} {label}: FAILED {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}", flush=True)
    if only is not None:
        continue
    times = {label: [] for label in fns}
    for _ in range(3):
        for label, entry in fns.items():
            fn, mod, config = entry if isinstance(entry, tuple) else (entry, None, None)
            with mod._CONFIGS.forcing(config) if mod else contextlib.nullcontext():
                fn()
                times[label].append(do_bench(fn, return_mode="median") * 1e3)
    for label, ts in times.items():
        print(f"{name} {label:40} " + " ".join(f"{t:7.1f}" for t in ts) + f"   min {min(ts):7.1f} us", flush=True)
