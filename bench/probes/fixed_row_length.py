"""The row length compiled in (FIXED_N) or read at run time: each reduction op's forward kernel,
and its backward kernel in a training step, with the config it launches today and that config's
FIXED_N twin, timed in alternating rounds (do_bench, L2 emptied; the median of the rounds).

    PYTHONPATH=. python3 bench/probes/fixed_row_length.py [OPS] [SHAPES] [DTYPES] [ROUNDS] [LOOPS]
    e.g. ... rms_norm,layer_norm 4096x32768,32768x4096 float16,float32 3
    ... rms_norm float32 4096x32768 3 4096/16,8192/16,8192/32   # and looped forwards, FIXED_N
    ... rms_norm float32 4096x32768 3 2048/8/1,4096/8/1          # ... with EVICT too
    ... rms_norm float32 4096x32768 3 32768/32/1/1               # ... a row its block holds, passed over (LOOP)

A line per op, shape, dtype and direction: both times and their ratio (above 1: FIXED_N faster),
printed as measured, so a run cut short keeps what it timed. LOOPS (block/warps[/evict],
comma-separated) adds forward configs looping along the row in those blocks with those warps, one
row a program, FIXED_N on (and EVICT, the loads' cache hints, where the third field is 1; a block
as long as the row holds it whole, with those warps, or, where the fourth field is 1, passes over
it as over a longer row: LOOP), timed in the same rounds (a line each), and leaves the backward out. COMPILE=1 (with LOOPS) times
torch.compile of the bench's PyTorch call in the same rounds (max-autotune-no-cudagraphs, as
`tilegen bench --compile`). Each config's result is checked against PyTorch's as `tilegen tune`
checks a candidate.
"""
import os
import statistics
import sys

import torch
from triton.testing import do_bench

from tilegen.measure import load_bench_modules
from tilegen.runtime import callpath
from tilegen.tune import backward_calls, forward_calls

OPS = "rms_norm,add_rms_norm,layer_norm,log_softmax,softmax"
SHAPES = "4096x32768,512x32768,32768x4096"
DTYPES = "float16,float32"


def compare(label, chooser, call, check, rounds, loops=(), compiled=None):
    """Time `call` with the config `chooser` picks today and with its FIXED_N twin (and `loops`,
    and `compiled`, a call of torch.compile's)."""
    with chooser.recording() as chosen:
        call()
    today = dict(chosen[-1][1])
    today.pop("FIXED_N", None)
    twins = {"run time": today, "FIXED_N": dict(today, FIXED_N=1)}
    block = chooser.space.block
    twins.update({f"{block}{b} w{w} FIXED_N{' EVICT' if e else ''}{' LOOP' if p else ''}":
                  {block: b, "ROWS": 1, "num_warps": w, "UNROLL": 0, "FIXED_N": 1, "EVICT": e, "LOOP": p}
                  for b, w, e, p in loops})
    times = {name: [] for name in twins}
    for name, config in twins.items():  # compiled and checked before any timing
        with chooser.forcing(config):
            check(call(), f"{label} {config}")
    if compiled is not None:
        compiled()
        times["torch.compile"] = []
    for _ in range(rounds):
        for name, config in twins.items():
            with chooser.forcing(config):
                times[name].append(do_bench(call, warmup=10, rep=40, return_mode="median"))
        if compiled is not None:
            times["torch.compile"].append(do_bench(compiled, warmup=10, rep=40, return_mode="median"))
    slow, fast = (statistics.median(times[name]) * 1e3 for name in ("run time", "FIXED_N"))
    print(f"{label} {today}: run time {slow:.1f} us, FIXED_N {fast:.1f} us, {slow / fast:.3f}x", flush=True)
    for name in list(times)[2:]:
        ms = statistics.median(times[name]) * 1e3
        print(f"{label} {name}: {ms:.1f} us, {slow / ms:.3f}x the run time's", flush=True)


def main(ops=OPS, shapes=SHAPES, dtypes=DTYPES, rounds="3", loops=""):
    loops = [tuple(int(v) for v in (text + "/0/0").split("/")[:4]) for text in loops.split(",") if text]
    callpath.load(wait=True)  # (repeat calls take the compiled call path, as a user's do)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}", flush=True)
    for op in ops.split(","):
        module = load_bench_modules([op], "generated")[0]
        generated = sys.modules[f"generated.{op}"]
        for shape_text in shapes.split(","):
            shape = tuple(int(s) for s in shape_text.split("x"))
            for dtype_name in dtypes.split(","):
                dtype = getattr(torch, dtype_name)
                inputs = module.make_inputs(shape, dtype)
                label = f"{op} {shape_text} {dtype_name}"
                compiled = None
                if loops and os.environ.get("COMPILE") == "1":
                    run_torch = torch.compile(module.run_torch, mode="max-autotune-no-cudagraphs", dynamic=False)
                    compiled = lambda: run_torch(inputs)  # noqa: E731, B023 - called in this iteration
                try:
                    compare(f"{label} forward", generated._OP.configs, *forward_calls(module, inputs, dtype), int(rounds),
                            [loop for loop in loops if loop[0] <= shape[-1]], compiled)
                    if not loops:  # (LOOPS asks about the forward alone)
                        compare(f"{label} backward", generated._BACKWARD.configs,
                                *backward_calls(module, inputs, dtype), int(rounds))
                except Exception as error:  # noqa: BLE001 - a config that does not launch is a result too
                    print(f"{label}: {type(error).__name__}: {error}", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
