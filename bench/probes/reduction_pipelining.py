"""Why does torch.compile read a long row faster? For a reduction op's looped rows: the op's own
kernel, variants of its source (each loop along the row a `tl.range` with explicit software
pipelining stages, or unrolled), and launch-wide num_stages, each against torch.compile
(max-autotune, no CUDA graphs) and eager on the same inputs, timed as `tilegen bench` times
(do_bench medians, L2 emptied first). TorchInductor's kernels and the configs its autotuner
picked are written beside the table, to read what it does differently.

    PYTHONPATH=. python3 bench/probes/reduction_pipelining.py OUTDIR [--ops rms_norm,softmax,layer_norm]
        [--shapes 4096x32768] [--dtype float16]

It rewrites the kernels of tree 7788c88 (one block a loop trip), where it was run; the tree since
loops in groups of blocks (what it found), and the probe refuses to run on those.
"""
import argparse
import glob
import importlib.util
import inspect
import json
import os
import sys
import tempfile
import textwrap

import torch
from triton.testing import do_bench

from tilegen.measure import check_agreement, load_bench_modules
from tilegen.runtime import op_of

LOOP = "range(0, row_length, BLOCK_N)"


def explicit(**options):
    """Each loop along the row a `tl.range` with these options."""
    text = ", ".join(f"{k}={v}" for k, v in options.items())
    return lambda src: src.replace(LOOP, f"tl.range(0, row_length, BLOCK_N, {text})")


def static_blocks(constant_length=False):
    """Each loop along the row split in two: an outer loop over groups of N_UNROLL blocks, and an
    inner tl.static_range over the group's blocks (so their loads are independent, issued
    together); with constant_length the row length is a constexpr too (ROW_LENGTH), as
    TorchInductor's kernels have it (its trip counts and the masks of whole blocks fold away)."""
    def transform(src):
        lines, out = src.split("\n"), []
        i = 0
        while i < len(lines):
            line = lines[i]
            if line.strip() == f"for start in {LOOP}:":
                indent = line[:len(line) - len(line.lstrip())]
                out.append(f"{indent}for _group in range(0, row_length, BLOCK_N * N_UNROLL):")
                out.append(f"{indent}    for _block in tl.static_range(N_UNROLL):")
                out.append(f"{indent}        start = _group + _block * BLOCK_N")
                i += 1
                while i < len(lines) and (not lines[i].strip() or lines[i].startswith(indent + " ")):
                    out.append("    " + lines[i] if lines[i].strip() else lines[i])
                    i += 1
                continue
            out.append(line)
            if line.strip() == "BLOCK_N: tl.constexpr,":
                out.append(line.replace("BLOCK_N", "N_UNROLL").replace(",", ",  # blocks a group"))
                if constant_length:
                    out.append(line.replace("BLOCK_N", "ROW_LENGTH"))
            if constant_length and line.startswith("    compute = "):
                out.append("    row_length = ROW_LENGTH")
            i += 1
        return "\n".join(out)
    return transform


def unchanged(src):
    return src


# name: (source transform, launch num_stages, extra constexprs from (row length, block))
VARIANTS = {
    "as generated": (unchanged, None, None),
    "launch num_stages=1": (unchanged, 1, None),
    "tl.range num_stages=2": (explicit(num_stages=2), None, None),
    "tl.range num_stages=3": (explicit(num_stages=3), None, None),
    "tl.range unroll 2": (explicit(loop_unroll_factor=2), None, None),
    "static blocks": (static_blocks(), None, lambda n, b: {"N_UNROLL": min(8, -(-n // b))}),
    "static blocks and constant length": (static_blocks(True), None,
                                       lambda n, b: {"N_UNROLL": min(8, -(-n // b)), "ROW_LENGTH": n}),
}


def variant_kernel(fn, transform, folder, name):
    """The kernel's source, transformed, compiled from a module of its own."""
    path = os.path.join(folder, f"{name}.py")
    with open(path, "w") as f:
        f.write("import triton\nimport triton.language as tl\n"
                "from tilegen.runtime.sync import wait_for_every_program\n\n\n@triton.jit\n")
        # Triton keeps the source from `def` on (under the interpreter, the function itself).
        source = getattr(fn, "src", None) or textwrap.dedent(inspect.getsource(getattr(fn, "fn", fn)))
        source = source[source.index("def "):]
        if transform is not unchanged and f"for start in {LOOP}:" not in source:
            # The variants rewrite the plain loop along the row that kernels had up to 7788c88;
            # today's kernels loop in groups already.
            raise SystemExit(f"{fn.__name__}: no `{LOOP}` loop to rewrite; run this probe on tree 7788c88")
        f.write(transform(source))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return getattr(module, fn.__name__)


def recorded_launch(op, chooser, config, run):
    """(grid, args, constexprs, result) of the op's own launch with `config`."""
    seen = {}
    original = op.kernel.launch

    def record(grid, args, varying, constexprs, num_warps, num_stages=None):
        seen.update(grid=grid, args=args, constexprs=dict(constexprs))
        return original(grid, args, varying, constexprs, num_warps, num_stages)

    op.kernel.launch = record
    try:
        with chooser.forcing(config):
            result = run()
    finally:
        del op.kernel.launch
    return seen["grid"], seen["args"], seen["constexprs"], result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--ops", default="rms_norm,softmax,layer_norm")
    parser.add_argument("--shapes", default="4096x32768")
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--blocks", default="4096,8192")
    parser.add_argument("--warps", default="16,32")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated names")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    cache = tempfile.mkdtemp()
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
    from torch._inductor.utils import run_and_get_code

    dtype = getattr(torch, args.dtype)
    folder = tempfile.mkdtemp()
    x = torch.empty(2 ** 28, dtype=torch.uint8, device="cuda")
    copy_gbs = 2 * x.numel() / (do_bench(lambda: torch.empty_like(x).copy_(x), return_mode="median") * 1e-3) / 1e9
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}; device-to-device copy {copy_gbs:.0f} GB/s")
    count = 0
    for op_name in args.ops.split(","):
        bench = load_bench_modules([op_name], "generated")[0]
        op = op_of(f"generated.{op_name}")
        chooser, fn, block = op.configs, op.kernel.fn, op.configs.space.block
        for shape_text in args.shapes.split(","):
            shape = tuple(int(p) for p in shape_text.split("x"))
            inputs = bench.make_inputs(shape, dtype)
            want = bench.run_torch(inputs)
            moved = bench.bytes_moved(shape, dtype)
            label = f"{op_name} {args.dtype} {shape_text}"

            def line(name, ms):
                return f"  {name:44} {ms * 1e3:8.1f} us {moved / ms / 1e6:7.0f} GB/s {moved / ms / 1e6 / copy_gbs:6.1%} of copy"

            eager = do_bench(lambda: bench.run_torch(inputs), return_mode="median")
            compiled = torch.compile(bench.run_torch, mode="max-autotune-no-cudagraphs")
            _, codes = run_and_get_code(compiled, inputs)
            compiled_ms = do_bench(lambda: compiled(inputs), return_mode="median")
            own = do_bench(lambda: bench.run_tilegen(inputs), return_mode="median")
            with open(os.path.join(args.out, f"inductor_{op_name}_{shape_text}.py"), "w") as f:
                f.write("\n\n".join(codes))
            print(f"\n{label}")
            print(line("eager", eager))
            print(line("torch.compile", compiled_ms))
            print(line("tilegen (its own config)", own), flush=True)
            for block_n in [int(b) for b in args.blocks.split(",")]:
                for warps in [int(w) for w in args.warps.split(",")]:
                    config = {block: block_n, "ROWS": 1, "num_warps": warps}
                    grid, launch_args, constexprs, result = recorded_launch(op, chooser, config, lambda: bench.run_tilegen(inputs))
                    for name in args.variants.split(","):
                        transform, stages, extra = VARIANTS[name]
                        count += 1
                        kernel = variant_kernel(fn, transform, folder, f"variant_{count}")
                        options = {"num_warps": warps, **({"num_stages": stages} if stages else {})}

                        more = extra(shape[-1], block_n) if extra else {}

                        def call():
                            kernel[grid](*launch_args, **constexprs, **more, **options)
                        try:
                            for tensor in result if isinstance(result, tuple) else (result,):
                                tensor.fill_(float("nan"))  # the variant writes into the op's outputs
                            call()
                            check_agreement(result, want, f"{label} {name}")
                            ms = do_bench(call, return_mode="median")
                        except Exception as error:  # noqa: BLE001 - a variant that cannot run is reported
                            print(f"  {block}{block_n} w{warps} {name}: failed {type(error).__name__}: {str(error)[:120]}")
                            continue
                        print(line(f"{block}{block_n} w{warps} {name}", ms), flush=True)
    picked = {}
    for path in glob.glob(os.path.join(cache, "**", "*.best_config"), recursive=True):
        with open(path) as f:
            picked[os.path.basename(path)] = json.load(f)
    with open(os.path.join(args.out, "inductor_best_configs.json"), "w") as f:
        json.dump(picked, f, indent=1, sort_keys=True)
    print(f"\ninductor's picked configs: {len(picked)} in inductor_best_configs.json")


if __name__ == "__main__":
    main()
