"""`tilegen tune`'s search, checked on the CPU with a stand-in op whose timings are known."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
import triton.testing
from triton.runtime.errors import OutOfResources

import tilegen.runtime as rt
from tests.conftest import REPO
from tilegen import tune
from tilegen.measure import BenchError
from tilegen.runtime.configs import through_descriptors

FACTS = (132, 232448, "stand-in GPU")


MEASURE_HOST_MS = tune.host_ms  # before the fixture below stands in for it


def test_host_time_is_the_least_of_its_batches(monkeypatch):
    # A busy moment only adds time: one slow batch must not set a config's host time.
    batches = iter([0.031, 0.012, 0.019])
    monkeypatch.setattr(tune, "issue_ms", lambda fn, calls: next(batches))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    calls = []
    assert MEASURE_HOST_MS(lambda: calls.append(1)) == 0.012
    assert calls == [1]  # one warm-up call; the batches' calls are issue_ms's own


@pytest.fixture(autouse=True)
def host_keeps_up(monkeypatch):
    """Calls cost the host no time (the stand-in has no GPU to launch on), and no compiled call
    path serves them; a test may say otherwise. (Whether the real call path is loaded depends on
    when its background build finished: where it was, tuning a stand-in, whose calls it never
    serves, added a line naming the unserved configs, which broke a test's reading of the log
    on the H200, once.)"""
    from tilegen.runtime import callpath

    monkeypatch.setattr(tune, "host_ms", lambda fn: 0.0)
    monkeypatch.setattr(tune, "device_facts", lambda device: FACTS)
    monkeypatch.setattr(callpath, "load", lambda wait=False: None)


def stand_in(costs, dtypes, descriptors_fit=True):
    """An op whose candidate tiles are 64/128 x 64/128 x 32 and whose time is costs[dtype](config)."""
    # launch="tiled": the search, not the launch styles, is under test (no persistent variants).
    chooser = rt.ConfigChooser("auto", rt.MatmulSpace(("BM", "BN", "BK"), [64, 128], [64, 128], [32], [], [],
                                                      (False,) * 3, launch="tiled"))
    timed = []
    state = {}

    def run_tilegen(inputs):
        config = chooser.choose((1024, 1024, 1024, 2), FACTS, launch=None)
        if costs[state["dtype"]](config) is None:
            raise OutOfResources(300000, 232448, "shared memory")
        return inputs.clone()

    def make_inputs(shape, dtype):
        state["dtype"] = dtype
        return torch.ones(3)

    def do_bench(fn, **_):
        fn()
        timed.append((state["dtype"], dict(chooser.forced)))
        return costs[state["dtype"]](chooser.forced)

    module = SimpleNamespace(OP="stand_in", DTYPES=dtypes, SHAPES=[(1000, 1000, 1000)], make_inputs=make_inputs,
                             run_torch=lambda inputs: inputs.clone(), run_tilegen=run_tilegen)
    op = SimpleNamespace(configs=chooser, operands=(0, 0),
                         loads_through_descriptors=lambda config, a, b: descriptors_fit and config.get("TMA"))
    return module, op, timed, do_bench


def launch(config):
    """A stand-in config's tile and how it loads and stores: ((BM, BN), TMA, TMA_STORE)."""
    return (config["BM"], config["BN"]), config.get("TMA", 0), config.get("TMA_STORE", 0)


# Every launch of the stand-in's tiles: through pointers, with TMA loads, with TMA loads and stores.
STAND_IN_LAUNCHES = sorted((tile, tma, store) for tile in [(64, 64), (64, 128), (128, 64), (128, 128)]
                           for tma, store in [(0, 0), (1, 0), (1, 1)])


def cost(base, variants):
    """Time of a config: base[tile] with default warps/stages (4, 4), variants[(tile, warps, stages)]
    otherwise; tensor-descriptor loads (TMA) add a quarter (None: out of resources either way)."""
    def of(config):
        tile = (config["BM"], config["BN"])
        ms = variants.get((tile, config["num_warps"], config["num_stages"]),
                          base[tile] + 0.5 * ((config["num_warps"], config["num_stages"]) != (4, 4)))
        return None if ms is None else ms + 0.25 * config.get("TMA", 0)
    return of


def test_second_pass_varies_only_the_fastest_launches(monkeypatch):
    fp16 = cost({(64, 64): 10, (64, 128): 11, (128, 64): 12, (128, 128): 13},
                {((64, 64), 4, 5): 9, ((128, 128), 8, 3): 1, ((64, 128), 8, 5): None})
    module, op_module, timed, do_bench = stand_in({torch.float16: fp16}, [torch.float16])
    monkeypatch.setattr(triton.testing, "do_bench", do_bench)
    monkeypatch.setattr(tune, "SWEEPS", 1)  # one timing per config: the passes' shape
    monkeypatch.setattr(tune, "REFINED_LAUNCHES", 2)
    monkeypatch.setattr(tune, "CONFIRM_ROUNDS", 0)  # the passes alone (confirmation: its own test)
    monkeypatch.setattr(tune, "DECIDING_ROUNDS", 0)
    lines = []
    best = tune.tune_module(module, op_module, None, lines.append)
    assert best == {"1024x1024x1024x2": dict(BM=64, BN=64, BK=32, SPLIT_K=1, num_warps=4, num_stages=5)}
    launches = [launch(c) for _, c in timed]
    # Every tile once in each way it launches (pointers, TMA loads, TMA loads and stores) with its
    # default warps and stages, then the other warps and stages of the two fastest launches only,
    # 64x64 through pointers and with TMA loads (the 128x128 variant that would have won is never
    # timed): 64x64 has 2 more stage counts.
    assert sorted(launches[:12]) == STAND_IN_LAUNCHES
    assert all(c["num_warps"] == 4 and c["num_stages"] == 4 for _, c in timed[:12])  # the defaults
    assert sorted(launches[12:]) == [((64, 64), 0, 0)] * 2 + [((64, 64), 1, 0)] * 2 and len(timed) == 16
    assert "of 16 candidates" in lines[-1]
    # A line between the passes says how far the shape is, before the minutes a large menu takes.
    under_way, = [line for line in lines if "launches timed in" in line]
    assert under_way.startswith("stand_in float16 1000x1000x1000: 12 launches timed in ")
    assert under_way.endswith("s; next 4 configs of the 2 fastest launches")


def test_a_key_won_through_descriptors_gets_its_fastest_pointer_launch_as_the_twin_for_traced_launches(monkeypatch):
    # Traced launches (torch.compile) load through pointers (configs.traced_entries): where the
    # winner loads through descriptors, the fastest pointer launch the tune timed comes with it.
    def fp16(config):
        if (config["BM"], config["BN"]) == (128, 128) and config.get("TMA_STORE"):
            return 2.0  # the winner: descriptor loads and stores
        return {(64, 128): 4.0, (128, 64): 6.0}.get((config["BM"], config["BN"]), 9.0) + config.get("TMA", 0)
    module, op_module, _, do_bench = stand_in({torch.float16: fp16}, [torch.float16])
    monkeypatch.setattr(triton.testing, "do_bench", do_bench)
    monkeypatch.setattr(tune, "SWEEPS", 1)
    reported, lines = [], []
    tune.tune_module(module, op_module, None, lines.append, on_key=lambda *heard: reported.append(heard))
    [(key, config, twin)] = reported
    assert config["TMA"] and config["TMA_STORE"] and (config["BM"], config["BN"]) == (128, 128)
    assert (twin["BM"], twin["BN"]) == (64, 128) and not twin.get("TMA") and not twin.get("TMA_STORE")
    assert any("traced launches (through pointers) take BM64 BN128" in line for line in lines)
    # A pointer launch that wins has no twin: traced launches take the entry itself.
    module, op_module, _, do_bench = stand_in({torch.float16: lambda c: fp16(c) + 9 * c.get("TMA", 0)}, [torch.float16])
    monkeypatch.setattr(triton.testing, "do_bench", do_bench)
    reported.clear()
    tune.tune_module(module, op_module, None, lines.append, on_key=lambda *heard: reported.append(heard))
    [(key, config, twin)] = reported
    assert (config["BM"], config["BN"]) == (64, 128) and not config.get("TMA") and twin is None


def _tables_written_by(monkeypatch, tune_module):
    """tune.run on a stand-in matmul op on a stand-in GPU ("GPU"), its search replaced by
    `tune_module` (which reports keys to run's writer)."""
    chooser = rt.ConfigChooser("auto", rt.MatmulSpace(("BM", "BN", "BK"), [64, 128], [64, 128], [32, 64], [], [],
                                                      (False,) * 3))
    module = SimpleNamespace(OP="stand_in", KIND="matmul", SHAPES=[(1, 1, 1)], DTYPES=[torch.float16])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda: "GPU")
    monkeypatch.setattr(tune, "load_bench_modules", lambda ops, package: [module])
    monkeypatch.setattr(tune, "_target", lambda package, op, backward: (SimpleNamespace(configs=chooser), None))
    monkeypatch.setattr(tune, "settle_call_path", lambda: None)
    monkeypatch.setattr(tune, "_warm_up_gpu", lambda: None)
    monkeypatch.setattr(tune, "tune_module", tune_module)


def test_the_twin_is_written_beside_the_entry_in_the_tables_traced_section(monkeypatch, tmp_path):
    written = {"entry": dict(BM=128, BN=128, BK=64, TMA=1), "twin": dict(BM=64, BN=128, BK=32)}

    def tune_module(module, op, shapes, progress, dtypes, compiler, on_key, calls, traced):
        on_key("4096x4096x4096x2", written["entry"], written["twin"])
        on_key("128x128x128x2", dict(written["twin"], BK=64), None)

    _tables_written_by(monkeypatch, tune_module)
    [path] = tune.run(["stand_in"], "generated", None, tmp_path)
    table = json.loads(path.read_text())
    assert table["GPU"]["4096x4096x4096x2"]["TMA"] == 1 and table["GPU"]["128x128x128x2"]["BK"] == 64
    assert table[rt.configs.traced_section("GPU")] == {"4096x4096x4096x2": written["twin"]}


def test_every_launch_of_every_tile_is_timed_before_any_is_dropped(monkeypatch):
    # A tile whose pointer launch is the slowest can be the fastest through descriptors (attention's
    # scores on the H200: one 128x128 tile 209 us tiled through pointers, 98 us with descriptor
    # stores): the first pass times each launch of each tile, not each tile's default launch alone.
    base = cost({(64, 64): 10, (64, 128): 11, (128, 64): 12, (128, 128): 13}, {})

    def fp16(config):
        if (config["BM"], config["BN"]) == (128, 128) and config.get("TMA_STORE"):
            return 2.0
        return base(config)
    module, op_module, timed, do_bench = stand_in({torch.float16: fp16}, [torch.float16])
    monkeypatch.setattr(triton.testing, "do_bench", do_bench)
    monkeypatch.setattr(tune, "SWEEPS", 1)
    monkeypatch.setattr(tune, "REFINED_LAUNCHES", 1)
    best = tune.tune_module(module, op_module, None, lambda line: None)
    assert best["1024x1024x1024x2"] == dict(BM=128, BN=128, BK=32, SPLIT_K=1, num_warps=4, num_stages=4, TMA=1, TMA_STORE=1)
    assert tune.first_pass([], [dict(BM=64, ROWS=4, num_warps=w) for w in (4, 8)]) == \
        [dict(BM=64, ROWS=4, num_warps=w) for w in (4, 8)]  # a tile tuning alone tries: every warp count


def test_dtypes_sharing_a_key_pick_among_configs_timed_for_both(monkeypatch):
    # float16 refines 64x64's three launches and 64x128 through pointers, bfloat16 64x128's three
    # launches and 128x64 through pointers: the very fast 64x64 variant was timed for float16
    # only, so it cannot stand for bfloat16.
    fp16 = cost({(64, 64): 10, (64, 128): 11, (128, 64): 12, (128, 128): 13},
                {((64, 64), 4, 5): 5, ((64, 128), 8, 5): 9})
    bf16 = cost({(64, 64): 13, (64, 128): 10, (128, 64): 11, (128, 128): 12}, {((64, 128), 8, 5): 9})
    module, op_module, _, do_bench = stand_in({torch.float16: fp16, torch.bfloat16: bf16},
                                              [torch.float16, torch.bfloat16])
    monkeypatch.setattr(triton.testing, "do_bench", do_bench)
    monkeypatch.setattr(tune, "REFINED_LAUNCHES", 4)
    best = tune.tune_module(module, op_module, None, lambda line: None)
    assert best == {"1024x1024x1024x2": dict(BM=64, BN=128, BK=32, SPLIT_K=1, num_warps=8, num_stages=5)}


def test_tma_variants_are_not_timed_where_the_operands_cannot_take_descriptors(monkeypatch):
    # They would time the pointer path a second time and could win its entry by noise.
    fp16 = cost({(64, 64): 10, (64, 128): 11, (128, 64): 12, (128, 128): 13}, {})
    module, op_module, timed, do_bench = stand_in({torch.float16: fp16}, [torch.float16], descriptors_fit=False)
    monkeypatch.setattr(triton.testing, "do_bench", do_bench)
    monkeypatch.setattr(tune, "SWEEPS", 1)  # one timing per config: the passes' shape
    monkeypatch.setattr(tune, "REFINED_LAUNCHES", 2)
    monkeypatch.setattr(tune, "CONFIRM_ROUNDS", 0)
    monkeypatch.setattr(tune, "DECIDING_ROUNDS", 0)
    tune.tune_module(module, op_module, None, lambda line: None)
    assert not any(c.get("TMA") for _, c in timed)
    assert len(timed) == 4 + 2 + 5  # the refined tiles' other warps and stages, as above, none with TMA


def test_store_variants_are_not_timed_where_the_outputs_cannot_take_descriptors(monkeypatch):
    # A TMA_STORE config whose outputs cannot take descriptors stores through pointers: it would
    # time its TMA config a second time. The op is asked about the outputs a call returned.
    fp16 = cost({(64, 64): 10, (64, 128): 11, (128, 64): 12, (128, 128): 13}, {})
    module, op_module, timed, do_bench = stand_in({torch.float16: fp16}, [torch.float16])
    asked = []
    op_module.stores_through_descriptors = lambda config, outputs: asked.append([o.shape for o in outputs]) or False
    monkeypatch.setattr(triton.testing, "do_bench", do_bench)
    monkeypatch.setattr(tune, "SWEEPS", 1)
    monkeypatch.setattr(tune, "REFINED_LAUNCHES", 2)
    monkeypatch.setattr(tune, "CONFIRM_ROUNDS", 0)
    monkeypatch.setattr(tune, "DECIDING_ROUNDS", 0)
    tune.tune_module(module, op_module, None, lambda line: None)
    assert asked and all(shapes == [torch.Size([3])] for shapes in asked)  # the stand-in returns its input's clone
    assert any(c.get("TMA") for _, c in timed) and not any(c.get("TMA_STORE") for _, c in timed)
    # Every tile through pointers and with TMA loads, then the two fastest launches' other warps
    # and stages (64x64's both: 2 more stage counts each), none with stores.
    assert len(timed) == 4 * 2 + 2 * 2


def test_a_batched_op_asks_about_descriptors_for_its_operands_matrices(monkeypatch):
    # A batch loads through 3-D descriptors, a matrix a box: whether a TMA config is timed
    # depends on the matrices' layouts, so the op is asked about [M, K] and [K, N], not the batch.
    fp16 = cost({(64, 64): 10, (64, 128): 11, (128, 64): 12, (128, 128): 13}, {})
    module, op_module, timed, do_bench = stand_in({torch.float16: fp16}, [torch.float16])
    make_inputs, run_tilegen = module.make_inputs, module.run_tilegen
    module.make_inputs = lambda shape, dtype: [make_inputs(shape, dtype), torch.ones(4, 24, 16), torch.ones(4, 16, 8)]
    module.run_tilegen = lambda inputs: (run_tilegen(inputs[0]), inputs[1] @ inputs[2])[1]
    module.run_torch = lambda inputs: inputs[1] @ inputs[2]
    asked = []
    op_module.operands = (1, 2)
    op_module.loads_through_descriptors = lambda config, a, b: asked.append((a.shape, b.shape)) or True
    monkeypatch.setattr(triton.testing, "do_bench", do_bench)
    monkeypatch.setattr(tune, "SWEEPS", 1)
    monkeypatch.setattr(tune, "CONFIRM_ROUNDS", 0)
    monkeypatch.setattr(tune, "DECIDING_ROUNDS", 0)
    tune.tune_module(module, op_module, None, lambda line: None)
    assert asked and set(asked) == {((24, 16), (16, 8))}
    assert any(c.get("TMA") for _, c in timed)


def test_compile_worker_leaves_failing_configs_to_the_timing_loop(monkeypatch):
    # The worker only warms Triton's cache: a config that fails there is met and reported again
    # by the timing loop, so the worker goes on to the next config.
    import contextlib

    forced, ran = [], []

    def run_tilegen(inputs):
        ran.append(forced[-1])
        if forced[-1]["BM"] == 64:
            raise OutOfResources(300000, 232448, "shared memory")

    module = SimpleNamespace(make_inputs=lambda shape, dtype: None, run_tilegen=run_tilegen)
    chooser = SimpleNamespace(forcing=lambda config: contextlib.nullcontext(forced.append(config)))
    monkeypatch.setattr(tune, "load_bench_modules", lambda ops, package: [module])
    monkeypatch.setattr(tune, "op_of", lambda name: SimpleNamespace(configs=chooser) if name == "pkg.stand_in" else None)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    configs = [dict(BM=64), dict(BM=128)]
    tune._compile_configs("pkg", "stand_in", (1, 1, 1), "float16", configs)
    assert ran == configs


def test_leaders_are_timed_again_so_no_config_wins_on_one_lucky_timing(monkeypatch):
    # 64x64 configs time 5 ms on their first timing and 15 ms after that (as tensor-descriptor
    # loads did at 1024^3); 128x64 holds 9 ms. One timing each would crown a 64x64 config.
    steady = cost({(64, 64): 15, (64, 128): 11, (128, 64): 9, (128, 128): 13}, {})
    module, op_module, _, _ = stand_in({torch.float16: steady}, [torch.float16])
    times_timed = {}

    def do_bench(fn, **_):
        fn()
        config = op_module.configs.forced
        ident = tune.identity(config)
        times_timed[ident] = times_timed.get(ident, 0) + 1
        lucky = (config["BM"], config["BN"]) == (64, 64) and times_timed[ident] == 1
        return 5 if lucky else steady(config)

    monkeypatch.setattr(triton.testing, "do_bench", do_bench)
    monkeypatch.setattr(tune, "REFINED_LAUNCHES", 1)
    monkeypatch.setattr(tune, "DECIDING_ROUNDS", 0)  # the confirmation alone (deciding: its own test)
    monkeypatch.setattr(tune, "SWEEPS", 1)  # (several sweeps would already outvote the lucky timing)
    lines = []
    best = tune.tune_module(module, op_module, None, lines.append)
    winner = dict(BM=128, BN=64, BK=32, SPLIT_K=1, num_warps=4, num_stages=4)
    assert best == {"1024x1024x1024x2": winner}
    # Each lucky config led once, so it was timed again (and found slow); the winner was too.
    lucky = [ident for ident in times_timed if dict(ident)["BM"] == dict(ident)["BN"] == 64]
    assert lucky and all(times_timed[ident] == 1 + tune.CONFIRM_ROUNDS for ident in lucky)
    assert times_timed[tune.identity(winner)] == 1 + tune.CONFIRM_ROUNDS
    # Every lucky one (64x64's three launches and its two other stage counts), and 128x64's launches.
    assert "each timed 1 times, the 8 leading ones 3 times" in lines[-1]


def test_one_slow_timing_does_not_drop_the_fastest_config(monkeypatch):
    # 128x64 (9 ms) is the fastest tile, but its first timing comes out at 30 ms (a busy
    # moment). Ranked on one timing each, it never reaches the leaders; ranked on the median of
    # three timings, taken in alternating order, it wins.
    steady = cost({(64, 64): 10, (64, 128): 10.5, (128, 64): 9, (128, 128): 11}, {})
    module, op_module, _, _ = stand_in({torch.float16: steady}, [torch.float16])
    order = []

    def do_bench(fn, **_):
        fn()
        config = dict(op_module.configs.forced)
        order.append(config)
        first = (config["BM"], config["BN"]) == (128, 64) and order.count(config) == 1
        return 30 if first else steady(config)

    monkeypatch.setattr(triton.testing, "do_bench", do_bench)
    monkeypatch.setattr(tune, "REFINED_LAUNCHES", 1)
    winner = dict(BM=128, BN=64, BK=32, SPLIT_K=1, num_warps=4, num_stages=4)
    monkeypatch.setattr(tune, "SWEEPS", 1)
    assert tune.tune_module(module, op_module, None, lambda line: None)["1024x1024x1024x2"] != winner
    order.clear()
    monkeypatch.setattr(tune, "SWEEPS", 3)
    assert tune.tune_module(module, op_module, None, lambda line: None)["1024x1024x1024x2"] == winner
    # The first pass: the four tiles' twelve launches three times, forward, backward, forward.
    first_pass = [launch(c) for c in order[:36]]
    assert first_pass[:12] == first_pass[12:24][::-1] == first_pass[24:36]
    assert sorted(first_pass[:12]) == STAND_IN_LAUNCHES


def test_a_config_that_cannot_run_is_tried_once(monkeypatch):
    # 128x128 runs out of resources however it launches: each launch one try in the first of
    # three sweeps, none after.
    fp16 = cost({(64, 64): 10, (64, 128): 11, (128, 64): 12, (128, 128): 13}, {((128, 128), 4, 4): None})
    module, op_module, timed, do_bench = stand_in({torch.float16: fp16}, [torch.float16])
    monkeypatch.setattr(triton.testing, "do_bench", do_bench)
    lines = []
    tune.tune_module(module, op_module, None, lines.append)
    skipped = [line for line in lines if "skipped" in line]
    assert len(skipped) == len(set(skipped)) == 3  # each of its launches (pointers, TMA loads, and stores) once
    assert not any((c["BM"], c["BN"]) == (128, 128) for _, c in timed)


def test_finalists_are_decided_by_rounds_of_their_own_when_the_gpu_slows(monkeypatch):
    # Each timing comes out 1% slower than the one before (a GPU heating up). 64x64 (10 ms) is
    # timed first; 128x64, faster in truth (9.9 ms), comes two timings later and so looks slower
    # in the first pass, and in each confirmation round, where it always follows 64x64. Rounds
    # of the finalists alone, in alternate order, time both at the same moments.
    steady = cost({(64, 64): 10, (64, 128): 10.5, (128, 64): 9.9, (128, 128): 13}, {})
    module, op_module, _, _ = stand_in({torch.float16: steady}, [torch.float16])
    calls = []

    def do_bench(fn, **_):
        fn()
        calls.append(1)
        return steady(op_module.configs.forced) * (1 + 0.01 * (len(calls) - 1))

    monkeypatch.setattr(triton.testing, "do_bench", do_bench)
    monkeypatch.setattr(tune, "REFINED_LAUNCHES", 1)
    winner = dict(BM=128, BN=64, BK=32, SPLIT_K=1, num_warps=4, num_stages=4)
    monkeypatch.setattr(tune, "DECIDING_ROUNDS", 0)
    assert tune.tune_module(module, op_module, None, lambda line: None)["1024x1024x1024x2"] != winner
    calls.clear()
    monkeypatch.setattr(tune, "DECIDING_ROUNDS", 3)
    lines = []
    assert tune.tune_module(module, op_module, None, lines.append) == {"1024x1024x1024x2": winner}
    assert "then the 3 finalists 3 more times in rounds of their own" in lines[-1]
    # The line before gives each finalist's time in those rounds, fastest first.
    assert lines[-2].startswith("stand_in float16 1000x1000x1000 finalists: BM128 BN64 BK32 w4 s4 ")


def test_brief_names_a_config_on_one_line():
    config = dict(BM=128, BN=256, BK=64, SPLIT_K=1, num_warps=8, num_stages=3, TMA=1, PERSISTENT=0)
    assert tune.brief(config) == "BM128 BN256 BK64 w8 s3 TMA"
    assert tune.brief(dict(config, PERSISTENT=1, FLATTEN=1, TMA_STORE=1)) == "BM128 BN256 BK64 w8 s3 TMA PERSISTENT FLATTEN TMA_STORE"
    assert tune.brief(dict(BLOCK=1024, num_warps=4)) == "BLOCK1024 w4"
    assert tune.brief(dict(BLOCK=8192, ROWS=1, num_warps=32, UNROLL=0)) == "BLOCK8192 ROWS1 w32"
    assert tune.brief(dict(BLOCK=8192, ROWS=1, num_warps=32, UNROLL=2)) == "BLOCK8192 ROWS1 w32 UNROLL2"
    assert tune.brief(dict(BM=64, BN=64, BK=128, SPLIT_K=2, num_warps=4, num_stages=4)) == "BM64 BN64 BK128 SPLIT_K2 w4 s4"


def test_rounds_alternate_their_order():
    order = []
    timings = tune.alternate_rounds(["a", "b", "c"], lambda ident: order.append(ident) or (1.0, 0.0), 3)
    assert order == ["a", "b", "c", "c", "b", "a", "a", "b", "c"]
    assert timings == {ident: [(1.0, 0.0)] * 3 for ident in "abc"}
    # An item that cannot run (None) is left out, and not tried again.
    order.clear()
    timings = tune.alternate_rounds(["a", "b"], lambda ident: order.append(ident) or (None if ident == "b" else (2.0, 0.0)), 2)
    assert timings == {"a": [(2.0, 0.0)] * 2}
    assert order == ["a", "b", "a"]


def tma_stand_in(monkeypatch, kernel_ms, tma_host_ms, pointer_host_ms=0.004):
    """The stand-in op with TMA variants a quarter ms faster on the GPU than pointer loads, whose
    kernels take `kernel_ms` plus their tile's share, and whose calls through descriptors keep
    the host `tma_host_ms` (through pointers, `pointer_host_ms`): the best config it tunes to."""
    def gpu(config):
        return kernel_ms + {(64, 64): 0, (64, 128): 1, (128, 64): 2, (128, 128): 3}[(config["BM"], config["BN"])] \
            + 0.5 * ((config["num_warps"], config["num_stages"]) != (4, 4)) - 0.25 * config.get("TMA", 0)
    module, op_module, _, do_bench = stand_in({torch.float16: gpu}, [torch.float16])
    monkeypatch.setattr(triton.testing, "do_bench", do_bench)
    monkeypatch.setattr(tune, "REFINED_LAUNCHES", 1)

    def host(fn):
        fn()
        return tma_host_ms if op_module.configs.forced.get("TMA") else pointer_host_ms
    monkeypatch.setattr(tune, "host_ms", host)
    return tune.tune_module(module, op_module, None, lambda line: None)["1024x1024x1024x2"]


def test_host_work_beyond_the_kernel_and_the_other_configs_counts_against_a_config(monkeypatch):
    # Short kernels (10 ms) and descriptors that keep the host 20 ms: a loop of TMA calls would
    # run at the host's pace, so pointer loads win although their kernels are slower.
    assert tma_stand_in(monkeypatch, kernel_ms=10, tma_host_ms=20) == \
        dict(BM=64, BN=64, BK=32, SPLIT_K=1, num_warps=4, num_stages=4)
    # Long kernels (30 ms) hide the same host work: the faster TMA kernel wins.
    assert tma_stand_in(monkeypatch, kernel_ms=30, tma_host_ms=20).get("TMA") == 1
    # Host work every config shares (here 40 ms a call, past every kernel) cannot tell configs
    # apart: it is left out, and the fastest kernel wins.
    assert tma_stand_in(monkeypatch, kernel_ms=10, tma_host_ms=40, pointer_host_ms=40).get("TMA") == 1


@pytest.mark.parametrize("kernel, host, floor, cost", [
    (10.0, 4.0, 4.0, 10.0),    # host work hidden behind the kernel
    (10.0, 25.0, 4.0, 25.0),   # host work past the kernel: the loop's pace
    (3.0, 6.0, 5.0, 4.0),      # past the kernel, but only 1 beyond what every config pays
    (3.0, 5.0, 5.0, 3.0),      # what every config pays: the kernel alone
])
def test_call_cost(kernel, host, floor, cost):
    assert tune.call_cost(kernel, host, floor) == pytest.approx(cost)


def test_shapes_that_share_a_table_key_are_refused_before_any_timing(monkeypatch):
    module, op_module, timed, do_bench = stand_in({torch.float16: cost({(64, 64): 1, (64, 128): 2, (128, 64): 3,
                                                                         (128, 128): 4}, {})}, [torch.float16])
    monkeypatch.setattr(triton.testing, "do_bench", do_bench)
    # The stand-in files every shape under 1024x1024x1024x2, as a bucket would 1000^3 and 1024^3.
    with pytest.raises(tune.BenchError, match="shapes 1000x1000x1000 and 1024x1024x1024 share the table key "
                                              "1024x1024x1024x2"):
        tune.tune_module(module, op_module, [(1000, 1000, 1000), (1024, 1024, 1024)], lambda line: None)
    assert timed == []


def reduction_stand_in(cost_of, dtypes=(torch.float16,)):
    """A reduction op over rows of (rows, N): its key is (N, rows, 2) and its time cost_of(shape, config)."""
    chooser = rt.ConfigChooser("auto", rt.ReductionSpace("BLOCK_N", [1024, 2048], []))
    state = {}

    def make_inputs(shape, dtype):
        state["shape"] = shape
        return torch.ones(3)

    def run_tilegen(inputs):
        rows, n = state["shape"]
        chooser.choose((n, rows, 2), FACTS, launch=None)
        return inputs.clone()

    def do_bench(fn, **_):
        fn()
        return cost_of(state["shape"], chooser.forced)

    module = SimpleNamespace(OP="rows", DTYPES=list(dtypes), SHAPES=[], make_inputs=make_inputs,
                             run_torch=lambda inputs: inputs.clone(), run_tilegen=run_tilegen)
    return module, SimpleNamespace(configs=chooser), do_bench


def test_tiles_only_tuning_explores_are_timed_with_each_of_their_warp_counts(monkeypatch):
    # Rows of 4096: the heuristic's tile is one row a program; four rows a program with 8 warps is
    # fastest, with its default 16 warps slowest (layer_norm on the H200 ran so).
    def cost_of(shape, config):
        if config["ROWS"] == 4:
            return 1.0 if config["num_warps"] == 8 else 9.0
        return 5.0
    module, op, do_bench = reduction_stand_in(cost_of)
    monkeypatch.setattr(triton.testing, "do_bench", do_bench)
    best = tune.tune_module(module, op, [(32768, 4096)], lambda line: None)
    assert best == {"4096x32768x2": {"BLOCK_N": 4096, "ROWS": 4, "num_warps": 8, "UNROLL": 0}}


def test_a_looped_tile_is_refined_over_its_blocks_a_trip(monkeypatch):
    # Rows of 32768 in 2048 blocks: the rule's count (8 a trip) is timed first, then the fastest
    # tiles with each other count; two a trip wins here (layer_norm float32 ran its fastest with
    # fewer than the rule's at some warp counts on the H200).
    def cost_of(shape, config):
        if config["BLOCK_N"] != 2048:
            return 5.0
        return 1.0 if config["UNROLL"] == 2 else 3.0
    module, op, do_bench = reduction_stand_in(cost_of)
    monkeypatch.setattr(triton.testing, "do_bench", do_bench)
    best = tune.tune_module(module, op, [(4096, 32768)], lambda line: None)
    assert best["32768x4096x2"]["BLOCK_N"] == 2048 and best["32768x4096x2"]["UNROLL"] == 2


def test_each_key_is_reported_when_its_shape_is_done_so_a_run_cut_short_keeps_it(monkeypatch):
    def cost_of(shape, config):
        if shape == (1024, 16384):
            raise KeyboardInterrupt  # the run's time limit, mid-way through the second shape
        return 1.0 if config["BLOCK_N"] == 4096 else 2.0
    module, op, do_bench = reduction_stand_in(cost_of, dtypes=(torch.float16, torch.bfloat16))
    monkeypatch.setattr(triton.testing, "do_bench", do_bench)
    reported = []
    with pytest.raises(KeyboardInterrupt):
        tune.tune_module(module, op, [(32768, 4096), (1024, 16384)], lambda line: None,
                         on_key=lambda key, config, twin: reported.append((key, config["BLOCK_N"])))
    # The first shape's key, decided over both dtypes that share it, was written before the stop.
    assert reported == [("4096x32768x2", 4096)]


def _backward_tuned_ops():
    """The generated ops with a backward kernel that tune --backward takes (elementwise and
    reduction ops whose gradients need a kernel; the interpreter runs them in float32)."""
    import yaml

    specs = [yaml.safe_load(p.read_text()) for p in sorted((REPO / "specs").glob("*.yaml"))]
    return [s["op"] for s in specs if s["kind"] in tune.BACKWARD_KINDS
            and "\n_BACKWARD = rt." in (REPO / "generated" / f"{s['op']}.py").read_text()
            and any(isinstance(t["dtype"], list) and "float32" in t["dtype"] for t in s["inputs"].values())]


@pytest.mark.parametrize("op", _backward_tuned_ops())
def test_a_backward_is_timed_as_a_training_steps_backward_and_checked_against_autograd(op, monkeypatch):
    # tune --backward: each call is the backward alone (the forward ran once and kept its graph),
    # through the op's backward kernel, whose chooser sees the key; a config's gradients are held
    # to PyTorch autograd's of the same math.
    import importlib

    monkeypatch.syspath_prepend(str(REPO))
    module = importlib.import_module(f"generated.bench.bench_{op}")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    inputs = module.make_inputs(module.SMALL_SHAPE, torch.float32, device=device)
    call, check = tune.backward_calls(module, inputs, torch.float32)
    chooser = rt.backward_op_of(f"generated.{op}").configs
    with chooser.recording() as chosen:
        first = call()
    assert len(chosen) == 1
    second = call()  # again on the same graph
    assert len(first) == sum(t.is_floating_point() for t in inputs)
    check(second, op)
    with pytest.raises(BenchError, match="disagrees with eager autograd"):
        check([g * 1.5 + 1 for g in second], op)


def test_tune_module_times_what_its_calls_give(monkeypatch):
    # The search is the same for a backward: it forces configs on `op`'s chooser and times `calls`' call.
    fp16 = cost({(64, 64): 10, (64, 128): 3, (128, 64): 12, (128, 128): 13}, {})
    module, op_module, timed, do_bench = stand_in({torch.float16: fp16}, [torch.float16])
    monkeypatch.setattr(triton.testing, "do_bench", do_bench)
    made, checked = [], []

    def calls(module_, inputs, dtype):
        made.append(dtype)
        return (lambda: module_.run_tilegen(inputs)), lambda got, label: checked.append(label)

    best = tune.tune_module(module, op_module, None, lambda line: None, calls=calls)
    assert best["1024x1024x1024x2"]["BN"] == 128 and best["1024x1024x1024x2"]["BM"] == 64
    assert made and set(made) == {torch.float16} and len(checked) == len(timed)


def test_backward_tuning_writes_the_ops_backward_table_only(monkeypatch):
    with pytest.raises(BenchError, match="its scope is op"):
        tune.run(["softmax"], "generated", None, scope="kind", backward=True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(BenchError, match="matmul_relu: --backward tunes the backward kernel of an elementwise or reduction op"):
        tune.run(["matmul_relu"], str(REPO / "generated"), None, scope="op", backward=True)
    with pytest.raises(BenchError, match="add: .*its gradients need no kernel"):
        tune.run(["add"], str(REPO / "generated"), None, scope="op", backward=True)
    with pytest.raises(BenchError, match="clamp_add: .*no input holds floats"):
        tune.run(["clamp_add"], str(REPO / "generated"), None, scope="op", backward=True)
    assert tune.backward_table_name("softmax") == "softmax_backward"


def test_configs_whose_calls_the_call_path_never_served_are_named(monkeypatch):
    # A launch the compiled call path cannot learn pays Triton's launch on every call, which
    # tuning counts against it: the log names such configs, so a call path that should have
    # learned them is noticed (descriptor stores into a batched output were such launches).
    from tilegen.runtime import callpath

    fp16 = cost({(64, 64): 10, (64, 128): 11, (128, 64): 12, (128, 128): 13}, {})
    module, op_module, timed, do_bench = stand_in({torch.float16: fp16}, [torch.float16])
    op_module.call_path = SimpleNamespace(table=SimpleNamespace(hits=0))
    op_module.paths = lambda: (op_module.call_path,)
    run_tilegen = module.run_tilegen

    def served_unless_stored_through_descriptors(inputs):
        got = run_tilegen(inputs)
        if not (op_module.configs.forced or {}).get("TMA_STORE"):
            op_module.call_path.table.hits += 1
        return got
    module.run_tilegen = served_unless_stored_through_descriptors
    monkeypatch.setattr(callpath, "load", lambda wait=False: object())
    monkeypatch.setattr(triton.testing, "do_bench", do_bench)  # (which calls once: a repeat call)
    monkeypatch.setattr(tune, "SWEEPS", 1)
    monkeypatch.setattr(tune, "CONFIRM_ROUNDS", 0)
    monkeypatch.setattr(tune, "DECIDING_ROUNDS", 0)
    lines = []
    tune.tune_module(module, op_module, None, lines.append)
    named = [line for line in lines if "took Triton's launch on every call" in line]
    stored = {tune.identity(c) for _, c in timed if c.get("TMA_STORE")}
    assert len(named) == 1 and f": {len(stored)} of " in named[0] and "TMA_STORE" in named[0]
    # Without a compiled call path (the interpreter, no compiler) nothing is named.
    monkeypatch.setattr(callpath, "load", lambda wait=False: None)
    lines.clear()
    tune.tune_module(module, op_module, None, lines.append)
    assert not any("took Triton's launch" in line for line in lines)


def test_traced_tuning_times_launches_through_pointers_only_into_the_traced_section(monkeypatch, tmp_path):
    # `tilegen tune --traced`: the twin of an entry tuned through descriptors before tuning wrote
    # twins. No candidate loads or stores through a descriptor; the entry stays as it was.
    def fp16(config):
        return 1.0 if config.get("TMA") or config.get("TMA_STORE") else {(64, 128): 4.0}.get((config["BM"], config["BN"]), 9.0)
    module, op_module, timed, do_bench = stand_in({torch.float16: fp16}, [torch.float16])
    monkeypatch.setattr(triton.testing, "do_bench", do_bench)
    monkeypatch.setattr(tune, "SWEEPS", 1)
    reported = []
    best = tune.tune_module(module, op_module, None, lambda line: None, traced=True,
                            on_key=lambda *heard: reported.append(heard))
    assert timed and not any(through_descriptors(c) or c.get("TMA_STORE") for _, c in timed)
    [(key, config, twin)] = reported
    assert (config["BM"], config["BN"]) == (64, 128) and not through_descriptors(config) and twin is None
    assert best == {key: config}

    entry = dict(BM=128, BN=128, BK=64, TMA=1)
    (tmp_path / "matmul.json").write_text(json.dumps({"GPU": {key: entry}}))

    def tuned(module, op, shapes, progress, dtypes, compiler, on_key, calls, traced):
        assert traced
        on_key(key, dict(BM=64, BN=128, BK=32), None)

    _tables_written_by(monkeypatch, tuned)
    [path] = tune.run(["stand_in"], "generated", None, tmp_path, traced=True)
    table = json.loads(path.read_text())
    assert table["GPU"] == {key: entry}
    assert table[rt.configs.traced_section("GPU")] == {key: dict(BM=64, BN=128, BK=32)}


def test_traced_tuning_is_refused_where_no_launch_loads_through_descriptors(monkeypatch):
    with pytest.raises(BenchError, match="a backward kernel loads through pointers only"):  # (a flag's error: no GPU asked)
        tune.run(["softmax"], str(REPO / "generated"), None, scope="op", backward=True, traced=True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(BenchError, match="softmax: --traced .* a reduction op loads through pointers only"):
        tune.run(["softmax"], str(REPO / "generated"), None, traced=True)
