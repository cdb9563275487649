"""Is a tilegen op slower after torch.compile ran in the same process? reduction_pipelining.py
timed rms_norm's own call at 4096x32768 (float16) at 554-729 us right after compiling PyTorch's
rms_norm with max-autotune, where `tilegen bench` times it at 140-150 us; softmax and
layer_norm were not affected. This times the op's call before and after such a compile, and
counts how many of its calls the compiled call path served (a call it does not serve takes
the Python path: checks, config choice, Triton's launcher).

    PYTHONPATH=. python3 bench/probes/own_after_compile.py [--ops rms_norm,softmax] [--shapes 4096x32768,512x32768]
"""
import argparse

import torch
from triton.testing import do_bench

from tilegen.measure import load_bench_modules
from tilegen.runtime import op_of


def served_share(op, run, calls=20):
    """The share of `calls` calls the op's compiled call path served."""
    original, served = op.fast, [0]

    def counting(*args):
        result = original(*args)
        served[0] += result is not None
        return result

    op.fast = counting
    try:
        for _ in range(calls):
            run()
        torch.cuda.synchronize()
    finally:
        del op.fast
    return served[0] / calls


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", default="rms_norm,softmax")
    parser.add_argument("--shapes", default="4096x32768,512x32768")
    parser.add_argument("--dtype", default="float16")
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    for op_name in args.ops.split(","):
        bench = load_bench_modules([op_name], "generated")[0]
        op = op_of(f"generated.{op_name}")
        for shape_text in args.shapes.split(","):
            shape = tuple(int(p) for p in shape_text.split("x"))
            inputs = bench.make_inputs(shape, dtype)

            def run():
                return bench.run_tilegen(inputs)

            def line(when):
                ms = do_bench(run, return_mode="median")
                with op.configs.recording() as chosen:
                    run()
                config = chosen[-1][1] if chosen else "(served: no choice made)"
                print(f"  {op_name} {shape_text} {when:32} {ms * 1e3:8.1f} us  served {served_share(op, run):4.0%}  "
                      f"config {config}", flush=True)

            line("before torch.compile")
            compiled = torch.compile(bench.run_torch, mode="max-autotune-no-cudagraphs")
            compiled_ms = do_bench(lambda: compiled(inputs), return_mode="median")
            line(f"after (compiled {compiled_ms * 1e3:.1f} us)")
            torch._dynamo.reset()
            line("after torch._dynamo.reset()")


if __name__ == "__main__":
    main()
