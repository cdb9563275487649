"""`tilegen bench`: time every generated op beside its PyTorch counterpart on a CUDA GPU.

For each op, dtype and shape: check tilegen and PyTorch agree on the same inputs, then time
both with triton.testing.do_bench (median). Metrics are latency, TFLOP/s (matmul) or GB/s
(bytes read + written), the speedup over PyTorch, and the fraction of the machine's limits,
measured once per run: device-to-device copy bandwidth and cuBLAS's best dense rate per dtype.
"""

from __future__ import annotations

import csv
import functools
import json
import math
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .measure import (BenchError, as_tuple, check_agreement, check_dtype_names, dtype_name, issue_ms,
                      load_bench_modules, module_dtypes, parse_shapes, settle_call_path, shape_label)

LIMIT_MATMUL = 8192
COPY_BYTES = 1 << 30


@dataclass
class Row:
    op: str
    kind: str
    dtype: str
    shape: str
    provider: str            # "tilegen", "torch", "torch.compile", "tilegen.compile" (tilegen's op
                             # called from a torch.compile'd function) or "copy" (a copy of the same
                             # bytes: what moving them costs at this size, with this timer)
    ms: float
    tflops: float | None
    gbs: float | None
    speedup_vs_torch: float | None = None
    fraction_of_limit: float | None = None
    speedup_vs_compile: float | None = None  # torch.compile time / this time, where it was timed
    fraction_of_copy: float | None = None  # copy time of the same bytes / this time, where it was timed
    peak_mb: float | None = None  # a training step's peak memory above its inputs (--backward)


@dataclass
class Report:
    environment: dict
    limits: dict
    rows: list[Row] = field(default_factory=list)
    host_us: list[dict] = field(default_factory=list)
    cold_start: list[dict] = field(default_factory=list)
    command: str = ""
    rounds: int = 1  # timings per provider and point; the median is reported
    timer: str = "do_bench"  # a key of TIMER_DESCRIPTIONS


# ---- pure helpers (tested on the CPU) -------------------------------------------------------


def throughput(ms: float, flops: int, nbytes: int) -> tuple[float | None, float | None]:
    """(TFLOP/s, GB/s) from a time in milliseconds; None where the count is zero."""
    seconds = ms * 1e-3
    return (flops / seconds / 1e12 if flops else None, nbytes / seconds / 1e9 if nbytes else None)


def fraction_of_limit(row: Row, limits: dict) -> float | None:
    if row.tflops is not None and limits.get("matmul_tflops", {}).get(row.dtype):
        return row.tflops / limits["matmul_tflops"][row.dtype]
    if row.gbs is not None and limits.get("copy_gbs"):
        return row.gbs / limits["copy_gbs"]
    return None


def attach_ratios(rows: list[Row], limits: dict) -> None:
    """Fill speedup (PyTorch time / this time, and torch.compile's where it was timed), fraction
    of the machine's limit, and fraction of a copy of the same bytes where one was timed."""
    def times(provider):
        return {(r.op, r.dtype, r.shape): r.ms for r in rows if r.provider == provider}

    torch_ms, compiled_ms, copy_ms = times("torch"), times("torch.compile"), times("copy")
    for row in rows:
        key = (row.op, row.dtype, row.shape)
        if row.provider == "copy":  # the yardstick itself: no speedup to speak of
            row.fraction_of_limit = fraction_of_limit(row, limits)
            continue
        base, compiled, copy = torch_ms.get(key), compiled_ms.get(key), copy_ms.get(key)
        row.speedup_vs_torch = base / row.ms if base and row.ms else None
        row.speedup_vs_compile = compiled / row.ms if compiled and row.ms else None
        row.fraction_of_copy = copy / row.ms if copy and row.ms else None
        row.fraction_of_limit = fraction_of_limit(row, limits)


def geometric_mean(values) -> float | None:
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def format_table(rows: list[Row]) -> str:
    """One line per (op, dtype, shape): both times, throughputs, speedup, fraction of limit; with
    torch.compile rows, its time and tilegen's speedup over it too."""
    with_compile = any(r.provider == "torch.compile" for r in rows)
    composed = any(r.provider == "tilegen.compile" for r in rows)
    autotuned = any(r.provider == "torch.compile.max-autotune" for r in rows)
    with_memory = any(r.peak_mb is not None for r in rows)
    with_copy = any(r.provider == "copy" for r in rows)
    header = (f"{'op':<24} {'dtype':<9} {'shape':<16} {'tilegen ms':>10} {'torch ms':>9} "
              f"{'tilegen':>12} {'torch':>12} {'speedup':>8} {'of limit':>8}")
    lines = [header + (f" {'copy ms':>8} {'of copy':>7}" if with_copy else "")
             + (f" {'compile ms':>10} {'vs compile':>10}" if with_compile else "")
             + (f" {'in compile ms':>13}" if composed else "")
             + (f" {'max-autotune ms':>15} {'vs it':>6}" if autotuned else "")
             + (f" {'tilegen MiB':>11} {'torch MiB':>9}" if with_memory else "")]
    by_key: dict[tuple, dict[str, Row]] = {}
    for row in rows:
        by_key.setdefault((row.op, row.dtype, row.shape), {})[row.provider] = row
    for (op, dtype, shape), providers in by_key.items():
        ours, theirs = providers.get("tilegen"), providers.get("torch")
        if ours is None or theirs is None:
            continue
        unit = "TFLOP/s" if ours.tflops is not None else "GB/s"
        value = (lambda r: r.tflops if r.tflops is not None else r.gbs)
        line = (f"{op:<24} {dtype:<9} {shape:<16} {ours.ms:>10.4f} {theirs.ms:>9.4f} "
                f"{value(ours):>7.1f} {unit:<4} {value(theirs):>7.1f} {unit:<4} "
                f"{ours.speedup_vs_torch or 0:>7.2f}x {100 * (ours.fraction_of_limit or 0):>7.1f}%")
        if with_copy:
            copy = providers.get("copy")
            line += (f" {copy.ms:>8.4f} {100 * (ours.fraction_of_copy or 0):>6.1f}%" if copy is not None
                     else f" {'':>8} {'':>7}")
        compiled = providers.get("torch.compile")
        if compiled is not None:
            line += f" {compiled.ms:>10.4f} {ours.speedup_vs_compile or 0:>9.2f}x"
        inside = providers.get("tilegen.compile")
        if inside is not None:
            line += f" {inside.ms:>13.4f}"
        tuned = providers.get("torch.compile.max-autotune")
        if tuned is not None:
            line += f" {tuned.ms:>15.4f} {tuned.ms / ours.ms:>5.2f}x"
        if ours.peak_mb is not None and theirs.peak_mb is not None:
            line += f" {ours.peak_mb:>11.1f} {theirs.peak_mb:>9.1f}"
        lines.append(line)
    return "\n".join(lines)


LARGE_ELEMENTS = 1 << 24  # where a memory-bound op should move its bytes as fast as a copy does


def shape_elements(label: str) -> int:
    """The elements of a shape label ("4096x32768", "2^24")."""
    count = 1
    for part in label.split("x"):
        base, _, power = part.partition("^")
        count *= int(base) ** int(power) if power else int(base)
    return count


def summary_lines(rows: list[Row]) -> list[str]:
    """Geometric-mean speedup and the worst shape per op and dtype, against PyTorch eager and,
    where it was timed, against torch.compile."""
    out = []
    from .training_bench import SUFFIX, summary as training_summary

    groups: dict[tuple[str, str], list[Row]] = {}
    for row in rows:
        if row.provider == "tilegen" and not row.op.endswith(SUFFIX):
            groups.setdefault((row.op, row.dtype), []).append(row)
    inside = {(r.op, r.dtype, r.shape): r.ms for r in rows if r.provider == "tilegen.compile"}
    for (op, dtype), items in groups.items():
        mean = geometric_mean(r.speedup_vs_torch for r in items)
        worst = min(items, key=lambda r: r.speedup_vs_torch or 0)
        out.append(f"{op:<24} {dtype:<9} geomean speedup {mean or 0:.2f}x, "
                   f"worst {worst.speedup_vs_torch or 0:.2f}x at {worst.shape}")
        copied = [r for r in items if r.fraction_of_copy]
        if copied:
            worst = min(copied, key=lambda r: r.fraction_of_copy)
            large = [r for r in copied if shape_elements(r.shape) >= LARGE_ELEMENTS]
            line = (f"{op:<24} {dtype:<9} of a copy of its bytes: worst {100 * worst.fraction_of_copy:.0f}% "
                    f"at {worst.shape}")
            if large:
                worst = min(large, key=lambda r: r.fraction_of_copy)
                line += (f"; from 2^{LARGE_ELEMENTS.bit_length() - 1} elements worst "
                         f"{100 * worst.fraction_of_copy:.0f}% at {worst.shape}")
            out.append(line)
        against = [r for r in items if r.speedup_vs_compile]
        if against:
            worst = min(against, key=lambda r: r.speedup_vs_compile)
            out.append(f"{op:<24} {dtype:<9} vs torch.compile: geomean "
                       f"{geometric_mean(r.speedup_vs_compile for r in against):.2f}x, "
                       f"worst {worst.speedup_vs_compile:.2f}x at {worst.shape}")
        composed = [(r, inside[(r.op, r.dtype, r.shape)] / r.ms) for r in items if (r.op, r.dtype, r.shape) in inside]
        if composed:
            worst_row, worst_ratio = max(composed, key=lambda pair: pair[1])
            out.append(f"{op:<24} {dtype:<9} inside torch.compile: geomean {geometric_mean(x for _, x in composed):.2f}x "
                       f"its eager time, worst {worst_ratio:.2f}x at {worst_row.shape}")
    return out + training_summary(rows)


def write_reports(report: Report, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    csv_path = out / "results.csv"
    with csv_path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        env = report.environment
        columns = list(asdict(report.rows[0]).keys()) if report.rows else list(Row.__dataclass_fields__)
        writer.writerow(columns + ["gpu", "torch", "triton"])
        for row in report.rows:
            writer.writerow(list(asdict(row).values()) + [env.get("gpu"), env.get("torch"), env.get("triton")])
    written.append(csv_path)
    json_path = out / "results.json"
    json_path.write_text(json.dumps(asdict(report), indent=1, default=str) + "\n")
    written.append(json_path)
    return written


def write_plots(report: Report, out: Path) -> list[Path]:
    """One PNG per op: throughput of tilegen and PyTorch per shape, one panel per dtype."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("tilegen bench: matplotlib is not installed; skipping plots", file=sys.stderr)
        return []
    written = []
    ops = dict.fromkeys(r.op for r in report.rows)
    for op in ops:
        rows = [r for r in report.rows if r.op == op]
        dtypes = list(dict.fromkeys(r.dtype for r in rows))
        fig, axes = plt.subplots(1, len(dtypes), figsize=(6 * len(dtypes), 4), squeeze=False)
        for ax, dtype in zip(axes[0], dtypes):
            for provider in dict.fromkeys(r.provider for r in rows):
                points = [r for r in rows if r.dtype == dtype and r.provider == provider]
                values = [r.tflops if r.tflops is not None else r.gbs for r in points]
                ax.plot([r.shape for r in points], values, marker="o", label=provider)
            unit = "TFLOP/s" if rows[0].tflops is not None else "GB/s"
            ax.set_title(f"{op} ({dtype})")
            ax.set_ylabel(unit)
            ax.tick_params(axis="x", rotation=45)
            ax.grid(alpha=0.3)
            ax.legend()
        fig.tight_layout()
        path = out / f"{op}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def load_report(folder: Path) -> Report:
    """The Report a run wrote to folder/results.json, to render its README and plots again."""
    path = folder / "results.json"
    try:
        data = json.loads(path.read_text())
        rows = [Row(**row) for row in data.pop("rows")]
        report = Report(**data, rows=rows)
        attach_ratios(report.rows, report.limits)  # runs from before a ratio existed get it too
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise BenchError(f"{path}: not a results file written by `tilegen bench` ({exc})") from None
    return report


def write_readme(report: Report, out: Path, table: str, summary: list[str]) -> Path:
    env = report.environment
    limits = report.limits
    text = [
        f"# tilegen bench results: {env.get('gpu')}",
        "",
        "Made by:",
        "",
        f"    {report.command}",
        "",
        f"GPU {env.get('gpu')}, torch {env.get('torch')}, triton {env.get('triton')}, "
        f"Python {env.get('python')}, {env.get('date')}.",
        "",
        f"Measured limits this run: device-to-device copy {limits.get('copy_gbs', 0):.0f} GB/s (read + write); "
        + ", ".join(f"cuBLAS {k} {v:.0f} TFLOP/s" for k, v in limits.get("matmul_tflops", {}).items())
        + f" ({LIMIT_MATMUL}^3).",
        "",
        "Speedup is PyTorch eager time / tilegen time (above 1: tilegen is faster); 'vs compile', where "
        f"present, is torch.compile time / tilegen time. Times are {TIMER_DESCRIPTIONS.get(report.timer, report.timer)}"
        + (f", each the median of {report.rounds} rounds in which the providers take turns" if report.rounds > 1 else "")
        + ". 'of limit' is tilegen's throughput over the measured limit above. 'of copy', where present, "
        "is the time of a device-to-device copy of the same bytes (half read, half written), timed the "
        "same way, over tilegen's: the bandwidth a kernel of that size can reach, launch latency "
        "and L2 included.",
        "",
        "## Summary", "", "```", *summary, "```", "",
        "## Host overhead (CPU microseconds per call, small inputs)", "",
        _host_method(report.host_us), "", "```",
        *[f"{h['op']:<24} tilegen {h['tilegen_us']:6.1f} us   torch {h['torch_us']:6.1f} us"
          f"   ({launch_paths(h)})" for h in report.host_us],
        "```", "",
        "## All results", "", "```", table, "```", "",
    ]
    if report.cold_start:
        from .coldstart import format_row

        text[-6:-6] = ["## Time to first result (fresh process, first call, compile included)", "", "```",
                       *[format_row(row) for row in report.cold_start], "```", ""]
    path = out / "README.md"
    path.write_text("\n".join(text))
    return path


# ---- GPU side --------------------------------------------------------------------------------

def environment() -> dict:
    import torch
    import triton

    return dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                python=platform.python_version(), date=time.strftime("%Y-%m-%d"))


def measure_limits(dtypes: list[str]) -> dict:
    """Copy bandwidth and cuBLAS's dense rate per dtype, measured on this GPU now."""
    import torch
    from triton.testing import do_bench

    copy = same_bytes_copy(2 * COPY_BYTES, "cuda")  # (its buffers freed when it goes)
    copy_ms = do_bench(functools.partial(copy, None), return_mode="median")
    limits = {"copy_gbs": 2 * COPY_BYTES / (copy_ms * 1e-3) / 1e9, "matmul_tflops": {}}
    del copy
    for name in dtypes:
        dtype = getattr(torch, name)
        if dtype.itemsize == 1:  # fp8: PyTorch multiplies it through torch._scaled_mm (B column-major),
            # at its fastest (the tensor cores' own accumulation): the machine's fp8 rate.
            a = torch.randn(LIMIT_MATMUL, LIMIT_MATMUL, device="cuda").to(dtype)
            b = torch.randn(LIMIT_MATMUL, LIMIT_MATMUL, device="cuda").to(dtype).t()
            one = torch.ones((), device="cuda")
            ms = do_bench(lambda: torch._scaled_mm(a, b, one, one, out_dtype=torch.bfloat16, use_fast_accum=True),
                          return_mode="median")
            limits["matmul_tflops"][name] = 2 * LIMIT_MATMUL**3 / (ms * 1e-3) / 1e12
            continue
        a = torch.randn(LIMIT_MATMUL, LIMIT_MATMUL, device="cuda", dtype=dtype)
        b = torch.randn(LIMIT_MATMUL, LIMIT_MATMUL, device="cuda", dtype=dtype)
        ms = do_bench(lambda: torch.mm(a, b), return_mode="median")
        limits["matmul_tflops"][name] = 2 * LIMIT_MATMUL**3 / (ms * 1e-3) / 1e12
    return limits


HOST_BATCHES = 7


def host_overhead(module, calls: int = 1000, batches: int = HOST_BATCHES) -> dict:
    """CPU time per call on a small input: launch cost, not GPU time.

    One loop of calls moves by a third from run to run (other processes, clocks, the allocator),
    so tilegen and torch take turns over `batches` batches of `calls` calls and each reports its
    median batch: a slow moment then hits both sides, and one batch cannot set the result.
    """
    import torch

    dtype = module.DTYPES[0]
    inputs = module.make_inputs(module.SMALL_SHAPE, dtype)
    providers = (("tilegen", module.run_tilegen), ("torch", module.run_torch))
    for _, fn in providers:
        for _ in range(200):
            fn(inputs)
    torch.cuda.synchronize()
    per_call = {name: [] for name, _ in providers}
    for _ in range(batches):
        for name, fn in providers:
            per_call[name].append(issue_ms(fn, calls, inputs) * 1e3)
    result = {"op": module.OP, "batches": batches, "calls": calls}
    for name, samples in per_call.items():
        result[f"{name}_us"] = statistics.median(samples)
    result["fast_path"] = call_path_served(module)
    return result


def call_path_served(module) -> bool:
    """Whether the compiled call path served calls of the op that bench `module` times."""
    from .runtime import op_of

    try:
        table = op_of(module.__name__.replace(".bench.bench_", ".")).call_path.table
    except LookupError:  # a stand-in with no generated op behind it
        return False
    return bool(table is not None and table.hits)


def launch_paths(host: dict) -> str:
    """How an op's calls launched in its host timing, for the reports (runs from before the
    compiled call path leave it out)."""
    parts = []
    if "direct_launch" in host:  # runs from before the runtime library had one fast path
        parts.append(f"direct launch: {'yes' if host['direct_launch'] else 'no'}")
    if "fast_path" in host:
        parts.append(f"compiled call path: {'yes' if host['fast_path'] else 'no'}")
    return ", ".join(parts) or "launch path not recorded"


def _host_method(host_us: list[dict]) -> str:
    """How the host times were taken (runs made before batches existed timed one loop)."""
    batches = {(h.get("batches"), h.get("calls")) for h in host_us}
    if len(batches) == 1 and None not in next(iter(batches)):
        count, calls = next(iter(batches))
        return f"Each the median of {count} batches of {calls} calls, tilegen and torch taking turns."
    return "Each one loop of calls per provider."


def compile_for_one_shape(fn, inputs):
    """torch.compile (max-autotune) specialized to these inputs, checked to match eager.

    One compiled function across shapes would see a second shape, mark its sizes dynamic and
    time a generic kernel (or fall back to eager past the recompile limit), so each shape gets a
    fresh, static compile, as a model with fixed shapes would.
    """
    import torch

    torch._dynamo.reset()
    compiled = torch.compile(fn, mode="max-autotune-no-cudagraphs", dynamic=False)
    got, want = compiled(inputs), fn(inputs)
    for g, w in zip(as_tuple(got), as_tuple(want)):
        torch.testing.assert_close(g.float(), w.float(), atol=2e-2, rtol=2e-2, equal_nan=True)
    return compiled


# How a point can be timed (--timer): what each measures, as the report says it.
TIMER_DESCRIPTIONS = {
    "do_bench": "medians of triton.testing.do_bench (each call timed alone, L2 emptied before it: "
                "the launch latency of a lone call is in the time)",
    "cudagraph": "medians of triton.testing.do_bench_cudagraph (back-to-back calls replayed from a "
                 "CUDA graph: the GPU time per call in a stream of calls, with no host time and no L2 "
                 "flush, so inputs that fit in L2 are read from it)",
    "loop": "medians of 5 rounds of back-to-back calls, each round's wall time over its calls after "
            "a synchronize (host and GPU time both: what a loop of calls, such as training steps, waits "
            "for; no L2 flush)",
}

LOOP_ROUND_MS = 50.0  # the loop timer's round: long enough that the host's clock and the final sync are noise


def loop_ms(fn, synchronize, clock=None, rounds: int = 5) -> float:
    """Milliseconds per call of `fn` called back to back: `rounds` rounds of as many calls as fill
    LOOP_ROUND_MS (from a first estimate, 1000 at most), each timed from a synchronized start to
    a synchronized end; the median round. do_bench times each call alone after emptying L2, and a
    call whose host time is longer than its kernels reads anywhere from the kernels' time to the
    host's, from one point to the next, as that host time hides under L2's refill or not."""
    clock = clock or time.perf_counter
    fn()  # warm (and the first call's one-off work out of the estimate)
    synchronize()
    start = clock()
    for _ in range(3):
        fn()
    synchronize()
    estimate_ms = max((clock() - start) * 1e3 / 3, 1e-6)
    calls = max(1, min(1000, int(LOOP_ROUND_MS / estimate_ms)))
    per_call = []
    for _ in range(rounds):
        synchronize()
        start = clock()
        for _ in range(calls):
            fn()
        synchronize()
        per_call.append((clock() - start) * 1e3 / calls)
    return statistics.median(per_call)


def timer_function(timer: str):
    """fn -> milliseconds, for a key of TIMER_DESCRIPTIONS."""
    import triton.testing

    if timer == "cudagraph":
        return lambda fn: triton.testing.do_bench_cudagraph(fn, return_mode="median")
    if timer == "loop":
        import torch

        return lambda fn: loop_ms(fn, torch.cuda.synchronize)
    return lambda fn: triton.testing.do_bench(fn, return_mode="median")


def bench_module(module, shapes, providers, progress, rounds: int = 1, timer: str = "do_bench",
                 dtypes=None) -> list[Row]:
    """Rows for each of `dtypes` (default: every dtype the op benchmarks) and shape of one op.
    With rounds > 1 each provider is timed that many times, the providers taking turns, and the
    median is kept: a short kernel's time moves by several percent from one do_bench to the next,
    and taking turns spreads any drift of the GPU's clocks over all of them."""
    import torch

    measure = timer_function(timer)

    rows = []
    for dtype in module.DTYPES if dtypes is None else dtypes:
        name = dtype_name(dtype)
        for shape in shapes or module.SHAPES:
            label = f"{module.OP} {name} {shape_label(shape)}"
            inputs = module.make_inputs(shape, dtype)
            check_agreement(module.run_tilegen(inputs), module.run_torch(inputs), label)
            fns = {"tilegen": module.run_tilegen, "torch": module.run_torch}
            if "torch.compile" in providers:
                fns["torch.compile"] = compile_for_one_shape(module.run_torch, inputs)
                # tilegen's op composed into a compiled function: what a model under torch.compile gets.
                fns["tilegen.compile"] = compile_for_one_shape(module.run_tilegen, inputs)
            if "copy" in providers and module.KIND != "matmul":  # memory-bound: its bytes are its limit
                fns["copy"] = same_bytes_copy(module.bytes_moved(shape, dtype), inputs[0].device)
            samples = {provider: [] for provider in fns}
            for _ in range(rounds):
                for provider, fn in fns.items():
                    samples[provider].append(measure(functools.partial(fn, inputs)))
            times = []
            for provider, ms_list in samples.items():
                ms = statistics.median(ms_list)
                tflops, gbs = throughput(ms, module.flops(shape), 0 if module.KIND == "matmul"
                                         else module.bytes_moved(shape, dtype))
                rows.append(Row(module.OP, module.KIND, name, shape_label(shape), provider, ms, tflops, gbs))
                times.append(f"{provider} {ms * 1e3:.1f} us")
            # Each point's times reach the log as it finishes, so a run cut short keeps them.
            progress(f"{label}: {', '.join(times)}" + (f" (medians of {rounds} rounds)" if rounds > 1 else ""))
            del inputs
        torch.cuda.empty_cache()
    return rows


def same_bytes_copy(nbytes: int, device):
    """A provider that copies nbytes / 2 bytes into another buffer: a memory-bound op's bytes
    moved by the simplest kernel there is, the yardstick for its bandwidth at this size."""
    import torch

    source = torch.empty(max(1, nbytes // 2), dtype=torch.uint8, device=device)
    target = torch.empty_like(source)
    return lambda _inputs: target.copy_(source)


def make_row(module, dtype_label, shape, provider, ms, flops, nbytes) -> Row:
    tflops, gbs = throughput(ms, flops, nbytes)
    return Row(module.OP, module.KIND, dtype_label, shape_label(shape), provider, ms, tflops, gbs)


def run(ops: list[str], package: str, out: Path, shapes_text: str | None, compile_too: bool,
        command: str, cold_start_ops: list[str] = (), rounds: int = 1, timer: str = "do_bench",
        backward: bool = False, dtypes: list[str] = ()) -> Report:
    import torch

    if rounds < 1:
        raise BenchError(f"--rounds must be at least 1, got {rounds}")
    if timer not in TIMER_DESCRIPTIONS:
        raise BenchError(f"--timer must be one of {', '.join(TIMER_DESCRIPTIONS)}, got {timer!r}")
    if backward and (rounds != 1 or timer == "cudagraph"):
        raise BenchError("--backward times each point once, with do_bench or the loop timer; it takes no "
                         "--rounds or --timer cudagraph")
    if timer == "cudagraph" and compile_too:
        raise BenchError("--timer cudagraph does not time torch.compile (its kernels are captured "
                         "by its own CUDA graphs); time --compile with do_bench")

    if not torch.cuda.is_available():
        raise BenchError("no CUDA GPU found; `tilegen bench` times compiled kernels and needs one "
                         "(the interpreter cannot time kernels)")
    modules = load_bench_modules(ops, package)
    check_dtype_names(modules, dtypes)
    settle_call_path(training=backward)
    if cold_start_ops:
        load_bench_modules(list(cold_start_ops), package)  # unknown names fail here, before any timing
    matmul_dtypes = sorted({dtype_name(d) for m in modules for d in module_dtypes(m, dtypes) if m.KIND == "matmul"})
    report = Report(environment(), measure_limits(matmul_dtypes or ["float16"]), command=command, rounds=rounds,
                    timer=timer)
    providers = ["tilegen", "torch", "copy"] + (["torch.compile"] if compile_too else [])
    total = sum(len(module_dtypes(m, dtypes)) * len(parse_shapes(shapes_text, m.KIND, getattr(m, "BATCHED", False)) or m.SHAPES) for m in modules)
    done = [0]

    def progress(label):
        done[0] += 1
        print(f"[{done[0]:>3}/{total}] {label}", file=sys.stderr, flush=True)

    for module in modules:
        shapes = parse_shapes(shapes_text, module.KIND, getattr(module, "BATCHED", False))
        chosen = module_dtypes(module, dtypes)
        if backward:
            from . import training_bench

            report.rows.extend(training_bench.bench_module(module, shapes, compile_too, progress,
                                                           timer_function(timer), make_row, chosen))
            continue
        report.rows.extend(bench_module(module, shapes, providers, progress, rounds, timer, chosen))
        report.host_us.append(host_overhead(module))
    if cold_start_ops:
        from .coldstart import measure

        report.cold_start = measure(Path(package), list(cold_start_ops),
                                    lambda line: print(f"cold start: {line}", file=sys.stderr, flush=True))
    attach_ratios(report.rows, report.limits)
    return report


