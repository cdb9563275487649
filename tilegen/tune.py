"""`tilegen tune`: measure every candidate config on this GPU and record the best per shape bucket.

The result is merged into tilegen/tables/<kind>.json under the GPU's name; the next
`tilegen build` renders it into each op of that kind, which then launches the measured config
with no runtime tuning. With scope "op" it goes to the op's own table instead
(tilegen/tables/ops/<op>.json), which only that op reads, ahead of its kind's. With --backward it
times an op's backward kernel, as a training step's backward runs it, into that kernel's own table
(tilegen/tables/ops/<op>_backward.json).
"""

from __future__ import annotations

import functools
import statistics
import sys
import time
from pathlib import Path

from .measure import (BenchError, as_tuple, check_agreement, check_dtype_names, dtype_name, issue_ms,
                      load_bench_modules, module_dtypes, parse_shapes, settle_call_path, shape_label)
from .runtime import backward_op_of, device_facts, op_of
from .runtime.configs import through_descriptors, traced_section
from .schema import BLOCK_FIELDS, FIELD_DEFAULTS, FLAG_FIELDS, rename_blocks, tile_of
from .tables import SCOPES, TABLE_DIR, backward_table_name, format_key, merge_entries


def _warm_up_gpu(seconds: float = 1.0) -> None:
    """Run dense work so clocks are up before the first measurement."""
    import time

    import torch

    a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(20):
            a @ a
        torch.cuda.synchronize()


# Each pass times every config in this many sweeps, in alternating order, and ranks configs by
# the median of their samples: one slow or lucky timing can neither drop a config from the
# leaders nor make it one (one timing each left the best tile of matmul_residual_scaled at
# 64x4096x4096 fp16 out of the leaders; tune/matmul_residual_scaled_3fbd522.log).
SWEEPS = 3
# Launches (a tile and how it launches) kept from the first pass whose warps and stages are then varied.
REFINED_LAUNCHES = 4
# On/off fields the first pass leaves off and the second tries. A reduction's row length compiled
# in (FIXED_N) moves its time as warps do (in 8192 blocks, 16 warps gained 15% with it where 32
# gained 2%: bench/probes/reduction_pipelining.txt), and compiles a kernel per length; a looped
# row's cache hints (EVICT) pay with it and cost without it
# (bench/results/h200/reductions/fixed_row_length/).
SECOND_PASS_FLAGS = ("FIXED_N", "EVICT")
# What the second pass varies; everything else of a config is its launch, ranked in the first.
REFINED_FIELDS = ("num_warps", "num_stages") + SECOND_PASS_FLAGS
# The leading configs of each shape are timed this many more times, until the leaders hold.
FINALISTS = 3
CONFIRM_ROUNDS = 2
# The finalists are then timed together in this many rounds of their own, which alone decide.
DECIDING_ROUNDS = 3


# Calls issued for each config to measure its host work, in batches (see host_ms).
HOST_CALLS = 50
HOST_BATCHES = 3


def host_ms(fn, calls: int = HOST_CALLS, batches: int = HOST_BATCHES) -> float:
    """Milliseconds of host work per call of `fn`: the time to issue `calls` calls, the GPU left
    to catch up afterwards; the least of `batches` such batches. Fifty launches do not fill the
    launch queue, so the host never waits on the GPU here, and a long kernel does not inflate
    its config's host time. Other processes and clock changes only ever add time, and one batch
    moves by several microseconds a call on a busy host: enough, through call_cost, to drop a
    config from the finalists on one unlucky batch (matmul_residual_scaled's split-K 2 tile at
    64x4096x4096, which is faster in kernel time, bench/probes/config_rounds_residual.txt)."""
    import torch

    fn()
    torch.cuda.synchronize()
    return min(issue_ms(fn, calls) for _ in range(batches))


def call_cost(kernel_ms: float, host: float, host_floor: float) -> float:
    """What a call costs, for ranking configs: its kernel time, plus the host work it does beyond
    what every config of the shape does (`host_floor`) and beyond its own kernel's time, which
    a loop of calls would then wait on. A call through tensor descriptors keeps the host about
    28 us longer than one through pointers (bench/probes/tma_host.txt): more than a short
    kernel lasts, but hidden behind a long one. Host work every config shares cannot tell
    configs apart, so it is left out, and the short kernel that is fastest wins."""
    return kernel_ms + max(0.0, host - max(kernel_ms, host_floor))


def launch_of(config: dict) -> tuple:
    """A config less its warps and stages: its tile and how it launches (descriptor loads and
    stores, persistent, flattened, a reduction's rows and blocks a trip), which the first pass ranks."""
    return tuple((k, v) for k, v in sorted(config.items()) if k not in REFINED_FIELDS)


def first_pass(base: list, explored: list) -> list:
    """The configs the first pass times: every launch among `explored` once, with its tile's
    default warps and stages (`base`: a config per tile), or where tuning alone tries the tile
    (a reduction's other rows per program), with each of its own. How a tile launches moves its
    time more than its warps and stages do (attention's scores, 32 x 2048x2048x128: one 128x128
    tile 209 us tiled through pointers, 98 us persistent and flattened with descriptor stores,
    bench/results/h200/store_callpath/bmm_forced_profile.txt), so no launch waits on its tile's
    default launch to be tried."""
    defaults = {tile_of(c): tuple(c.get(f) for f in REFINED_FIELDS) for c in base}
    launches: dict[tuple, list] = {}
    for config in explored:
        launches.setdefault(launch_of(config), []).append(config)
    first = []
    for group in launches.values():
        group = [c for c in group if not any(c.get(f) for f in SECOND_PASS_FLAGS)] or group
        default = defaults.get(tile_of(group[0]))
        first += [c for c in group if tuple(c.get(f) for f in REFINED_FIELDS) == default] or group
    return first


def served_calls(op) -> int | None:
    """How many calls the compiled call paths of `op` (its own, its training calls', its backward
    products') have served so far; None where there is no compiled call path to serve them."""
    from .runtime import callpath

    if callpath.load() is None:
        return None
    return sum(path.table.hits for path in op.paths() if path.table is not None)


def identity(config: dict) -> tuple:
    """A config as a hashable value."""
    return tuple(sorted(config.items()))


def brief(config: dict) -> str:
    """A config on one short line: `BM128 BN256 BK64 w8 s3 TMA` (flags only where set; a field
    with a default, a split or a reduction's UNROLL, only where not that)."""
    short = {"num_warps": "w", "num_stages": "s"}
    parts = []
    for name, value in config.items():
        if name in FLAG_FIELDS:
            parts += [name] if value else []
        elif name not in FIELD_DEFAULTS or value != FIELD_DEFAULTS[name]:
            parts.append(f"{short.get(name, name)}{value}")
    return " ".join(parts)


def forward_calls(module, inputs, dtype):
    """(call, check) for the op's forward kernel: a call on `inputs`, and a check (raising, naming
    its label) that a config's result matches PyTorch's: the outputs the benchmark compares
    (benchgen.compared_outputs; every output of every candidate config is checked by the op's
    generated test_every_candidate_config)."""
    want = functools.cache(lambda: module.run_torch(inputs))  # computed when a check first needs it
    return (lambda: module.run_tilegen(inputs)), lambda got, label: check_agreement(got, want(), label, tolerance=5e-2)


def backward_calls(module, inputs, dtype):
    """(call, check) for the op's backward kernel: the backward of one training step on `inputs`
    (the forward runs once, here, and keeps its graph: each call is the backward alone, as a
    training step runs it), and a check of a config's gradients against PyTorch autograd's of the
    same math for the same output gradients."""
    import torch

    from .training_bench import gradient_tolerance, gradients_agree, leaves, output_seeds, recorded

    seeds = output_seeds(module, inputs)

    def gradients(forward, retain_graph=False):
        """The gradients of one forward's float leaves (a function computing them: the forward runs now)."""
        tensors = leaves(inputs)
        outputs, grads = recorded([o for o in as_tuple(forward(tensors)) if o.is_floating_point()], seeds)
        floats = [t for t in tensors if t.is_floating_point()]
        return lambda: torch.autograd.grad(outputs, floats, grads, retain_graph=retain_graph)

    want = functools.cache(lambda: gradients(module.run_torch)())  # as in forward_calls
    tolerance = gradient_tolerance(dtype, module)
    return (gradients(module.run_tilegen, retain_graph=True),
            lambda got, label: gradients_agree(got, want(), tolerance, label))


def tune_module(module, op, shapes, progress, dtypes=(), compiler=None, on_key=None,
                calls=forward_calls, traced=False) -> dict[str, dict]:
    """{key: best config} for one op over its dtypes and shapes; `on_key(key, config, twin)` hears
    of each key as soon as its shape is done in every dtype (so a run cut short keeps what it
    found), with the fastest config that loads through pointers where the best loads through
    descriptors (its twin for traced launches: configs.traced_entries), else None. With `traced`
    only launches through pointers are candidates: the best of them is what traced launches
    (torch.compile, export) of that key should take.

    Two passes per shape: every candidate launch (a tile and how it launches: descriptor loads
    and stores, persistent, flattened) with its tile's default warps and stages (and every tile
    only tuning explores, such as a reduction's other rows per program, with each of its warp
    counts: first_pass), then the REFINED_LAUNCHES fastest launches with the other warps and
    stages the spec leaves open; each pass times its configs in SWEEPS sweeps (see alternate_rounds). Configs rank by the median of
    their samples. The FINALISTS leading configs are then timed CONFIRM_ROUNDS more times, until
    the leaders are all confirmed; the FINALISTS leaders then meet in DECIDING_ROUNDS rounds of
    their own, which alone rank them (alternate_rounds again).
    Kernels are timed as `tilegen bench` times them (triton.testing.do_bench, which empties
    L2 before each run, so operands come from HBM as a model's weights do); a config whose host
    work outlasts both its kernel and the other configs' host work pays the excess (call_cost).
    Dtypes of one element size share a key: among the configs timed for all of them, the least total time,
    each dtype's times taken relative to its fastest, wins. `compiler` (a ParallelCompiler)
    compiles each pass's configs on several cores before the timing loop needs them. `calls`
    says what is timed: the forward (forward_calls), or with `op` the op's backward kernel, its
    backward (backward_calls).
    """
    import torch
    from triton.runtime.errors import OutOfResources
    from triton.testing import do_bench

    chooser = op.configs
    facts = device_facts(torch.device("cuda"))

    def loads_through_descriptors(config, inputs):
        if not hasattr(op, "loads_through_descriptors"):
            return True
        # A batched op's operands by their first matrices: a batch loads through 3-D descriptors
        # (MatmulOp._launch), which the inputs' contiguous batches allow.
        return op.loads_through_descriptors(config, *(inputs[i][(0,) * (inputs[i].dim() - 2)] for i in op.operands))

    def stores_through_descriptors(config, outputs):
        # `outputs`: a forward call's results, the tensors its kernel stores (a backward's
        # results are not its products' outputs: those configs are all timed).
        if not config.get("TMA_STORE") or outputs is None or not hasattr(op, "stores_through_descriptors"):
            return True
        return op.stores_through_descriptors(config, outputs)
    scores: dict[tuple, dict[tuple, list[float]]] = {}
    configs: dict[tuple, dict] = {}
    chosen_dtypes = module_dtypes(module, dtypes)
    _refuse_shapes_sharing_a_key(module, chooser, shapes or module.SHAPES, chosen_dtypes[:1], calls)
    best = {}
    for shape in shapes or module.SHAPES:
        keys = []
        for dtype in chosen_dtypes:
            inputs = module.make_inputs(shape, dtype)
            call, check = calls(module, inputs, dtype)
            with chooser.recording() as chosen:
                got = call()
            key = chosen[-1][0]
            keys.append(key)
            results = got if isinstance(got, (tuple, list)) else (got,)
            # (A call's outputs are contiguous: their batch axes flatten into one.)
            outputs = [t.flatten(0, -3) if t.dim() > 3 else t for t in results if isinstance(t, torch.Tensor)] \
                if calls is forward_calls else None
            samples: dict[tuple, list[float]] = {}  # kernel ms per config identity, in timing order
            host: dict[tuple, list[float]] = {}  # host ms per call, likewise
            # Configs some of whose repeat calls the compiled call path served (None: there is no
            # call path). The others' host time is Triton's launch (tens to hundreds of us a call),
            # which ranks them as it would a user's calls, but which no launch the call path could
            # learn should pay (a batched output stored through descriptors was such a launch until
            # the call path knew views of outputs): the log names them.
            served_ever: set[tuple] | None = None if served_calls(op) is None else set()

            def time_config(config):
                """(kernel ms, host ms) of a call with `config`, or None where it does not fit the GPU."""
                with chooser.forcing(config):
                    try:
                        got = call()
                    except OutOfResources as exc:  # the estimate of shared memory was short
                        progress(f"{module.OP}: skipped {config}: {exc}")
                        return None
                    check(got, f"{module.OP} {shape_label(shape)} {config}")
                    served = served_calls(op)
                    timing = do_bench(call, warmup=10, rep=40, return_mode="median"), host_ms(call)
                    if served_ever is not None and served_calls(op) != served:
                        served_ever.add(identity(config))
                    return timing

            def record(ident, timing):
                samples.setdefault(ident, []).append(timing[0])
                host.setdefault(ident, []).append(timing[1])

            def measure(candidates):
                # A TMA config whose operands cannot take descriptors would time the pointer
                # path again, and could win by noise an entry that aligned shapes then follow.
                candidates = [c for c in candidates if not c.get("TMA") or loads_through_descriptors(c, inputs)]
                candidates = [c for c in candidates if stores_through_descriptors(c, outputs)]  # (likewise)
                if compiler is not None:
                    compiler.compile(module.OP, shape, dtype, candidates)
                by_ident = {identity(c): dict(c) for c in candidates}
                timings = alternate_rounds(list(by_ident), lambda ident: time_config(by_ident[ident]), SWEEPS)
                for ident, timed in timings.items():  # in the order first timed
                    configs[ident] = by_ident[ident]
                    for timing in timed:
                        record(ident, timing)

            def host_floor():
                """The least host time among the shape's configs (see call_cost)."""
                return min(statistics.median(times) for times in host.values())

            def rank_ms(ident, floor):
                return call_cost(statistics.median(samples[ident]), statistics.median(host[ident]), floor)

            def ranked():
                floor = host_floor()
                return sorted(samples, key=lambda ident: rank_ms(ident, floor))  # stable: ties keep timing order

            def offered(explore=False):
                """The key's candidates; with `traced`, those a traced launch can make."""
                return [c for c in chooser.candidates(facts, key, explore=explore)
                        if not (traced and through_descriptors(c))]

            explored = offered(explore=True)
            # Tiles only tuning tries (a reduction's other rows per program) have no default warps to
            # stand for them: each comes with all of its own, or one poor pick would drop the tile
            # (layer_norm 32768x4096: four rows a program ran 138 us with 8 warps, 213 with 16).
            first = first_pass(offered(), explored)
            started = time.perf_counter()
            measure(first)
            best_launches = list(dict.fromkeys(launch_of(configs[ident]) for ident in ranked()))
            seen = {identity(c) for c in first}
            refined = [c for c in explored if launch_of(c) in best_launches[:REFINED_LAUNCHES] and identity(c) not in seen]
            # (A line while the shape is under way: a large menu, a float32 key's 500 launches,
            # takes minutes before its result line.)
            progress(f"{module.OP} {dtype_name(dtype)} {shape_label(shape)}: {len(first)} launches timed in "
                     f"{time.perf_counter() - started:.0f} s; next {len(refined)} configs of the "
                     f"{min(REFINED_LAUNCHES, len(best_launches))} fastest launches")
            measure(refined)
            if not samples:
                raise BenchError(f"{module.OP} {shape_label(shape)}: no candidate config could run")
            # A few timings can still flatter a config whose speed varies from run to run
            # (tensor-descriptor loads at 1024^3 timed 8.7 us in some runs and 13-19 us in others).
            # The leaders are timed again, in interleaved rounds, until the leaders are all
            # confirmed.
            confirmed: set[tuple] = set()
            while pending := [i for i in ranked()[:FINALISTS] if i not in confirmed]:
                for _ in range(CONFIRM_ROUNDS):
                    for ident in pending:
                        if (timing := time_config(configs[ident])) is not None:
                            record(ident, timing)
                confirmed.update(pending)
            # The finalists' samples were taken at different moments: they meet again in rounds
            # of their own, and those alone decide (see alternate_rounds).
            finalists = ranked()[:FINALISTS]
            deciding = alternate_rounds(finalists, lambda ident: time_config(configs[ident]), DECIDING_ROUNDS)
            floor = host_floor()
            # (Without deciding rounds, the finalists' own samples decide.)
            kernel_of = {i: statistics.fmean(t[0] for t in deciding[i]) if i in deciding else statistics.median(samples[i])
                         for i in finalists}
            host_of = {i: statistics.fmean(t[1] for t in deciding[i]) if i in deciding else statistics.median(host[i])
                       for i in finalists}
            decided = {i: call_cost(kernel_of[i], host_of[i], floor) for i in finalists}
            winner = min(decided, key=decided.get)  # ties: the earlier finalist
            # Each config's time relative to the fastest, for dtypes that share a key: the finalists
            # by their deciding rounds, the others by their samples against the best of those.
            # (The winner goes first, so that it also wins a tie in the choice across dtypes.)
            leader = rank_ms(ranked()[0], floor)
            for ident in sorted(samples, key=lambda ident: ident != winner):
                relative = decided[ident] / decided[winner] if ident in decided else rank_ms(ident, floor) / leader
                scores.setdefault(key, {}).setdefault(ident, []).append(relative)
            # What the deciding rounds saw, so a choice can be checked against a probe.
            progress(f"{module.OP} {dtype_name(dtype)} {shape_label(shape)} finalists: " + "; ".join(
                f"{brief(configs[i])} {decided[i] * 1e3:.1f} us" for i in sorted(decided, key=decided.get)))
            unserved = [configs[i] for i in samples if served_ever is not None and i not in served_ever]
            if unserved:
                shown = "; ".join(brief(c) for c in unserved[:4])
                progress(f"{module.OP} {dtype_name(dtype)} {shape_label(shape)}: {len(unserved)} of {len(samples)} "
                         f"configs took Triton's launch on every call (the compiled call path did not learn "
                         f"them; their host time counted): {shown}{' ...' if len(unserved) > 4 else ''}")
            progress(f"{module.OP} {dtype_name(dtype)} {shape_label(shape)}: fastest {configs[winner]} "
                     f"{decided[winner] * 1e3:.1f} us (kernel {kernel_of[winner] * 1e3:.1f} us, host "
                     f"{host_of[winner] * 1e3:.1f} us; of {len(samples)} candidates, each timed {SWEEPS} times, the "
                     f"{len(confirmed)} leading ones {SWEEPS + CONFIRM_ROUNDS} times, then the {len(finalists)} finalists "
                     f"{DECIDING_ROUNDS} more times in rounds of their own)")
        for key in dict.fromkeys(keys):  # this shape's keys, each once its dtypes are all done
            per_config = scores[key]
            runs = max(len(times) for times in per_config.values())
            everywhere = {config: sum(times) for config, times in per_config.items() if len(times) == runs}
            text = format_key(key)
            best[text] = configs[min(everywhere, key=everywhere.get)]
            # A traced launch cannot load through descriptors (configs.traced_entries): where the
            # winner does, the fastest pointer launch timed here is its twin for those launches.
            pointers = {ident: t for ident, t in everywhere.items() if not through_descriptors(configs[ident])}
            twin = configs[min(pointers, key=pointers.get)] if through_descriptors(best[text]) and pointers else None
            if twin is not None:
                progress(f"{module.OP} {text}: traced launches (through pointers) take {brief(twin)}")
            if on_key is not None:
                on_key(text, best[text], twin)
    return best


def alternate_rounds(items: list, time, rounds: int) -> dict:
    """{item: [(kernel ms, host ms), ...]} from `rounds` rounds that each time every item once
    (`time(item)`), in alternate order: forward, backward, ... An item that cannot run (None)
    is left out, and not tried again. The result lists items in the order first timed.

    Both the passes' sweeps and the finalists' deciding rounds are such rounds. Samples taken
    minutes apart do not compare, as a GPU's speed drifts as it heats
    (bench/probes/gelu_epilogue.txt: bf16 matmul at 4096^3 took 198.7 us in the first of three
    rounds, 213.0 and 214.4 in the next two): rounds compare their items at one moment, and the
    alternate order spreads what drift remains within a round evenly."""
    timings: dict = {}
    for round_ in range(rounds):
        for item in items if round_ % 2 == 0 else items[::-1]:
            if (timing := time(item)) is not None:
                timings.setdefault(item, []).append(timing)
        items = [item for item in items if item in timings]  # those that ran
    return timings


def _refuse_shapes_sharing_a_key(module, chooser, shapes, dtypes, calls=forward_calls) -> None:
    """Raise BenchError where two shapes fall in one table key (bucket and element size).

    One entry serves the whole bucket, and each shape's search refines its own leading tiles, so
    the configs timed at every shape are mostly the first pass's: the entry kept would be a
    compromise that neither shape runs fastest with (1000^3 and 1024^3 tuned together gave an
    entry that ran 1024^3 at 0.72x cuBLAS; bench/results/h200/tune/README.md)."""
    for dtype in dtypes:
        seen: dict[tuple, tuple] = {}
        for shape in shapes:
            call, _ = calls(module, module.make_inputs(shape, dtype), dtype)
            with chooser.recording() as chosen:
                call()
            key = chosen[-1][0]
            if key in seen:
                raise BenchError(f"{module.OP}: shapes {shape_label(seen[key])} and {shape_label(shape)} share the "
                                 f"table key {format_key(key)}, whose one entry serves both; tune one shape per key")
            seen[key] = shape


class ParallelCompiler:
    """Compiles configs in worker processes ahead of timing: Triton's disk cache then hands the
    timing loop each binary at once, instead of one compile after another on one core."""

    def __init__(self, package: str, jobs: int, backward: bool = False):
        import concurrent.futures
        import multiprocessing

        self.package = package
        self.jobs = jobs
        self.backward = backward  # the ops' backward kernels (tune --backward), as _target says
        self.pool = concurrent.futures.ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn"))

    def compile(self, op, shape, dtype, configs):
        name = dtype_name(dtype)
        chunks = [configs[i::self.jobs] for i in range(self.jobs)]
        for future in [self.pool.submit(_compile_configs, self.package, op, shape, name, c, self.backward)
                       for c in chunks if c]:
            future.result()

    def close(self):
        self.pool.shutdown()


def _target(package, op, backward):
    """(the runtime op whose configs tune forces, the calls it times): `op`'s forward, or with
    `backward` its backward kernel."""
    module_name = f"{Path(package).name}.{op}"
    return (backward_op_of(module_name), backward_calls) if backward else (op_of(module_name), forward_calls)


def _compile_configs(package, op, shape, dtype_name, configs, backward=False):
    """Worker: launch each config once (of the op's backward kernel with `backward`). Failures are
    left for the timing loop to meet and report."""
    import torch

    module = load_bench_modules([op], package)[0]
    target, calls = _target(package, op, backward)
    dtype = getattr(torch, dtype_name)
    call, _ = calls(module, module.make_inputs(shape, dtype), dtype)
    chooser = target.configs
    for config in configs:
        with chooser.forcing(config):
            try:
                call()
            except Exception:  # noqa: BLE001 - the timing loop compiles it again and reports
                pass
    torch.cuda.synchronize()


# The kinds whose backward kernel reads a table (its own; an elementwise one's, else the
# forward's: lowering._backward_table): a matmul's backward runs tilegen's matmul kernels, tuned
# as matmuls, and an elementwise pass over its epilogue.
BACKWARD_KINDS = ("elementwise", "reduction")


def _refuse_backward_without_kernel(module, package) -> None:
    """Raise BenchError unless `module`'s op has a backward kernel that reads a table."""
    if module.KIND not in BACKWARD_KINDS:
        why = "a matmul's backward runs tilegen's matmul kernels: tune those as matmuls"
    elif not getattr(module, "DIFFERENTIABLE", True):
        why = "no input holds floats, so it has no backward"
    else:
        try:
            _target(package, module.OP, backward=True)
            return
        except LookupError:
            why = "its gradients need no kernel (each is an incoming gradient, or none)"
    raise BenchError(f"{module.OP}: --backward tunes the backward kernel of an elementwise or reduction op; {why}")


def run(ops: list[str], package: str, shapes_text: str | None, tables: Path = TABLE_DIR,
        dtypes: list[str] | None = None, jobs: int = 1, scope: str = "kind", backward: bool = False,
        traced: bool = False) -> list[Path]:
    """Tune `ops` (their backward kernels with `backward`, into tables of their own: scope "op"). With
    `traced`, only launches through pointers, into the tables' traced sections alone: the twins of
    entries tuned through descriptors before twins were written."""
    import torch

    # As bench: the flags first, then the GPU, then what needs the package (ops, their dtypes).
    if scope not in SCOPES:
        raise BenchError(f"--scope must be one of {', '.join(SCOPES)}, got {scope!r}")
    if backward and scope != "op":
        raise BenchError("--backward writes each op's backward table (tables/ops/<op>_backward.json): "
                         f"its scope is op, not {scope!r}")
    if traced and backward:
        raise BenchError("--traced tunes the pointer-load twins of a matmul's descriptor entries; a backward "
                         "kernel loads through pointers only: traced launches take its entries")
    if jobs < 1:
        raise BenchError(f"--jobs must be at least 1, got {jobs}")
    if not torch.cuda.is_available():
        raise BenchError("no CUDA GPU found; `tilegen tune` measures compiled kernels and needs one")
    modules = load_bench_modules(ops or (["matmul"] if traced else ["matmul", "add"]), package)
    for module in modules if backward else ():
        _refuse_backward_without_kernel(module, package)
    for module in modules if traced else ():
        if module.KIND != "matmul":
            raise BenchError(f"{module.OP}: --traced tunes the pointer-load twins of a matmul's descriptor entries; "
                             f"a {module.KIND} op loads through pointers only: traced launches take its entries")
    check_dtype_names(modules, dtypes)
    gpu = torch.cuda.get_device_name()
    settle_call_path()
    compiler = ParallelCompiler(package, jobs, backward) if jobs > 1 else None
    _warm_up_gpu()
    written: dict[str, Path] = {}

    def progress(line):
        print(line, file=sys.stderr, flush=True)

    def writer(module, op):
        """Each key's entry into the table as soon as it is found: a run stopped by a time limit
        keeps the shapes it finished (every table write replaces those keys only)."""
        # Tables store block fields under the kind's names; the op's spec may name them otherwise.
        spec_names = op.configs.space.names
        name = module.KIND if scope == "kind" else backward_table_name(module.OP) if backward else module.OP

        def on_key(key, config, twin):
            entry = {key: rename_blocks(config, spec_names, BLOCK_FIELDS[module.KIND])}
            if traced:  # (the entry itself stays as it was)
                written[name] = merge_entries(name, traced_section(gpu), entry, tables, scope)
                progress(f"{module.OP}: wrote {key} into {written[name]} (traced launches)")
                return
            written[name] = merge_entries(name, gpu, entry, tables, scope)
            if twin is not None:
                entry = {key: rename_blocks(twin, spec_names, BLOCK_FIELDS[module.KIND])}
                merge_entries(name, traced_section(gpu), entry, tables, scope)
            progress(f"{module.OP}: wrote {key} into {written[name]}")
        return on_key

    try:
        for module in modules:
            op, calls = _target(package, module.OP, backward)
            shapes = parse_shapes(shapes_text, module.KIND, getattr(module, "BATCHED", False))
            tune_module(module, op, shapes, progress, dtypes or (), compiler, on_key=writer(module, op), calls=calls,
                        traced=traced)
    finally:
        if compiler is not None:
            compiler.close()
    return list(written.values())
