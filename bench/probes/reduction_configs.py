"""Which launch configs serve a reduction's rows best? Every config of a grid, forced through the
op's generated wrapper, checked against the eager equivalent, then timed as `tilegen bench`
times (do_bench medians, L2 emptied first), beside eager PyTorch and the config the op picks
itself. Each compiled kernel's registers and spilled registers are printed with it: a row held
whole in registers that does not fit spills, and that decides the long rows.

    PYTHONPATH=. python3 bench/probes/reduction_configs.py [--ops softmax,rms_norm,layer_norm]
        [--shapes 4096x32768,512x32768,32768x4096,16384x1024] [--dtypes float16,float32]

Configs: the whole row in one tile (its block the row length's next power of two) with 1-8 rows
per program and 4-32 warps; and each longer-than-block row looped in blocks of 1024-16384 with
4-16 warps.
"""
import argparse
import os

import torch
from triton.testing import do_bench

from tilegen.measure import check_agreement, load_bench_modules
from tilegen.runtime import op_of
from tilegen.tune import ParallelCompiler


def grid(block, n, count):
    whole = max(16, 1 << (n - 1).bit_length())
    configs = []
    if whole <= 32768:
        for rows in (1, 2, 4, 8):
            if rows * whole <= 16384 or rows == 1:
                if rows <= count:
                    for warps in (4, 8, 16, 32):
                        configs.append({block: whole, "ROWS": rows, "num_warps": warps})
    for b in (1024, 2048, 4096, 8192, 16384):
        if b < n:
            for warps in (4, 8, 16):
                configs.append({block: b, "ROWS": 1, "num_warps": warps})
    return configs


def brief(config, block):
    return f"{block}{config[block]} R{config['ROWS']} w{config['num_warps']}"


def kernel_stats(kernel, before):
    """(registers, spills) of the binaries compiled since `before` (a count per device cache)."""
    found = []
    for device, entry in kernel.device_caches.items():
        cache = entry[0]
        for compiled in list(cache.values())[before.get(device, 0):]:
            found.append((getattr(compiled, "n_regs", -1), getattr(compiled, "n_spills", -1)))
    return found[-1] if found else None


def cache_sizes(kernel):
    return {device: len(entry[0]) for device, entry in kernel.device_caches.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", default="softmax,rms_norm,layer_norm")
    parser.add_argument("--shapes", default="4096x32768,512x32768,32768x4096,16384x1024")
    parser.add_argument("--dtypes", default="float16,float32")
    parser.add_argument("--jobs", type=int, default=min(14, os.cpu_count() or 1))
    args = parser.parse_args()
    shapes = [tuple(int(p) for p in s.split("x")) for s in args.shapes.split(",")]
    dtypes = [getattr(torch, d) for d in args.dtypes.split(",")]
    x = torch.empty(2 ** 28, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    copy_gbs = 2 * x.numel() / (do_bench(lambda: y.copy_(x), return_mode="median") * 1e-3) / 1e9
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}; device-to-device copy {copy_gbs:.0f} GB/s")
    compiler = ParallelCompiler("generated", args.jobs)
    for op_name in args.ops.split(","):
        bench = load_bench_modules([op_name], "generated")[0]
        op = op_of(f"generated.{op_name}")
        chooser, kernel, block = op.configs, op.kernel.fn, op.configs.space.block
        for dtype in dtypes:
            for shape in shapes:
                configs = grid(block, shape[-1], shape[0])
                compiler.compile(op_name, shape, dtype, configs)
                inputs = bench.make_inputs(shape, dtype)
                want = bench.run_torch(inputs)
                moved = bench.bytes_moved(shape, dtype)
                with chooser.recording() as chosen:
                    bench.run_tilegen(inputs)
                picked = chosen[-1][1]
                eager = do_bench(lambda: bench.run_torch(inputs), return_mode="median")
                label = f"{op_name} {str(dtype)[6:]} {'x'.join(map(str, shape))}"
                print(f"\n{label}: eager {eager * 1e3:.1f} us; the op picks {brief(picked, block)}", flush=True)
                rows = []
                for config in configs:
                    before = cache_sizes(kernel)
                    try:
                        with chooser.forcing(config):
                            check_agreement(bench.run_tilegen(inputs), want, f"{label} {brief(config, block)}")
                            stats = kernel_stats(kernel, before)
                            ms = do_bench(lambda: bench.run_tilegen(inputs), warmup=10, rep=50, return_mode="median")
                    except Exception as error:  # noqa: BLE001 - a config that cannot run is reported
                        print(f"  {brief(config, block):22} failed: {type(error).__name__}: {str(error)[:100]}")
                        continue
                    rows.append((ms, config, stats))
                for ms, config, stats in sorted(rows, key=lambda r: r[0]):
                    mark = "  <- picked" if all(config.get(k) == v for k, v in picked.items()) else ""
                    regs = f"regs {stats[0]:3} spills {stats[1]:4}" if stats else "(compiled before)"
                    print(f"  {brief(config, block):22} {ms * 1e3:8.1f} us {moved / ms / 1e6:7.0f} GB/s "
                          f"{moved / ms / 1e6 / copy_gbs:6.1%} of copy  {eager / ms:5.2f}x eager  {regs}{mark}",
                          flush=True)
    compiler.close()


if __name__ == "__main__":
    main()
