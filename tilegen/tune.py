"""`tilegen tune`: measure every candidate config on this GPU and record the best per shape bucket.

The result is merged into tilegen/tables/<kind>.json under the GPU's name; the next
`tilegen build` renders it into each op of that kind, which then launches the measured config
with no runtime tuning.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .bench import BenchError, load_bench_modules, parse_shapes, shape_label
from .tables import TABLE_DIR, format_key, load_table, parse_key, table_path


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


def tune_module(module, op_module, shapes, progress, dtypes=()) -> dict[str, dict]:
    """{key: best config} for one op over its dtypes and shapes.

    Kernels are timed as `tilegen bench` times them (triton.testing.do_bench, which empties
    L2 before each run, so operands come from HBM as a model's weights do). Dtypes of one
    element size share a key: the config with the least total time, each dtype's times taken
    relative to its fastest, wins.
    """
    import torch
    from triton.testing import do_bench

    chooser = op_module._CONFIGS
    facts = op_module.rt.device_facts(torch.device("cuda"))
    scores: dict[tuple, dict[tuple, float]] = {}
    configs: dict[tuple, dict] = {}
    for dtype in [d for d in module.DTYPES if not dtypes or str(d).replace("torch.", "") in dtypes]:
        for shape in shapes or module.SHAPES:
            inputs = module.make_inputs(shape, dtype)
            want = module.run_torch(inputs)
            chooser.reset()  # a remembered plan would skip the choice that records the key
            module.run_tilegen(inputs)
            key = chooser.last_key
            timings = []
            for config in chooser.all_candidates(facts, key):
                with chooser.forcing(config):
                    got = module.run_tilegen(inputs)
                    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
                        torch.testing.assert_close(g.float(), w.float(), atol=5e-2, rtol=5e-2, equal_nan=True)
                    ms = do_bench(lambda: module.run_tilegen(inputs), return_mode="median")
                    timings.append((ms, len(timings), config))
            fastest = min(timings)
            for ms, _, config in timings:
                identity = tuple(sorted(config.items()))
                configs[identity] = dict(config)
                key_scores = scores.setdefault(key, {})
                key_scores[identity] = key_scores.get(identity, 0.0) + ms / fastest[0]
            progress(f"{module.OP} {str(dtype)[6:]} {shape_label(shape)}: fastest {dict(fastest[2])} "
                     f"{fastest[0] * 1e3:.1f} us (of {len(timings)} candidates)")
            del inputs, want
    return {format_key(key): configs[min(per_config, key=per_config.get)] for key, per_config in scores.items()}


def run(ops: list[str], package: str, shapes_text: str | None, tables: Path = TABLE_DIR,
        dtypes: list[str] | None = None) -> list[Path]:
    import torch

    modules = load_bench_modules(ops or ["matmul", "add"], package)
    known = sorted({str(d).replace("torch.", "") for m in modules for d in m.DTYPES})
    unknown = [d for d in dtypes or () if d not in known]
    if unknown:
        raise BenchError(f"--dtype {unknown[0]!r} is not a dtype these ops benchmark (one of: {', '.join(known)})")
    if not torch.cuda.is_available():
        raise BenchError("no CUDA GPU found; `tilegen tune` measures compiled kernels and needs one")
    gpu = torch.cuda.get_device_name()
    _warm_up_gpu()
    updates: dict[str, dict] = {}
    for module in modules:
        op_module = sys.modules[f"{Path(package).name}.{module.OP}"]
        shapes = parse_shapes(shapes_text, module.KIND)
        found = tune_module(module, op_module, shapes, lambda line: print(line, file=sys.stderr, flush=True),
                            dtypes or ())
        updates.setdefault(module.KIND, {}).update(found)
    written = []
    for kind, entries in updates.items():
        table = load_table(kind, tables)
        merged = {**table.get(gpu, {}), **entries}
        table[gpu] = {key: merged[key] for key in sorted(merged, key=parse_key)}
        path = table_path(kind, tables)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({g: table[g] for g in sorted(table)}, indent=1) + "\n")
        written.append(path)
    return written
