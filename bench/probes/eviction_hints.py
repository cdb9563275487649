"""Looped rows with TorchInductor's cache hints, now that the row length can be compiled in: each
op's forward kernel on forced looped configs (FIXED_N on), as generated and with its loads hinted
(the passes before the outputs' `evict_last`, so the row stays in L2 for the next pass; the
outputs' pass `evict_first` on the row, `evict_last` on a weight every row reads), beside
torch.compile, in alternating rounds (do_bench, L2 emptied; the median of the rounds).

    PYTHONPATH=. python3 bench/probes/eviction_hints.py [OPS] [SHAPES] [DTYPES] [LOOPS] [ROUNDS]
    e.g. ... rms_norm,add_rms_norm 4096x32768 float16,float32 8192/32,4096/16 3

Hints without a constant length cost the half-precision forwards 7-10%
(bench/results/h200/reductions/long_rows/eviction/); this asks again with FIXED_N. The hinted
kernel is the generated source with `eviction_policy=` added to its loads, compiled from a module
of its own and launched with the arguments the op's own launch recorded.
"""
import contextlib
import importlib.util
import inspect
import os
import statistics
import sys
import tempfile
import textwrap

import torch
from triton.testing import do_bench

from tilegen.measure import check_agreement
from tilegen.measure import load_bench_modules
from tilegen.runtime import callpath

OPS = "rms_norm,add_rms_norm,layer_norm"
SHAPES = "4096x32768"
DTYPES = "float16,float32"
LOOPS = "8192/32,8192/16,4096/16"
OUTPUTS = "# The outputs along the row."


def hinted(source):
    """The kernel's source with its loads hinted: before OUTPUTS (the reductions' passes) each load
    keeps its lines in L2; after it, the row's loads evict first and a column's (a weight's) last."""
    head, tail = source.split(OUTPUTS)
    head = "\n".join(line.replace("mask=mask)", 'mask=mask, eviction_policy="evict_last")')
                     if "tl.load(" in line else line for line in head.split("\n"))
    lines = []
    for line in tail.split("\n"):
        if "tl.load(" in line:
            line = line.replace("mask=mask)", 'mask=mask, eviction_policy="evict_first")')
            line = line.replace("mask=cols < row_length)", 'mask=cols < row_length, eviction_policy="evict_last")')
        lines.append(line)
    return head + OUTPUTS + "\n".join(lines)


def compiled_variant(fn, folder, name):
    """The hinted kernel, compiled from a module of its own."""
    source = getattr(fn, "src", None) or textwrap.dedent(inspect.getsource(getattr(fn, "fn", fn)))
    source = source[source.index("def "):]
    path = os.path.join(folder, f"{name}.py")
    with open(path, "w") as f:
        f.write("import triton\nimport triton.language as tl\n"
                "from tilegen.runtime.sync import finish_share, wait_for_every_program\n\n\n@triton.jit\n")
        f.write(hinted(source))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return getattr(module, fn.__name__)


def recorded_launch(op, config, run):
    """(grid, args, constexprs, num_warps, result) of the op's own launch with `config`."""
    seen = {}
    original = op.kernel.launch

    def record(grid, args, varying, constexprs, num_warps, num_stages=None):
        seen.update(grid=grid, args=args, constexprs=dict(constexprs), num_warps=num_warps)
        return original(grid, args, varying, constexprs, num_warps, num_stages)

    op.kernel.launch = record
    try:
        with op.configs.forcing(config):
            result = run()
    finally:
        del op.kernel.launch
    return seen["grid"], seen["args"], seen["constexprs"], seen["num_warps"], result


def main(ops=OPS, shapes=SHAPES, dtypes=DTYPES, loops=LOOPS, rounds="3"):
    callpath.load(wait=True)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}", flush=True)
    folder = tempfile.mkdtemp()
    count = 0
    for op_name in ops.split(","):
        bench = load_bench_modules([op_name], "generated")[0]
        op = sys.modules[f"generated.{op_name}"]._OP
        block = op.configs.space.block
        for shape_text in shapes.split(","):
            shape = tuple(int(s) for s in shape_text.split("x"))
            for dtype_name in dtypes.split(","):
                dtype = getattr(torch, dtype_name)
                inputs = bench.make_inputs(shape, dtype)
                want = bench.run_torch(inputs)
                label = f"{op_name} {shape_text} {dtype_name}"
                compiled = torch.compile(bench.run_torch, mode="max-autotune-no-cudagraphs")
                compiled(inputs)
                # name: (the config forced while it is timed, or None; the call)
                calls = {"torch.compile": (None, lambda: compiled(inputs)),
                         "tilegen today": (None, lambda: bench.run_tilegen(inputs))}
                for text in loops.split(","):
                    b, w = (int(v) for v in text.split("/"))
                    config = {block: b, "ROWS": 1, "num_warps": w, "UNROLL": 0, "FIXED_N": 1}
                    grid, args, constexprs, warps, result = recorded_launch(op, config, lambda: bench.run_tilegen(inputs))
                    count += 1
                    kernel = compiled_variant(op.kernel.fn, folder, f"hinted_{count}")

                    def hinted_call(kernel=kernel, grid=grid, args=args, constexprs=constexprs, warps=warps):
                        kernel[grid](*args, **constexprs, num_warps=warps)
                    for tensor in result if isinstance(result, tuple) else (result,):
                        tensor.fill_(float("nan"))  # the variant writes into the op's outputs
                    hinted_call()
                    check_agreement(result, want, f"{label} {text} hinted")

                    # (forced around the timing, not per call: forcing forgets the choices, and the
                    # compiled call path with them, so each call would take the Python path)
                    calls[f"{block}{b} w{w} FIXED_N"] = (config, lambda: bench.run_tilegen(inputs))
                    calls[f"{block}{b} w{w} FIXED_N hinted"] = (None, hinted_call)
                times = {name: [] for name in calls}
                for _ in range(int(rounds)):
                    for name, (config, call) in calls.items():
                        with op.configs.forcing(config) if config else contextlib.nullcontext():
                            times[name].append(do_bench(call, warmup=10, rep=40, return_mode="median"))
                for name in calls:
                    print(f"{label} {name}: {statistics.median(times[name]) * 1e3:.1f} us", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
