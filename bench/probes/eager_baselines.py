"""The reductions' eager baselines, forward and training step: tilegen's op beside the
benchmark's eager counterpart (generated/bench/bench_<op>.py run_torch: since 0a8107f, the PyTorch
call a user writes for the outputs a model reads), PyTorch's fused calls that also return the
statistics (native_layer_norm: y, mean, rstd; _fused_rms_norm: y, rstd), and the composition the
benchmark timed before 0a8107f (F.layer_norm plus mean and rstd again by composition, F.rms_norm
plus rstd, add_rms_norm's sum three times). do_bench medians, as the tables. Training steps: the
loss reads the rows' outputs alone (y; h and y), as a model's does, for every provider.

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


def composition(op):
    """The eager baseline before 0a8107f: the statistics again beside PyTorch's call."""
    if op == "layer_norm":
        def layer_norm(x, w, b):
            mu = x.mean(-1, keepdim=True)
            d = x - mu
            r = torch.rsqrt((d * d).mean(-1, keepdim=True) + 1e-5)
            return F.layer_norm(x, x.shape[-1:], w, b, 1e-5), mu.squeeze(-1), r.squeeze(-1)
        return layer_norm
    if op == "rms_norm":
        def rms_norm(x, w):
            r = torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6)
            return F.rms_norm(x, x.shape[-1:], w, 1e-6), r.squeeze(-1)
        return rms_norm
    if op == "add_rms_norm":
        def add_rms_norm(x, residual, w):
            h = x + residual
            return h, F.rms_norm(x + residual, (x + residual).shape[-1:], w, 1e-6)
        return add_rms_norm
    return fused(op)


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


def row(times):
    columns = ("baseline", "fused", "before")
    return (" ".join(f"{times[k] * 1e3:9.1f}" for k in ("tilegen",) + columns) + " "
            + " ".join(f"{times[k] / times['tilegen']:{10 if k == 'baseline' else 8}.2f}x" for k in columns))


def ms(fn):
    return triton.testing.do_bench(fn, return_mode="median")


def main():
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("times in us; ratios are the provider's time over tilegen's (above 1: tilegen is faster)")
    print(f"{'op':13} {'dtype':9} {'shape':12} {'kind':8} {'tilegen':>9} {'baseline':>9} {'fused':>9} {'before':>9} "
          f"{'vs baseline':>11} {'vs fused':>9} {'vs before':>9}")
    for op in ["layer_norm", "rms_norm", "add_rms_norm", "softmax", "log_softmax"]:
        ours = getattr(generated, op)
        baseline = importlib.import_module(f"generated.bench.bench_{op}").run_torch
        theirs, before = fused(op), composition(op)
        for dtype in (torch.float16, torch.float32):
            for shape in SHAPES:
                args = inputs(op, shape, dtype)
                times = {}
                with torch.no_grad():
                    times["tilegen"] = ms(lambda: ours(*args))
                    times["baseline"] = ms(lambda: baseline(args))
                    times["fused"] = ms(lambda: theirs(*args))
                    times["before"] = ms(lambda: before(*args))
                print(f"{op:13} {str(dtype)[6:]:9} {'x'.join(map(str, shape)):12} {'forward':8} "
                      f"{row(times)}")
                leaves = [a.clone().requires_grad_() for a in args]
                grads = [torch.randn_like(o) for o in main_output(op, ours(*args))]
                times = {"tilegen": ms(step(ours, op, leaves, grads)),
                         "baseline": ms(step(lambda *a: baseline(list(a)), op, leaves, grads)),
                         "fused": ms(step(theirs, op, leaves, grads)),
                         "before": ms(step(before, op, leaves, grads))}
                print(f"{op:13} {str(dtype)[6:]:9} {'x'.join(map(str, shape)):12} {'training':8} "
                      f"{row(times)}")


if __name__ == "__main__":
    main()
