"""Rows held whole, a program a row block against a few programs a multiprocessor (PER_SM) whose
row blocks' loads go a trip ahead: each reduction op's forward kernel under forced configs, beside
the config it launches today, eager PyTorch and a copy of the same bytes (all do_bench, L2 emptied).

    PYTHONPATH=. python3 bench/probes/persistent_rows.py [OPS] [SHAPES] [DTYPES]
    e.g. ... softmax,rms_norm 4096x32768,4096x4096 float16,float32

A line per config: its time, and 'of copy' (the copy's time over it). Lines print as they are
measured, so a run cut short keeps what it timed.
"""
import sys

import torch
from triton.testing import do_bench

from tilegen.bench import same_bytes_copy
from tilegen.measure import load_bench_modules
from tilegen.runtime import callpath
from tilegen.runtime.configs import reduction_warps

OPS = "softmax,log_softmax,rms_norm,layer_norm,add_rms_norm"
SHAPES = "4096x32768,512x32768,4096x4096,131072x1024,131072x128,1048576x128"
DTYPES = "float16,float32"


def configs(n, rows):
    """A program a row block and 1, 2 or 4 a multiprocessor, with the heuristic's warps and twice them."""
    whole = max(16, 1 << (n - 1).bit_length())
    per_program = max(1, min(4096 // whole, 64, rows))
    out = []
    for warps in sorted({reduction_warps(per_program * whole), min(32, 2 * reduction_warps(per_program * whole))}):
        for per_sm in (0, 1, 2, 4):
            if per_sm * warps <= 64:
                out.append(dict(BLOCK_N=whole, ROWS=per_program, num_warps=warps, UNROLL=0, PER_SM=per_sm))
    return out


def main(ops=OPS, shapes=SHAPES, dtypes=DTYPES):
    # The compiled call path builds in the background on a fresh machine; until it is loaded every
    # call takes the Python path, and its host time (and the build's) is what do_bench times: the
    # first run of this probe timed softmax at 1077 us at 4096x32768 (eager 233) that way.
    callpath.load(wait=True)
    for op in ops.split(","):
        module = load_bench_modules([op], "generated")[0]
        kernel_op = sys.modules[f"generated.{op}"]._OP
        for shape_text in shapes.split(","):
            shape = tuple(int(s) for s in shape_text.split("x"))
            for dtype_name in dtypes.split(","):
                dtype = getattr(torch, dtype_name)
                inputs = module.make_inputs(shape, dtype)
                copy = same_bytes_copy(module.bytes_moved(shape, dtype), "cuda")
                copy_ms = do_bench(lambda: copy(inputs))
                eager_ms = do_bench(lambda: module.run_torch(inputs))
                chosen_ms = do_bench(lambda: module.run_tilegen(inputs))
                print(f"{op} {shape_text} {dtype_name}: copy {copy_ms * 1e3:.1f} us, eager {eager_ms * 1e3:.1f} "
                      f"(of copy {copy_ms / eager_ms:.2f}), today's config {chosen_ms * 1e3:.1f} "
                      f"(of copy {copy_ms / chosen_ms:.2f})", flush=True)
                want = module.run_torch(inputs)
                for config in configs(shape[-1], shape[0]):
                    try:
                        with kernel_op.configs.forcing(config):
                            got = module.run_tilegen(inputs)
                            ms = do_bench(lambda: module.run_tilegen(inputs))
                    except Exception as error:  # out of resources: the config does not launch
                        print(f"    {config}: {type(error).__name__}", flush=True)
                        continue
                    first = lambda r: r[0] if isinstance(r, (tuple, list)) else r
                    error = (first(got).float() - first(want).float()).abs().max().item()
                    print(f"    {config}: {ms * 1e3:.1f} us, of copy {copy_ms / ms:.2f}, "
                          f"{chosen_ms / ms:.2f}x today's, max error {error:.2g}", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
