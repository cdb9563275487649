"""The reductions' eager baselines against PyTorch's own fused functions, forward and training step.

The benchmark's eager counterpart (generated/bench/bench_<op>.py, run_torch) computes each output
by its reference or its spec expression: for layer_norm that is F.layer_norm plus the mean and
rstd outputs by composition (five more kernels), for rms_norm F.rms_norm plus rstd, for
add_rms_norm the sum three times. A PyTorch user would call native_layer_norm (y, mean, rstd in
one kernel) or _fused_rms_norm (y, rstd). This times tilegen's op, the benchmark's baseline and
the fused function side by side (do_bench medians, as the tables), so that the tables' ratios can
be judged. Training steps: the loss reads y alone (sum of y * a fixed gradient), as a model's does.

    PYTHONPATH=. python3 bench/probes/eager_baselines.py > eager_baselines.txt
"""

import importlib

import torch
import torch.nn.functional as F
import triton.testing

import generated

SHAPES = [(4096, 4096), (16384, 1024), (4096, 32768), (32, 32768), (8192, 128)]


def fused(op):
    """PyTorch's own call for the op's outputs, in one kernel where PyTorch has one."""
    if op == "layer_norm":
        return lambda x, w, b: torch.ops.aten.native_layer_norm(x, x.shape[-1:], w, b, 1e-5)
    if op == "rms_norm":
        return lambda x, w: torch.ops.aten._fused_rms_norm(x, x.shape[-1:], w, 1e-6)
    if op == "add_rms_norm":
        def add_rms_norm(x, residual, w):
            h = x + residual
            return h, F.rms_norm(h, h.shape[-1:], w, 1e-6)
        return add_rms_norm
    if op == "softmax":
        return lambda x: torch.softmax(x, -1)
    return lambda x: torch.log_softmax(x, -1)


def inputs(op, shape, dtype):
    rows, n = shape
    x = torch.randn(rows, n, device="cuda", dtype=dtype)
    extra = {"layer_norm": [(n,), (n,)], "rms_norm": [(n,)], "add_rms_norm": [(rows, n), (n,)]}.get(op, [])
    return [x] + [torch.randn(*s, device="cuda", dtype=dtype) for s in extra]


def main_output(op, result):
    """The output a model reads: y (h, y for add_rms_norm: both)."""
    result = result if isinstance(result, tuple) else (result,)
    return result[:2] if op == "add_rms_norm" else result[:1]


def step(fn, op, args, grads):
    def run():
        outs = main_output(op, fn(*args))
        torch.autograd.backward(outs, grads)
    return run


def ms(fn):
    return triton.testing.do_bench(fn, return_mode="median")


def main():
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(f"{'op':13} {'dtype':9} {'shape':12} {'kind':8} {'tilegen':>9} {'baseline':>9} {'fused':>9} "
          f"{'vs baseline':>11} {'vs fused':>9}")
    for op in ["layer_norm", "rms_norm", "add_rms_norm", "softmax", "log_softmax"]:
        ours = getattr(generated, op)
        baseline = importlib.import_module(f"generated.bench.bench_{op}").run_torch
        theirs = fused(op)
        for dtype in (torch.float16, torch.float32):
            for shape in SHAPES:
                args = inputs(op, shape, dtype)
                times = {}
                with torch.no_grad():
                    times["tilegen"] = ms(lambda: ours(*args))
                    times["baseline"] = ms(lambda: baseline(args))
                    times["fused"] = ms(lambda: theirs(*args))
                print(f"{op:13} {str(dtype)[6:]:9} {'x'.join(map(str, shape)):12} {'forward':8} "
                      f"{times['tilegen'] * 1e3:9.1f} {times['baseline'] * 1e3:9.1f} {times['fused'] * 1e3:9.1f} "
                      f"{times['baseline'] / times['tilegen']:10.2f}x {times['fused'] / times['tilegen']:8.2f}x")
                leaves = [a.clone().requires_grad_() for a in args]
                grads = [torch.randn_like(o) for o in main_output(op, ours(*args))]
                times = {"tilegen": ms(step(ours, op, leaves, grads)),
                         "baseline": ms(step(lambda *a: baseline(list(a)), op, leaves, grads)),
                         "fused": ms(step(theirs, op, leaves, grads))}
                print(f"{op:13} {str(dtype)[6:]:9} {'x'.join(map(str, shape)):12} {'training':8} "
                      f"{times['tilegen'] * 1e3:9.1f} {times['baseline'] * 1e3:9.1f} {times['fused'] * 1e3:9.1f} "
                      f"{times['baseline'] / times['tilegen']:10.2f}x {times['fused'] / times['tilegen']:8.2f}x")


if __name__ == "__main__":
    main()
