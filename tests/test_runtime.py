"""tilegen.runtime, tested as source on the CPU: layouts, config choice, tables, the version
check, the tools' hooks, and the ops' launch logic (in the interpreter)."""

from __future__ import annotations

import functools

import pytest
import torch

import tilegen.runtime as rt
from tilegen.build import load_specs
from tilegen.render import Renderer
from tilegen.tables import render_table, table_for_spec
from tests.conftest import REPO, run_in_threads

NAMES = ("BM", "BN", "BK")


def test_collapse_merges_contiguous_dims_and_drops_ones():
    t = torch.empty(4, 1, 5, 6)
    sizes, strides = rt.layout.collapse(t.shape, [t.stride()])
    assert sizes == [120] and strides == [[1]]
    u = t.transpose(0, 3)
    sizes, strides = rt.layout.collapse(u.shape, [u.stride(), u.contiguous().stride()])
    assert sizes == [6, 5, 4] and strides[0] == [1, 6, 30]


def test_needs_int64_on_huge_tensors_without_memory():
    small = torch.empty(1024, device="meta")
    assert not rt.layout.needs_int64(small, extra=1024)
    huge = torch.empty(2**31 + 1, device="meta", dtype=torch.float16)
    assert rt.layout.needs_int64(huge)
    # A view whose elements are few but whose reach (strides) passes 2**31 needs it too.
    reach = torch.empty(2**16, 2**16, device="meta", dtype=torch.float16)[:, :2]
    assert reach.numel() < 2**31 and rt.layout.needs_int64(reach)
    assert rt.layout.needs_int64(torch.empty(2**31 - 100, device="meta"), extra=1024)


def test_nearest_table_entry():
    fitting = [dict(BM=64, BN=64, BK=64, num_warps=4, num_stages=4),
               dict(BM=128, BN=128, BK=64, num_warps=8, num_stages=3)]
    entries = {(1024, 1024, 1024, 2): dict(BM=64, BN=64, BK=64, num_warps=4, num_stages=4),
               (4096, 4096, 4096, 2): dict(BM=128, BN=128, BK=64, num_warps=8, num_stages=3),
               (8192, 8192, 8192, 2): dict(BM=256, BN=128, BK=64, num_warps=8, num_stages=3)}
    assert rt.configs.nearest_entry(entries, (4096, 4096, 4096, 2), fitting)["BM"] == 128
    assert rt.configs.nearest_entry(entries, (2048, 1024, 1024, 2), fitting)["BM"] == 64
    # The nearest entry's tiles are not candidates: the next one within reach.
    assert rt.configs.nearest_entry(entries, (8192, 8192, 4096, 2), fitting)["BM"] == 128
    # Another element size, or too far away: no entry (the heuristic decides).
    assert rt.configs.nearest_entry(entries, (4096, 4096, 4096, 4), fitting) is None
    assert rt.configs.nearest_entry(entries, (16, 16, 16, 2), fitting) is None


@pytest.fixture
def sources(tmp_path):
    """The project's specs by op, and `narrow`: matmul_relu with tiles of 64 and 128 rows and
    columns only, and K steps of 32 and 64."""
    narrow = (REPO / "specs" / "matmul_relu.yaml").read_text().replace("op: matmul_relu", "op: narrow")
    narrow = narrow.replace("sizes: [64, 128, 256]", "sizes: [64, 128]").replace("sizes: [32, 64, 128]",
                                                                                 "sizes: [32, 64]")
    (tmp_path / "narrow.yaml").write_text(narrow)
    return {s.spec.op: s.spec for s in load_specs([REPO / "specs", tmp_path], REPO)}


def test_table_is_filtered_to_each_specs_tile_sizes(sources):
    table = {"GPU": {"64x64x64x2": dict(BM=256, BN=128, BK=64, num_warps=8, num_stages=3),
                     "128x128x128x2": dict(BM=64, BN=64, BK=32, num_warps=4, num_stages=4)}}
    assert list(table_for_spec(sources["matmul"], table)["GPU"]) == [(64, 64, 64, 2), (128, 128, 128, 2)]
    assert list(table_for_spec(sources["narrow"], table)["GPU"]) == [(128, 128, 128, 2)]
    assert table_for_spec(sources["rms_scale_exp"], {"GPU": {"4096x4": dict(BLOCK=1024, num_warps=4)}}) == {}
    assert render_table({}) == "{}"


def test_a_reductions_entries_carry_their_blocks_a_trip_and_programs_a_multiprocessor(sources):
    # An entry tune wrote with UNROLL, PER_SM, FIXED_N or EVICT keeps them; one written before the fields
    # reads 0 (the rule's blocks a trip; a program a row block; the row length read at run time).
    own = {"GPU": {"32768x4096x2": dict(BLOCK=8192, ROWS=1, num_warps=16, UNROLL=2, FIXED_N=1, EVICT=1),
                   "4096x4096x2": dict(BLOCK=4096, ROWS=1, num_warps=16, UNROLL=0, PER_SM=2),
                   "4096x32768x2": dict(BLOCK=1024, ROWS=1, num_warps=4)}}
    entries = table_for_spec(sources["rms_norm"], {}, own)["GPU"]
    assert entries[(32768, 4096, 2)] == dict(BLOCK_N=8192, ROWS=1, num_warps=16, UNROLL=2, PER_SM=0, FIXED_N=1, EVICT=1, LOOP=0)
    assert entries[(4096, 4096, 2)] == dict(BLOCK_N=4096, ROWS=1, num_warps=16, UNROLL=0, PER_SM=2, FIXED_N=0, EVICT=0, LOOP=0)
    assert entries[(4096, 32768, 2)] == dict(BLOCK_N=1024, ROWS=1, num_warps=4, UNROLL=0, PER_SM=0, FIXED_N=0, EVICT=0, LOOP=0)
    assert ("(32768, 4096, 2): dict(BLOCK_N=8192, ROWS=1, num_warps=16, UNROLL=2, PER_SM=0, FIXED_N=1, EVICT=1, LOOP=0),"
            in render_table({"GPU": entries}))


def test_an_ops_own_table_comes_before_its_kinds(sources):
    kind = {"GPU": {"128x4096x4096x2": dict(BM=64, BN=64, BK=128, num_warps=4, num_stages=5),
                    "4096x4096x4096x2": dict(BM=128, BN=128, BK=64, num_warps=8, num_stages=3)}}
    own = {"GPU": {"128x4096x4096x2": dict(BM=64, BN=128, BK=64, SPLIT_K=2, num_warps=4, num_stages=4),
                   "4096x4096x4096x2": dict(BM=256, BN=128, BK=64, num_warps=8, num_stages=4)},
           "OTHER": {"1024x1024x1024x2": dict(BM=64, BN=64, BK=32, num_warps=4, num_stages=3)}}
    narrow = table_for_spec(sources["narrow"], kind, own)
    # Its own entry where the kind's tile is off its menu (BK 128); the kind's where its own is
    # (BM 256); entries for a GPU only its own table knows.
    assert narrow["GPU"][(128, 4096, 4096, 2)]["BN"] == 128 and narrow["GPU"][(128, 4096, 4096, 2)]["SPLIT_K"] == 2
    assert narrow["GPU"][(4096, 4096, 4096, 2)]["BM"] == 128
    assert narrow["OTHER"][(1024, 1024, 1024, 2)]["BK"] == 32
    # Another op reads only its kind's table: the same entries as without `own`.
    assert table_for_spec(sources["matmul"], kind) == table_for_spec(sources["matmul"], kind, {})
    assert table_for_spec(sources["matmul"], kind)["GPU"][(4096, 4096, 4096, 2)]["BM"] == 128


def test_a_backward_kernel_reads_its_own_table_ahead_of_its_ops(sources, monkeypatch):
    # tables/ops/<op>_backward.json (tune --backward): the backward's chooser reads it, and the
    # forward never sees it. An elementwise backward has the op's entries beneath, and reads the
    # op's _TABLE without one; a reduction's backward reads its own entries only (the forward's
    # row configs misled it), the heuristic's without them.
    from tilegen import lowering
    from tilegen.reduction_lowering import reduction_context

    own = {"GPU": {"4096x32768x4": dict(BLOCK=8192, ROWS=1, num_warps=32, UNROLL=0)}}
    backward = {"GPU": {"4096x32768x4": dict(BLOCK=4096, ROWS=1, num_warps=16, UNROLL=4),
                        "512x32768x4": dict(BLOCK=2048, ROWS=1, num_warps=8, UNROLL=2)}}
    tables = {("rms_norm", "op"): own, ("rms_norm_backward", "op"): backward}
    monkeypatch.setattr(lowering, "load_table", lambda name, scope="kind": tables.get((name, scope), {}))
    spec = sources["rms_norm"]
    alone = table_for_spec(spec, {}, backward)["GPU"]
    assert alone[(4096, 32768, 4)] == dict(BLOCK_N=4096, ROWS=1, num_warps=16, UNROLL=4, PER_SM=0, FIXED_N=0, EVICT=0, LOOP=0)
    assert alone[(512, 32768, 4)]["BLOCK_N"] == 2048
    context = reduction_context(spec, "")
    assert context["backward_table"] == render_table({"GPU": alone})
    assert context["table"] == render_table(table_for_spec(spec, {}, own))
    # The op's own entry at a key the backward's table lacks stays the forward's.
    tables[("rms_norm", "op")] = {"GPU": {"128x32768x4": dict(BLOCK=128, ROWS=32, num_warps=8, UNROLL=0)}}
    assert (32768, 128, 4) not in eval(reduction_context(spec, "")["backward_table"])["GPU"]
    tables[("rms_norm", "op")] = own
    # Rendered: the backward's chooser (reduction and elementwise alike) reads _BACKWARD_TABLE.
    tables[("scaled_silu_mul_backward", "op")] = {"GPU": {"16777216x2": dict(BLOCK=2048, num_warps=4)}}
    items = {i.spec.op: i for i in load_specs([REPO / "specs"], REPO)}
    for op, kernel in (("rms_norm", "_rms_norm_backward_kernel"), ("scaled_silu_mul", "_scaled_silu_mul_backward_kernel")):
        source = Renderer().op_module(items[op])
        assert source.count("_BACKWARD_TABLE") == 2 and "\n_BACKWARD_TABLE = {\n    'GPU': {" in source, op
        chooser = source[source.index("_BACKWARD = rt."):].split("\n")[2]
        assert "_BACKWARD_TABLE, key_mask=" in chooser, (op, chooser)
    tables.clear()
    tables[("rms_norm", "op")] = own
    tables[("scaled_silu_mul", "op")] = {"GPU": {"16777216x2": dict(BLOCK=1024, num_warps=4)}}
    assert reduction_context(spec, "")["backward_table"] == "{}"
    assert "\n_BACKWARD_TABLE = {}\n" in Renderer().op_module(items["rms_norm"])
    assert "_BACKWARD_TABLE" not in Renderer().op_module(items["scaled_silu_mul"])


def test_tuned_entries_merge_into_the_table_of_their_scope(tmp_path):
    from tilegen.tables import load_table, merge_entries

    merge_entries("matmul", "GPU", {"4096x4096x4096x2": dict(BM=128)}, tmp_path)
    merge_entries("matmul", "OTHER", {"16x4096x4096x2": dict(BM=64)}, tmp_path)
    path = merge_entries("matmul_relu", "GPU", {"8192x8192x8192x2": dict(BM=256), "16x16x16x2": dict(BM=64)},
                         tmp_path, scope="op")
    assert path == tmp_path / "ops" / "matmul_relu.json"
    merge_entries("matmul_relu", "GPU", {"8192x8192x8192x2": dict(BM=128)}, tmp_path, scope="op")
    assert load_table("matmul", tmp_path) == {"GPU": {"4096x4096x4096x2": dict(BM=128)},
                                              "OTHER": {"16x4096x4096x2": dict(BM=64)}}
    own = load_table("matmul_relu", tmp_path, scope="op")
    assert list(own["GPU"]) == ["16x16x16x2", "8192x8192x8192x2"] and own["GPU"]["8192x8192x8192x2"] == dict(BM=128)


@pytest.mark.parametrize("value, launch", [(None, "auto"), ("tiled", "tiled"), ("persistent", "persistent")])
def test_schedule_launch(tmp_path, value, launch):
    text = (REPO / "specs" / "matmul_relu.yaml").read_text()
    if value is not None:
        text += f"schedule:\n  launch: {value}\n"
    (tmp_path / "op.yaml").write_text(text)
    item = load_specs([tmp_path / "op.yaml"], tmp_path)[0]
    assert item.spec.launch == launch
    source = Renderer().op_module(item)
    assert f'launch="{launch}"' in source


def test_stride_factor_is_the_largest_power_of_two_dividing_the_stride():
    strides = (1, 2, 12, 300, 1000, 4096, 769, 0)
    assert [rt.layout.stride_factor(s) for s in strides] == [1, 2, 4, 4, 8, 16, 1, 16]
    assert all(s // rt.layout.stride_factor(s) * rt.layout.stride_factor(s) == s for s in strides)
    # Past 32 bits the stride stays whole, so multiplying it back never needs a wider type.
    assert rt.layout.stride_factor(2**31 + 16) == 1


def test_size_factor_splits_only_sizes_triton_would_not_mark():
    sizes = [1, 2, 6, 12, 1000, 1025, 16, 4096, 4000, 2**31 + 8]
    assert [rt.layout.size_factor(s) for s in sizes] == [1, 2, 2, 4, 8, 1, 1, 1, 1, 1]
    assert all(s % rt.layout.size_factor(s) == 0 for s in sizes)


def test_k_rows_load_wide_only_from_aligned_rows_along_k():
    odd_a, odd_b = torch.empty(64, 513, dtype=torch.float16), torch.empty(513, 64, dtype=torch.float16)
    assert rt.layout.k_rows_load_wide(torch.empty(64, 1000, dtype=torch.float16), odd_b)  # A: K contiguous, rows of 2000 bytes
    assert not rt.layout.k_rows_load_wide(odd_a, odd_b)  # rows of 1026 bytes; B holds N contiguously
    assert rt.layout.k_rows_load_wide(odd_a, torch.empty(64, 520, dtype=torch.float16).t()[:513])  # B: K contiguous
    assert not rt.layout.k_rows_load_wide(torch.empty(1, 64 * 1000 + 1, dtype=torch.float16)[0, 1:].view(64, 1000), odd_b)


def test_exploring_varies_warps_and_stages_around_the_same_tiles():
    candidates = rt.MatmulSpace(NAMES, [64, 128, 256], [64, 128, 256], [32, 64, 128], [], [], (False,) * 3,
                                splits=(1, 2, 4, 8)).candidates
    facts, key = (132, 232448, "H200"), (2048, 2048, 2048, 2)
    base, wide = candidates(facts, key), candidates(facts, key, explore=True)

    assert {rt.tile_of(c) for c in wide} == {rt.tile_of(c) for c in base} and all(c in wide for c in base)
    # Every config is explored with tensor-descriptor loads too, and with loads and stores; only
    # tuning offers them.
    plain = [c for c in wide if not c.get("TMA")]
    assert [c for c in wide if c.get("TMA") and not c.get("TMA_STORE")] == [dict(c, TMA=1) for c in plain]
    assert [c for c in wide if c.get("TMA_STORE")] == [dict(c, TMA=1, TMA_STORE=1) for c in plain]
    assert not any("TMA" in c or "TMA_STORE" in c for c in base)
    assert {c["num_warps"] for c in wide} == {4, 8} and {c["num_stages"] for c in wide} == {2, 3, 4, 5}
    assert all((c["BM"] + c["BN"]) * c["BK"] * 2 * c["num_stages"] <= facts[1] for c in wide)
    # Accumulators of 128x256 need 8 warps, exploring or not.
    assert {c["num_warps"] for c in wide if c["BM"] * c["BN"] == 128 * 256} == {8}
    # Warps and stages the spec lists are all there is to explore, besides the loads.
    fixed = rt.MatmulSpace(NAMES, [64], [64], [32], [4], [3], (False,) * 3).candidates
    one = dict(BM=64, BN=64, BK=32, SPLIT_K=1, num_warps=4, num_stages=3)
    # (2048^2 in 64x64 tiles fills more than one wave, so the persistent launch is tried too.)
    assert fixed(facts, key) == [one]
    loads, stores = dict(TMA=1), dict(TMA=1, TMA_STORE=1)
    assert fixed(facts, key, explore=True) == [
        one, dict(one, **loads), dict(one, **stores),
        dict(one, PERSISTENT=1), dict(one, PERSISTENT=1, **loads), dict(one, PERSISTENT=1, **stores),
        dict(one, PERSISTENT=1, FLATTEN=1), dict(one, PERSISTENT=1, FLATTEN=1, **loads),
        dict(one, PERSISTENT=1, FLATTEN=1, **stores)]
    blocks = rt.ElementwiseSpace("BLOCK", [1024, 4096], [], False).candidates
    assert blocks(facts, (1 << 20, 2)) == [dict(BLOCK=1024, num_warps=4), dict(BLOCK=4096, num_warps=8)]
    assert [c["num_warps"] for c in blocks(facts, (1 << 20, 2), explore=True)] == [2, 4, 8, 4, 8, 16]


def test_split_k_candidates_only_where_tiles_leave_the_gpu_idle():
    space = rt.MatmulSpace(NAMES, [64, 128, 256], [64, 128, 256], [32, 64, 128], [], [], (False,) * 3,
                           splits=(1, 2, 4, 8))
    candidates = space.candidates
    facts = (132, 232448, "")
    large = candidates(facts, (4096, 4096, 4096, 2))
    assert {c["SPLIT_K"] for c in large} == {1} and {c["BM"] for c in large} == {64, 128, 256}
    skinny = candidates(facts, (16, 4096, 4096, 2))
    assert {c["BM"] for c in skinny} == {64} and {c["SPLIT_K"] for c in skinny} == {1, 2, 4, 8}
    assert all(4096 // c["BN"] * c["SPLIT_K"] <= 4 * 132 for c in skinny)
    # The heuristic splits K for a skinny shape and keeps whole tiles for a large one.
    assert space.heuristic(skinny, facts, (16, 4096, 4096, 2))["SPLIT_K"] > 1
    assert space.heuristic(large, facts, (4096, 4096, 4096, 2))["SPLIT_K"] == 1


def test_a_full_precision_float32_dot_takes_tiles_its_fma_units_keep_in_registers():
    menu = ([64, 128, 256], [64, 128, 256], [32, 64, 128], [], [], (False,) * 3)
    facts = (132, 232448, "")
    ieee = rt.MatmulSpace(NAMES, *menu, ieee_float32=True)
    tensor_cores = rt.MatmulSpace(NAMES, *menu)  # tf32, or no float32 operands
    for key in ((16384, 4096, 4096, 4), (4096, 1024, 1024, 4)):
        chosen = ieee.heuristic(ieee.candidates(facts, key), facts, key)
        assert chosen["BM"] * chosen["BN"] <= 64 * 128 and chosen["BK"] == 32
        assert tensor_cores.heuristic(tensor_cores.candidates(facts, key), facts, key)["BN"] == 256
    # Half-precision keys of the same op still take the tensor cores' large tiles.
    half = (16384, 4096, 4096, 2)
    assert ieee.heuristic(ieee.candidates(facts, half), facts, half) == \
        tensor_cores.heuristic(tensor_cores.candidates(facts, half), facts, half)


def test_a_spec_that_lists_only_splits_runs_whole_tiles_where_none_applies():
    """`split_k: [4]` splits where a split is offered; a shape where it is not (tiles that fill the
    GPU, a K too short for four parts) runs whole tiles, where it had no config at all."""
    space = rt.MatmulSpace(NAMES, [64, 128], [64, 128], [32, 64], [], [], (False,) * 3, splits=(4,))
    facts = (132, 232448, "")
    for key in ((4096, 4096, 4096, 2), (16, 16, 16, 4), (16, 4096, 256, 2)):
        fitting = space.candidates(facts, key)
        assert fitting and {c["SPLIT_K"] for c in fitting} == {1}, key
        assert space.heuristic(fitting, facts, key)["SPLIT_K"] == 1
    skinny = space.candidates(facts, (16, 4096, 4096, 2))
    assert {c["SPLIT_K"] for c in skinny} == {4}
    assert space.heuristic(skinny, facts, (16, 4096, 4096, 2))["SPLIT_K"] == 4


@pytest.mark.parametrize("value, factors", [(None, (1, 2, 4, 8)), ("auto", (1, 2, 4, 8)), ("never", (1,)),
                                            ([4, 1, 2], (1, 2, 4))])
def test_schedule_split_k(tmp_path, value, factors):
    text = (REPO / "specs" / "matmul_relu.yaml").read_text()
    if value is not None:
        text += f"schedule:\n  split_k: {value}\n"
    (tmp_path / "op.yaml").write_text(text)
    spec = load_specs([tmp_path / "op.yaml"], tmp_path)[0].spec
    assert spec.split_k == factors
    # Table entries with a split the spec does not allow are left out; older ones without a split mean 1.
    table = {"GPU": {"16x4096x4096x2": dict(BM=64, BN=64, BK=128, SPLIT_K=4, num_warps=4, num_stages=4),
                     "4096x4096x4096x2": dict(BM=128, BN=128, BK=64, num_warps=8, num_stages=3)}}
    entries = table_for_spec(spec, table)["GPU"]
    assert entries[(4096, 4096, 4096, 2)]["SPLIT_K"] == 1
    assert ((16, 4096, 4096, 2) in entries) == (4 in factors)


def test_persistent_variants_are_tried_in_tuning_only_past_one_wave():
    facts = (132, 232448, "")

    def candidates(launch, key, explore):
        return rt.MatmulSpace(NAMES, [64, 128], [64, 128], [64], [], [], (False,) * 3, splits=(1, 2),
                              launch=launch).candidates(facts, key, explore)

    # auto: the runtime list has none (the table may name them); tuning varies the unsplit
    # configs whose tiles fill more than one wave.
    assert not any(c.get("PERSISTENT") for c in candidates("auto", (4096, 4096, 4096, 2), False))
    explored = candidates("auto", (4096, 4096, 4096, 2), True)
    persistent = [c for c in explored if c.get("PERSISTENT")]
    assert persistent and all(c["SPLIT_K"] == 1 for c in persistent)
    assert {(c["BM"], c["BN"]) for c in persistent} == {(64, 64), (64, 128), (128, 64), (128, 128)}
    assert not any(c.get("PERSISTENT") for c in candidates("auto", (1024, 1024, 1024, 2), True)
                   if c["BM"] * c["BN"] == 128 * 128)  # 64 tiles: one wave, nothing to loop over
    # Each persistent variant is tried with its tile loop flattened into the K loop too.
    flattened = [c for c in explored if c.get("FLATTEN")]
    assert [dict(c, FLATTEN=1) for c in persistent if not c.get("FLATTEN")] == flattened
    # tiled and persistent fix the style in the wrapper: tuning varies no more than flattening
    # a persistent one's loop.
    assert not any(c.get("PERSISTENT") or c.get("FLATTEN") for c in candidates("tiled", (4096, 4096, 4096, 2), True))
    fixed = candidates("persistent", (4096, 4096, 4096, 2), True)
    assert {c.get("FLATTEN", 0) for c in fixed} == {0, 1}
    assert not any(c.get("PERSISTENT") for c in fixed if not c.get("FLATTEN"))


def test_split_k_workspace_off_cuda_is_fresh_for_each_call():
    # No stream orders CPU (interpreter) launches: each call gets its own buffers.
    first = rt.launch.split_k_workspace(torch.device("cpu"), 64, 4)
    second = rt.launch.split_k_workspace(torch.device("cpu"), 64, 4)
    assert first[0].numel() == 64 and first[1].tolist() == [0, 0, 0, 0]
    assert first[0].data_ptr() != second[0].data_ptr() and first[1].data_ptr() != second[1].data_ptr()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="only CUDA streams keep a split-K workspace")
def test_split_k_workspace_is_kept_per_stream_and_grows():
    device = torch.empty(0, device="cuda").device  # as the wrappers pass it: with its index
    sums, counters = rt.launch.split_k_workspace(device, 1000, 10)
    assert sums.numel() >= 1000 and counters.numel() >= 10 and not counters.any()
    # A smaller launch on the same stream reuses both; a larger one grows the partial sums.
    again = rt.launch.split_k_workspace(device, 500, 5)
    assert (again[0].data_ptr(), again[1].data_ptr()) == (sums.data_ptr(), counters.data_ptr())
    grown = rt.launch.split_k_workspace(device, sums.numel() + 1, 10)
    assert grown[0].numel() > sums.numel() and grown[1].data_ptr() == counters.data_ptr()
    # Another stream's launches may run at the same time: it has a workspace of its own.
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        theirs = rt.launch.split_k_workspace(device, 500, 5)
    assert theirs[0].data_ptr() != grown[0].data_ptr() and theirs[1].data_ptr() != counters.data_ptr()


def test_config_chooser_modes():
    space = rt.ElementwiseSpace("BLOCK", [1024, 4096], [4], exact=False)
    facts = (132, 1 << 30, "GPU")
    fixed = rt.ConfigChooser("fixed", space)
    assert fixed.choose((1 << 20, 2), facts, None)["BLOCK"] == 1024
    table = {"GPU": {(1 << 20, 2): dict(BLOCK=4096, num_warps=4)}}
    auto = rt.ConfigChooser("auto", space, table)
    assert auto.choose((1 << 20, 2), facts, None)["BLOCK"] == 4096
    assert auto.choose((1 << 20, 2), (132, 1 << 30, "Other"), None) == auto.cache[(1 << 20, 2)]
    # No table entry for another GPU: the heuristic, the largest block that still fills the GPU.
    assert rt.ConfigChooser("auto", space, table).choose((1 << 20, 2), (132, 1 << 30, "Other"), None)["BLOCK"] == 1024


def test_a_traced_launch_takes_the_pointer_twin_of_an_entry_measured_through_descriptors():
    # Traced launches (torch.compile, export) load through pointers: an entry measured through
    # tensor descriptors gives way to its twin, the fastest pointer launch its tune timed; without
    # a twin it is left out (the nearest other entry, else the heuristic); other entries stand.
    space = rt.MatmulSpace(("BM", "BN", "BK"), [64, 128], [64, 128], [32, 64], [], [], exact=(False, False, False))
    facts = (132, 232448, "GPU")
    tiled = dict(BM=128, BN=128, BK=64, SPLIT_K=1, num_warps=4, num_stages=3)
    described = dict(tiled, TMA=1, PERSISTENT=1, TMA_STORE=1)
    twin = dict(BM=64, BN=128, BK=32, SPLIT_K=1, num_warps=8, num_stages=4)
    key, bare, plain = (4096, 4096, 4096, 2), (256, 128, 128, 2), (128, 128, 128, 2)
    table = {"GPU": {key: described, bare: dict(described, BM=64), plain: tiled},
             rt.configs.traced_section("GPU"): {key: twin, plain: dict(twin, BK=64)}}
    chooser = rt.ConfigChooser("auto", space, table)
    assert chooser.choose(key, facts, None) == described
    assert chooser.choose(key, facts, None, traced=True) == twin
    assert chooser.choose(key, facts, None) == described  # (each kind of launch remembers its own)
    assert chooser.choose(plain, facts, None, traced=True) == tiled  # a pointer entry: its twin is stale
    # No twin: the entry is passed over for the nearest one through pointers (plain, within reach)...
    assert chooser.choose(bare, facts, None) == table["GPU"][bare]
    assert chooser.choose(bare, facts, None, traced=True) == tiled
    # ... or, where none is within reach, the heuristic's config (never one that asks for descriptors).
    assert not rt.ConfigChooser("auto", space, {"GPU": {bare: table["GPU"][bare]}}).choose(
        bare, facts, None, traced=True).get("TMA")


def test_a_gpu_without_a_table_borrows_the_one_tilegen_table_gpu_names(monkeypatch):
    space = rt.ElementwiseSpace("BLOCK", [1024, 4096], [4], exact=False)
    table = {"NVIDIA H200": {(1 << 20, 2): dict(BLOCK=4096, num_warps=4)}}
    h100 = (132, 232448, "NVIDIA H100 80GB HBM3")
    chooser = rt.ConfigChooser("auto", space, table)
    assert chooser.choose((1 << 20, 2), h100, None)["BLOCK"] == 1024  # its own (none): the heuristic
    monkeypatch.setenv("TILEGEN_TABLE_GPU", "NVIDIA H200")
    chooser.reset()
    assert chooser.choose((1 << 20, 2), h100, None)["BLOCK"] == 4096  # the H200's entry
    # The interpreter reads no table, borrowed or not; a name with no table gets the heuristic.
    assert rt.ConfigChooser("auto", space, table).choose((1 << 20, 2), (132, 1 << 30, ""), None)["BLOCK"] == 1024
    monkeypatch.setenv("TILEGEN_TABLE_GPU", "NVIDIA B200")
    assert rt.ConfigChooser("auto", space, table).choose((1 << 20, 2), h100, None)["BLOCK"] == 1024


def test_a_borrowed_matmul_entry_stands_only_where_its_tile_fits_this_gpus_shared_memory(monkeypatch):
    import importlib

    chooser = importlib.import_module("generated.matmul")._OP.configs
    key = (8192, 8192, 8192, 2)
    entry = chooser.table["NVIDIA H200"][key]  # 128x256x64: 48 KiB of float16 tiles a stage
    monkeypatch.setenv("TILEGEN_TABLE_GPU", "NVIDIA H200")
    try:
        chooser.reset()
        assert chooser.choose(key, (132, 232448, "NVIDIA H100 80GB HBM3"), None) is entry
        chooser.reset()
        assert chooser.choose(key, (40, 65536, "A GPU OF 64 KIB"), None) is not entry  # (two stages: 96 KiB)
    finally:
        chooser.reset()


def test_config_key_leaves_out_axes_not_in_configs_key():
    calls = []

    class Space:
        def candidates(self, facts, key, explore=False):
            calls.append(key)
            return [dict(BM=64, BN=64, BK=32, num_warps=4, num_stages=3)]

        def heuristic(self, fitting, facts, key):
            return fitting[0]

    chooser = rt.ConfigChooser("auto", Space(), key_mask=(True, False, False, True))
    facts = (132, 1 << 30, "")
    chooser.choose((64, 128, 256, 2), facts, None)
    chooser.choose((64, 4096, 32, 2), facts, None)  # same M bucket and element size: cached
    chooser.choose((128, 128, 256, 2), facts, None)
    assert calls == [(64, 128, 256, 2), (128, 128, 256, 2)]


def test_chooser_hooks_for_tools_and_what_they_tell_listeners():
    space = rt.ElementwiseSpace("TILE", [1024, 4096], [4], exact=False)
    chooser = rt.ConfigChooser("auto", space)
    changes = []
    chooser.on_change.append(lambda: changes.append(1))
    facts = (132, 1 << 30, "")
    with chooser.recording() as chosen:
        picked = chooser.choose((1 << 20, 2), facts, None)
        chooser.choose((1 << 20, 2), facts, None)  # from the cache, still recorded
    assert chosen == [((1 << 20, 2), picked)] * 2 and changes == [1]
    with chooser.forcing(dict(TILE=4096, num_warps=4)):
        assert chooser.choose((1 << 20, 2), facts, None)["TILE"] == 4096
    assert chooser.choose((1 << 20, 2), facts, None) == picked and len(changes) == 3
    timed = []
    with chooser.using_mode("autotune"):
        assert chooser.mode == "autotune"
    assert chooser.mode == "auto" and len(changes) == 5 and not timed


def test_block_names_are_the_specs_in_kernels_candidates_and_tables(tmp_path):
    """A spec that names its blocks otherwise (TILE_M...) gets those names everywhere: the
    kernel's constexprs, the candidates and the rendered table."""
    text = (REPO / "specs" / "matmul_relu.yaml").read_text().replace("op: matmul_relu", "op: named")
    text = text.replace("block: BM", "block: TILE_M").replace("block: BN", "block: TILE_N").replace("block: BK", "block: TILE_K")
    (tmp_path / "named.yaml").write_text(text)
    item = load_specs([tmp_path / "named.yaml"], tmp_path)[0]
    source = Renderer().op_module(item)
    assert "TILE_M: tl.constexpr" in source and "rt.MatmulSpace(('TILE_M', 'TILE_N', 'TILE_K')" in source
    assert "dict(TILE_M=" in source and "BM=" not in source
    table = {"GPU": {"4096x4096x4096x2": dict(BM=128, BN=128, BK=64, num_warps=8, num_stages=3)}}
    assert table_for_spec(item.spec, table)["GPU"][(4096, 4096, 4096, 2)]["TILE_M"] == 128


@pytest.mark.parametrize("policy", ["auto", "always", "never"])
def test_elementwise_masks_policy_reaches_the_launch(tmp_path, policy, monkeypatch):
    text = (REPO / "specs" / "add.yaml").read_text()
    text = text.replace("op: add", "op: masked").replace("  N: auto ", f"  N: {policy} ")
    (tmp_path / "masked.yaml").write_text(text)
    item = load_specs([tmp_path / "masked.yaml"], tmp_path)[0]
    assert f'mask="{policy}"' in Renderer().op_module(item)
    evens = []
    op = rt.ElementwiseOp("masked", _StubKernel(), _StubKernel(), rt.ConfigChooser(
        "fixed", rt.ElementwiseSpace("BLOCK", [1024], [4], exact=policy == "never")), mask=policy)
    monkeypatch.setattr(rt.launch.Kernel, "launch", lambda self, grid, args, varying, constexprs, *rest:
                        evens.append(constexprs["EVEN"]))
    a = torch.empty(2048)
    op.run((a, a), (torch.empty(2048),))
    assert evens == [{"auto": True, "always": False, "never": True}[policy]]


class _StubKernel:
    arg_names = []


def test_generated_modules_check_the_runtime_version():
    source = (REPO / "generated" / "add.py").read_text()
    assert f"rt.require({rt.VERSION}, __name__)" in source
    rt.require(rt.VERSION, "generated.add")
    with pytest.raises(rt.RuntimeVersionError, match="generated.add was generated for tilegen.runtime version 0.*"
                       "rebuild the package with `tilegen build`"):
        rt.require(0, "generated.add")


def test_the_runtime_imports_only_torch_and_triton():
    import ast

    allowed = {"torch", "triton", "tilegen"}
    stdlib = {"contextlib", "ctypes", "functools", "inspect", "math", "os", "signal", "warnings", "threading", "fcntl", "glob", "hashlib", "importlib",
              "re", "shutil", "stat", "subprocess", "sys", "sysconfig", "tempfile", "typing"}
    for path in (REPO / "tilegen" / "runtime").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            for name in names:
                assert name.split(".")[0] in allowed | stdlib, f"{path.name} imports {name}"


def test_generated_package_holds_no_runtime_copy():
    names = {p.name for p in (REPO / "generated").glob("*.py")}
    assert not names & {"_runtime.py", "_native.py", "_fastpath.py"}
    for path in (REPO / "generated").glob("*.py"):
        assert 'r"""\n#include' not in path.read_text()  # no C or C++ in Python strings


def test_op_of_finds_each_generated_op():
    import generated

    assert rt.op_of("generated.add").name == "add" and rt.op_of("generated.matmul").name == "matmul"
    assert generated.add  # imported, so registered
    with pytest.raises(LookupError, match="no tilegen op is defined in module 'generated.nothing'"):
        rt.op_of("generated.nothing")


def _every_op_and_dtype():
    specs = {source.spec.op: source.spec for source in load_specs([REPO / "specs"], REPO)}
    for op, spec in sorted(specs.items()):
        for dtype in spec.inputs[0].dtypes:
            yield pytest.param(op, spec.kind, dtype, id=f"{op}-{dtype}")


@pytest.mark.parametrize("op, kind, dtype", list(_every_op_and_dtype()))
def test_in_the_interpreter_every_op_and_dtype_computes_right_or_refuses(op, kind, dtype):
    """Every op with every dtype it accepts, in the interpreter: the eager PyTorch result, or
    one clear error where the interpreter cannot compute it (bfloat16 dots)."""
    if not rt.INTERPRET:
        pytest.skip("checks the interpreter; the GPU tests run every dtype compiled")
    import importlib

    bench = importlib.import_module(f"generated.bench.bench_{op}")
    dtype = getattr(torch, dtype)
    inputs = bench.make_inputs(bench.SMALL_SHAPE, dtype, device="cpu")
    if kind == "matmul" and dtype == torch.bfloat16:
        with pytest.raises(TypeError, match=f"{op}: argument '.*' is bfloat16, which Triton's interpreter cannot"):
            bench.run_tilegen(inputs)
        return
    if kind == "matmul" and dtype.itemsize == 1:  # fp8: no dot in the interpreter
        with pytest.raises(TypeError, match=f"{op}: argument '.*' is {str(dtype)[6:]}, which Triton's interpreter "
                                            "cannot multiply"):
            bench.run_tilegen(inputs)
        return
    got, want = bench.run_tilegen(inputs), bench.run_torch(inputs)
    tolerance = {torch.float16: 2e-2, torch.bfloat16: 3e-2}.get(dtype, 1e-4)
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        torch.testing.assert_close(g.float(), w.float(), atol=tolerance, rtol=tolerance, equal_nan=True)


def test_an_elementwise_out_may_be_an_input_itself_as_in_pytorch():
    """add(a, b, out=a) is PyTorch's in-place add: allowed where out= is the input's very elements
    in its layout (each element is read before it is written); a transposed view of the same
    memory, a shifted one, or a matmul's or reduction's input (whose kernels read elements other
    programs write) is refused."""
    import generated
    from tilegen import testing as s

    a, b = s.random((6, 5), torch.float32, 0), s.random((6, 5), torch.float32, 1)
    want = a + b
    assert generated.add(a, b, out=a) is a
    torch.testing.assert_close(a, want, atol=0, rtol=0)
    both = b.clone()
    generated.add(both, both, out=both)  # an input given twice, and out= too
    torch.testing.assert_close(both, b + b, atol=0, rtol=0)
    square = s.random((5, 5), torch.float32, 2)
    with pytest.raises(ValueError, match="add: argument 'out' shares memory with input 'a' other than as that "
                                         "tensor itself"):
        generated.add(square, square, out=square.t())
    with pytest.raises(ValueError, match="rms_norm: argument 'out\\[0\\]' shares memory with input 'x'; pass"):
        generated.rms_norm(a, torch.ones(5, device=a.device), out=(a, torch.empty(6, device=a.device)))


def test_outputs_may_not_overlap_each_other_or_be_leaves_that_require_grad():
    import generated
    from tilegen import testing as s

    x, v = s.random((4, 5), torch.float32, 0), s.random((4, 5), torch.float32, 1, positive=True)
    y = torch.empty_like(x)
    with pytest.raises(ValueError, match=r"rms_scale_exp: argument 'out\[1\]' shares memory with 'out\[0\]'"):
        generated.rms_scale_exp(x, v, out=(y, y))
    leaf = torch.empty_like(x, requires_grad=True)
    with pytest.raises(RuntimeError, match="add: argument 'out' is a leaf tensor that requires grad"):
        generated.add(x, v, out=leaf)
    # Not a leaf: written in place, it would keep the history of the values it held before.
    for result in (leaf * 1, torch.cat([leaf, leaf])[2:6]):  # a result, and a view of one
        with pytest.raises(RuntimeError, match="add: out= does not support automatic differentiation, but argument 'out' requires grad"):
            generated.add(x, v, out=result)
        with pytest.raises(RuntimeError, match=r"rms_scale_exp: .* argument 'out\[1\]' requires grad"):
            generated.rms_scale_exp(x, v, out=(y, result))
    with torch.no_grad():  # (as PyTorch: in place under no_grad, a later backward through it raises)
        generated.add(x, v, out=leaf * 1)
    with pytest.raises(TypeError, match="add: argument 'a' is a sparse_coo tensor"):
        generated.add(x.to_sparse(), v)
    nested = torch.nested.nested_tensor([x[0], x[1, :3]])
    with pytest.raises(TypeError, match="add: argument 'a' is a .* tensor; only dense"):
        generated.add(nested, v)


def _offsets(t):
    """Every element's offset in its storage, by brute force."""
    import itertools
    return [t.storage_offset() + sum(i * s for i, s in zip(index, t.stride()))
            for index in itertools.product(*(range(n) for n in t.shape))]


def test_an_out_whose_elements_share_memory_is_refused_and_no_view_of_a_dense_tensor_is():
    """Written through, a layout that folds onto itself leaves whichever program wrote last.
    Refused wherever two elements are one (checked by brute force over random layouts), while the
    views a user makes of a dense tensor (transposes, slices, steps, channels-last) are written."""
    import random
    from tilegen.runtime.checks import has_internal_overlap

    generator = random.Random(0)
    for _ in range(400):
        rank = generator.randint(1, 3)
        shape = [generator.randint(1, 4) for _ in range(rank)]
        strides = [generator.randint(0, 6) for _ in range(rank)]
        t = torch.empty(200).as_strided(shape, strides)
        offsets = _offsets(t)
        if len(set(offsets)) < len(offsets):
            assert has_internal_overlap(t), (shape, strides)
    base = torch.empty(4, 6, 8, 10)
    views = [base, base.transpose(1, 3), base[:, 1:5, ::2], base[..., ::3].permute(3, 0, 2, 1),
             base.contiguous(memory_format=torch.channels_last), base[1, :, 2], base[::2, 3:]]
    for view in views:
        assert len(set(_offsets(view))) == view.numel() and not has_internal_overlap(view)
    assert not has_internal_overlap(torch.empty(5, 0).expand(3, 5, 0))  # no elements, none shared
    import generated
    from tilegen.testing import DEVICE

    x = torch.randn(8, 16, device=DEVICE)
    folded = torch.zeros(23, device=DEVICE).as_strided((8, 16), (1, 1))
    for call in (lambda: generated.add(x, x, out=folded), lambda: generated.softmax(x, out=folded),
                 lambda: generated.add(x, x, out=torch.zeros(16, device=DEVICE).expand(8, 16))):
        with pytest.raises(ValueError, match=r"argument 'out' has elements that share memory"):
            call()


def test_matmul_relu_maps_nan_to_zero_as_its_spec_says_and_its_benchmark_agrees():
    """The example spec writes where(acc > 0, acc, 0), which maps NaN to 0 (relu() would keep it,
    docs/spec.md); the kernel, the oracle and the benchmark's eager counterpart all agree."""
    if not rt.INTERPRET and not torch.cuda.is_available():
        pytest.skip("needs the interpreter or a GPU")
    import generated
    from generated.bench import bench_matmul_relu as bench
    from tilegen import testing as s

    a, b = s.random((64, 32), torch.float32, 0), s.random((32, 48), torch.float32, 1)
    a[3, 5] = float("nan")
    got = generated.matmul_relu(a, b)
    assert not got.isnan().any() and (got[3] == 0).all()
    torch.testing.assert_close(got, bench.run_torch([a, b]), atol=1e-4, rtol=1e-4)
    assert torch.relu(a @ b)[3].isnan().all()  # what relu() would have kept


def test_float_scalars_past_the_maths_dtype_are_refused_by_name_and_float64_math_takes_them_whole():
    # The math takes a float scalar in its own dtype: float32 for float16/bfloat16/float32 tensors
    # and a matmul's accumulator (1e300 would be inf there), float64 for float64 tensors (exact).
    import generated
    from tilegen import testing as s

    a = s.random((16,), torch.float32, 0)
    for _ in range(3):  # repeat calls: the compiled call path serves learned signatures (on a GPU)
        torch.testing.assert_close(generated.scaled_silu_mul(a, a, alpha=2.0), 2.0 * torch.nn.functional.silu(a) * a)
        with pytest.raises(ValueError, match="scaled_silu_mul: argument 'alpha' = 1e\\+300 does not fit in float32, "
                                             "the dtype its math computes in \\(float32 for float16"):
            generated.scaled_silu_mul(a, a, alpha=1e300)
        with pytest.raises(ValueError, match="masked_scale: argument 'scale' = -1e\\+39 does not fit in float32"):
            generated.masked_scale(a, a > 0, scale=-1e39)
    x, keep = s.random((16,), torch.float64, 1), s.random((16,), torch.bool, 2)
    for scale in (2.0, 1e300, -1e39, float("inf")):
        for _ in range(2):
            torch.testing.assert_close(generated.masked_scale(x, keep, scale=scale),
                                       torch.where(keep, x * scale, 0.0), rtol=0, atol=0)
    with pytest.raises(ValueError, match="masked_scale: argument 'scale' = 1.000e\\+400 does not fit in float64"):
        generated.masked_scale(x, keep, scale=10**400)
    if rt.INTERPRET:
        return  # (matmuls of float32 below: the interpreter takes a while)
    m = s.random((256, 256), torch.float16, 3)  # (its spec takes float16 and bfloat16)
    with pytest.raises(ValueError, match="matmul_residual_scaled: argument 'beta' = 1e\\+100 does not fit in "
                                         "float32, the dtype its math computes in \\(a matmul's accumulator"):
        generated.matmul_residual_scaled(m, m, m, beta=1e100)


def test_a_tensor_of_more_dims_than_its_spec_shape_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"^op: argument 'bias' must have at most 1 dim \(the spec's shape for it, "
                                         r"which broadcasts\), got shape \(3, 1, 8\)$"):
        rt.checks.check_tensor("op", "bias", torch.zeros(3, 1, 8), (torch.float32,), max_ndim=1)
    with pytest.raises(ValueError, match=r"at most 2 dims \("):
        rt.checks.check_tensor("op", "r", torch.zeros(3, 1, 8), (torch.float32,), max_ndim=2)


def test_a_scalar_past_any_kernel_range_is_quoted_short():
    with pytest.raises(ValueError, match=r"^op: argument 'k' = -1\.180e\+21 does not fit in 64 bits$"):
        rt.checks.check_scalar("op", "k", -(1180 * 10**18), "int")
    with pytest.raises(ValueError, match=r"^op: argument 'x' = 1\.000e\+400 does not fit in float64, the dtype its "
                                         r"math computes in \(why\)$"):
        rt.checks.check_float_range("op", [("k", "int"), ("x", "float")], [10**400, 10**400], True, "why")
    rt.checks.check_float_range("op", [("x", "float")], [-float("inf")], False, "why")  # an infinity is taken
    with pytest.raises(ValueError, match=r"^op: argument 'x' = 3\.5e\+38 does not fit in float32"):
        rt.checks.check_float_range("op", [("x", "float")], [3.5e38], False, "why")
    with pytest.raises(ValueError, match=r"= 9223372036854775808 does not fit in 64 bits"):  # (20 digits: whole)
        rt.checks.check_scalar("op", "k", 2**63, "int")


def test_an_int_scalar_past_the_int_tensors_dtype_is_refused_by_name():
    # PyTorch casts a Python int to the int tensor's dtype it meets: past int32's range it wraps
    # (int32 + 2**40 adds 0, int32 > 2**40 is True) or refuses (clamp, where), while the kernel
    # computed it in 64 bits. One answer, then: refused, naming the op, argument, dtype and range.
    import generated
    from tilegen import testing as s

    a = torch.arange(-8, 8, dtype=torch.int32, device=s.DEVICE)
    b = torch.ones(16, dtype=torch.int32, device=s.DEVICE)
    for _ in range(3):  # repeat calls: the compiled call path serves the learned signature (on a GPU)
        y, clipped = generated.clamp_add(a, b, lo=-3, hi=2**31 - 1)
    torch.testing.assert_close(y, torch.clamp(a + b, -3, 2**31 - 1))
    for lo, hi, name in [(-3, 2**31, "hi"), (-(2**31) - 1, 5, "lo"), (-3, 2**40, "hi")]:
        with pytest.raises(ValueError, match=rf"clamp_add: argument '{name}' = -?{abs(lo if name == 'lo' else hi)} "
                                             r"does not fit in int32, the dtype of 'a' and 'b' it is computed with "
                                             r"\(\[-2147483648, 2147483647\]\)"):
            generated.clamp_add(a, b, lo=lo, hi=hi)
    # int64 tensors hold it: computed as PyTorch does.
    y, clipped = generated.clamp_add(a.long(), b.long(), lo=-(2**40), hi=2**40)
    torch.testing.assert_close(y, a.long() + b.long())
    assert not clipped.any()


# ---- autograd: rt.Gradients, on toy ops registered the way generated ops are -----------------

def _toy_ops():
    """tilegen_test::scale_add(x, y, alpha) -> (alpha * x * y, x + y), differentiated by
    tilegen_test::scale_add_backward, registered with rt.register and rt.Gradients; and a
    variant that also returns a kept value (x * y), its backward reading it instead; and one whose
    backward's math is also given in PyTorch's ops (differentiable: its gradients differentiate
    again)."""
    if hasattr(torch.ops.tilegen_test, "scale_add"):
        ops = torch.ops.tilegen_test
        return ops.scale_add.default, ops.scale_add_keeping.default, ops.scale_add_twice.default

    @rt.register("tilegen_test::scale_add_backward", traceable=False)
    def backward(x: torch.Tensor, y: torch.Tensor, kept: torch.Tensor | None, g: torch.Tensor, h: torch.Tensor,
                 alpha: float) -> tuple[torch.Tensor, torch.Tensor]:
        # d/dx = alpha * y * g + h; d/dy = alpha * x * g + h; `kept` stands for a recomputable value.
        assert kept is None or torch.equal(kept, x * y)
        return alpha * y * g + h, alpha * x * g + h

    gradients = rt.Gradients(backward, tensors=2, saved=(0, 1), sources=(("result", 0), ("result", 1)),
                             outputs=2, saved_outputs=(None,))

    @rt.register("tilegen_test::scale_add", gradients, traceable=False)
    def scale_add(x: torch.Tensor, y: torch.Tensor, alpha: float) -> tuple[torch.Tensor, torch.Tensor]:
        return alpha * x * y, x + y

    keeping = rt.Gradients(backward, tensors=2, saved=(0, 1), sources=(("result", 0), ("result", 1)),
                           outputs=2, saved_outputs=(2,))

    @rt.register("tilegen_test::scale_add_keeping", keeping, traceable=False)
    def scale_add_keeping(x: torch.Tensor, y: torch.Tensor, alpha: float) -> tuple[torch.Tensor, torch.Tensor,
                                                                                     torch.Tensor]:
        return alpha * x * y, x + y, x * y

    def in_torch(x, y, kept, g, h, alpha):  # the backward's math in PyTorch's ops (differentiable)
        return alpha * y * g + h, alpha * x * g + h

    twice = rt.Gradients(backward, tensors=2, saved=(0, 1), sources=(("result", 0), ("result", 1)),
                         outputs=2, saved_outputs=(None,), differentiable=in_torch)

    @rt.register("tilegen_test::scale_add_twice", twice, traceable=False)
    def scale_add_twice(x: torch.Tensor, y: torch.Tensor, alpha: float) -> tuple[torch.Tensor, torch.Tensor]:
        return alpha * x * y, x + y

    return scale_add, scale_add_keeping, scale_add_twice


@pytest.mark.parametrize("variant", ["recomputing", "keeping"])
def test_gradients_route_saved_inputs_kept_outputs_and_scalars(variant):
    op = _toy_ops()[variant == "keeping"]
    x = torch.randn(5, dtype=torch.float64, requires_grad=True)
    y = torch.randn(5, dtype=torch.float64, requires_grad=True)
    first, second = op(x, y, 1.5)[:2]
    assert torch.autograd.gradcheck(lambda a, b: op(a, b, 1.5)[:2], (x, y))
    # An output no loss reads gets no gradient: it counts as zeros.
    dx, dy = torch.autograd.grad(first.sum(), (x, y))
    torch.testing.assert_close(dx, 1.5 * y.detach())
    torch.testing.assert_close(dy, 1.5 * x.detach())
    if variant == "keeping":  # the kept value carries no gradient
        assert not op(x, y, 1.5)[2].requires_grad


def test_gradients_are_made_only_for_inputs_that_need_them():
    op = _toy_ops()[0]
    x = torch.randn(3, requires_grad=True)
    y = torch.randn(3)
    first, _ = op(x, y, 2.0)
    (dx,) = torch.autograd.grad(first.sum(), (x,))
    torch.testing.assert_close(dx, 2.0 * y)


def test_out_is_refused_where_autograd_would_lose_the_graph():
    x = torch.randn(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="add: out= does not support automatic differentiation, but argument 'a'"):
        rt.refuse_out_with_grad("add", torch.empty(3), a=x, b=x.detach())
    rt.refuse_out_with_grad("add", None, a=x)  # no out=: nothing to refuse
    with torch.no_grad():
        rt.refuse_out_with_grad("add", torch.empty(3), a=x)
    assert rt.wants_grad((x,)) and not rt.wants_grad((x.detach(), 1.0))


def test_a_second_derivative_comes_from_the_differentiable_math_or_raises():
    x = torch.randn(4, dtype=torch.float64, requires_grad=True)
    y = torch.randn(4, dtype=torch.float64, requires_grad=True)
    plain, _, twice = _toy_ops()
    # Without math autograd can differentiate (a kernel's gradients alone), gradients asked for
    # with create_graph=True would carry no history and a gradient penalty built on them leave the
    # op out: the eager path (a torch.autograd.Function) and the registered op's autograd raise.
    for route in (lambda: rt.call(plain, x, y, 2.0), lambda: plain(x, y, 2.0)):
        out = route()
        with pytest.raises(RuntimeError, match=r"scale_add: a second derivative is not derived for this op \(create_graph"):
            torch.autograd.grad(out[0].sum(), (x,), create_graph=True)
        (dx,) = torch.autograd.grad(out[0].sum(), (x,))  # (the graph is still there)
        assert not dx.requires_grad
    # With it, on both routes: d/dy of sum(dx * v) = alpha * v (dx = alpha * y * g + h).
    v = torch.linspace(-1.0, 2.0, 4, dtype=torch.float64)
    for route in (lambda: rt.call(twice, x, y, 2.0), lambda: twice(x, y, 2.0)):
        first, second = route()
        (dx,) = torch.autograd.grad(first.sum() + second.sum(), (x,), create_graph=True)
        (dy,) = torch.autograd.grad((dx * v).sum(), (y,))
        torch.testing.assert_close(dy, 2.0 * v)


def test_broadcast_shape_follows_pytorch_and_names_what_does_not_broadcast():
    a, row, col = torch.empty(8, 16), torch.empty(16), torch.empty(8, 1)
    assert rt.broadcast_shape("add", [("a", a), ("b", row)]) == (8, 16)
    assert rt.broadcast_shape("add", [("a", row), ("b", col)]) == (8, 16)
    assert rt.broadcast_shape("add", [("a", a), ("b", a)]) is None  # nothing to expand
    with pytest.raises(ValueError) as info:
        rt.broadcast_shape("fma", [("a", a), ("b", row), ("c", torch.empty(3))])
    assert str(info.value) == ("fma: argument 'c' has shape (3,), which does not broadcast with (8, 16) (the shapes "
                               "of 'a', 'b', broadcast together; shapes broadcast as in PyTorch)")


@pytest.mark.parametrize("shape, block", [((5, 256), 64), ((3, 4, 128), 64), ((2, 3, 5, 80), 64), ((5, 200), 64),
                                          ((7, 96), 64), ((4, 64), 256), ((3, 5, 48), 64)],
                         ids=["blocks_tile_a_line", "lines_of_three_axes", "lines_of_four_axes",
                              "a_line_ends_in_a_part_block", "lines_shorter_than_two_blocks", "block_longer_than_a_line",
                              "blocks_across_lines_of_three_axes"])
def test_the_strided_kernel_indexes_every_block_right_along_lines_of_the_last_axis_or_across_them(shape, block):
    # A row [N] broadcast over x, and x laid out transposed (its last axis then runs across the
    # lines of the others), with blocks that tile a line of the last axis, end a line part full,
    # or are longer than a line (then each element's indices are divided out of its flat offset,
    # runtime.strided). Against eager math.
    from generated import scaled_silu_mul
    from generated.scaled_silu_mul import _OP

    assert _OP._by_lines(shape[-1], block) == (shape[-1] >= block)

    device = "cuda" if torch.cuda.is_available() else "cpu"
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(shape, generator=gen, dtype=torch.float32).to(device)
    row = torch.randn(shape[-1], generator=gen, dtype=torch.float32).to(device)
    axes = tuple(reversed(range(len(shape))))
    transposed = torch.randn(tuple(reversed(shape)), generator=gen, dtype=torch.float32).to(device).permute(axes)
    with _OP.configs.forcing({"BLOCK": block, "num_warps": 4}):
        for a, b in ((x, row), (x, transposed), (transposed, row)):
            torch.testing.assert_close(scaled_silu_mul(a, b), torch.nn.functional.silu(a.double()).mul(b.double()).float())


def test_a_broadcast_call_launches_a_block_long_enough_for_the_bytes_its_threads_stream(monkeypatch):
    from tilegen.runtime.configs import MIN_STREAMED_BYTES, block_for_streams

    offered = {1024, 2048, 4096}
    # 128 threads: half-precision x and output stream 4 bytes an element, float32 8.
    assert block_for_streams(1024, offered, 128, 4) == 2048  # 32 bytes a thread: doubled to 64
    assert block_for_streams(1024, offered, 128, 8) == 1024  # 64 bytes: enough
    assert block_for_streams(1024, offered, 128, 2) == 4096  # one half-precision stream: 16 -> 64
    assert block_for_streams(1024, offered, 256, 2) == 4096  # 8192 is not the op's to launch
    assert block_for_streams(1024, offered, 128, 6) == 1024 and 1024 // 128 * 6 == MIN_STREAMED_BYTES

    from generated import scaled_silu_mul
    from generated.scaled_silu_mul import _OP

    launched = []
    original = _OP._launch
    monkeypatch.setattr(_OP, "_launch", lambda *args: launched.append(args[4]["BLOCK"]) or original(*args))  # (config)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    gen = torch.Generator().manual_seed(2)
    for dtype, row_block in ((torch.float16, 2048), (torch.float32, 1024)):
        x = torch.randn(3, 4096, generator=gen).to(device, dtype)
        row, full = torch.randn(4096, generator=gen).to(device, dtype), torch.randn(3, 4096, generator=gen).to(device, dtype)
        transposed = torch.randn(4096, 3, generator=gen).to(device, dtype).t()
        launched.clear()
        # The forced config is what a table would hold: each call launches it as its layout says.
        with _OP.configs.forcing({"BLOCK": 1024, "num_warps": 4}):
            for b in (row, full, transposed):
                want = torch.nn.functional.silu(x.double()).mul(b.double()).to(dtype)
                torch.testing.assert_close(scaled_silu_mul(x, b), want)
        # Beside a row [N] only x and the output stream; the other calls stream all three.
        assert launched == [row_block, 1024, 1024], dtype


def test_declared_axes_are_checked_by_rank_and_size_naming_both_arguments():
    x, bias = torch.empty(4, 8, 16), torch.empty(16)
    rt.check_axes("bias_gelu", [("x", x, ("...", "N")), ("bias", bias, ("N",))])
    rt.check_axes("bias_gelu", [("x", torch.empty(16), ("...", "N")), ("bias", bias, ("N",))])
    rt.check_axes("mix", [("x", torch.empty(3, 5), ("M", "N")), ("y", torch.empty(5), ("N",))])
    with pytest.raises(ValueError) as info:
        rt.check_axes("bias_gelu", [("x", x, ("...", "N")), ("bias", torch.empty(15), ("N",))])
    assert str(info.value) == "bias_gelu: argument 'bias' has size 15 on axis N, but 'x' has 16 (the spec names both N)"
    with pytest.raises(ValueError, match=r"argument 'bias' has shape \(2, 16\), but the spec declares \[N\] \(1-D\)"):
        rt.check_axes("bias_gelu", [("x", x, ("...", "N")), ("bias", torch.empty(2, 16), ("N",))])
    with pytest.raises(ValueError, match=r"argument 'x' has shape \(\), but the spec declares \[\.\.\., N\] "
                                         r"\(at least 1-D\)"):
        rt.check_axes("bias_gelu", [("x", torch.empty(()), ("...", "N")), ("bias", bias, ("N",))])


@pytest.mark.parametrize("requires_grad", [False, True])
@pytest.mark.parametrize("op", ["scaled_silu_mul", "matmul_relu", "softmax"])
def test_dual_tensors_get_the_tangents_of_the_ops_math(op, requires_grad):
    # torch.autograd.forward_ad: a result carries the tangent the JVP of the op's math gives (the
    # transpose of its derived backward), whatever its kind, while reverse mode records the call
    # too where the input requires grad; plain tensors inside a dual level are served as ever.
    import torch.autograd.forward_ad as fwAD

    import generated

    fn = getattr(generated, op)
    math = {"scaled_silu_mul": lambda a, b: a * torch.sigmoid(a) * b, "matmul_relu": lambda a, b: torch.relu(a @ b),
            "softmax": lambda x: torch.softmax(x, -1)}[op]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    shapes = {"scaled_silu_mul": [(5, 7), (5, 7)], "matmul_relu": [(16, 8), (8, 16)], "softmax": [(5, 7)]}[op]
    args = [torch.randn(*s, device=device) for s in shapes]
    tangent = torch.randn(shapes[0], device=device)
    want, want_tangent = torch.func.jvp(lambda first: math(first, *args[1:]), (args[0],), (tangent,))
    close = functools.partial(torch.testing.assert_close, atol=1e-3, rtol=1e-3)
    primal = args[0].clone().requires_grad_(requires_grad)
    with fwAD.dual_level():
        got, got_tangent = fwAD.unpack_dual(fn(fwAD.make_dual(primal, tangent), *args[1:]))
        close(got, want)
        close(got_tangent, want_tangent)
        assert got.requires_grad == requires_grad
        assert fn(*args) is not None
    if requires_grad:
        seed = torch.randn_like(got)
        first = args[0].clone().requires_grad_()
        close(torch.autograd.grad(got, primal, seed)[0], torch.autograd.grad(math(first, *args[1:]), first, seed)[0])


@pytest.mark.parametrize("op", ["scaled_silu_mul", "matmul_relu", "softmax"])
def test_the_registered_op_is_refused_inside_a_forward_mode_level(op):
    # PyTorch passes no tangent through a custom op: torch.func.jvp of torch.ops.generated.<op>
    # gave zeros, and a dual input's tangent was dropped, with no error. The registered op refuses
    # any call inside a forward-mode level (its implementation cannot tell a dropped tangent from
    # a plain input); outside one it serves as ever, and so does the op's Python function inside.
    import torch.autograd.forward_ad as fwAD

    import generated

    registered = getattr(torch.ops.generated, op)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    shapes = {"scaled_silu_mul": [(5, 7), (5, 7)], "matmul_relu": [(16, 8), (8, 16)], "softmax": [(5, 7)]}[op]
    args = [torch.randn(*s, device=device) for s in shapes]
    message = rf"torch.ops.generated.{op}: called inside a forward-mode AD level .* silently missing"
    with pytest.raises(TypeError, match=message):
        torch.func.jvp(lambda first: registered(first, *args[1:]), (args[0],), (torch.randn_like(args[0]),))
    with fwAD.dual_level():
        with pytest.raises(TypeError, match=message):
            registered(fwAD.make_dual(args[0], torch.randn_like(args[0])), *args[1:])
        assert getattr(generated, op)(*args) is not None  # the Python function: plain tensors served
    torch.testing.assert_close(registered(*args), getattr(generated, op)(*args))


@pytest.mark.parametrize("op", ["scaled_silu_mul", "rms_norm", "matmul_relu"])
def test_torch_jit_trace_records_the_registered_op(op):
    # torch.jit.trace records the torch calls it sees; a launch it cannot see (Triton's, or the
    # compiled call path's) left a graph that returned the output's uninitialized memory (its
    # sanity check caught it; with check_trace=False, or through torch.onnx.export's tracer,
    # nothing did). It records the registered op instead, and its replays compute.
    import generated

    device = "cuda" if torch.cuda.is_available() else "cpu"
    shapes = {"scaled_silu_mul": [(8, 16), (8, 16)], "rms_norm": [(8, 16), (16,)], "matmul_relu": [(16, 8), (8, 16)]}[op]
    fn = getattr(generated, op)

    def first(*args):
        result = fn(*args)
        return result[0] if isinstance(result, tuple) else result

    args = [torch.randn(*s, device=device) for s in shapes]
    first(*args), first(*args)  # (a GPU's compiled call path has learned the call)
    traced = torch.jit.trace(first, args, check_trace=False)
    assert f"generated::{op}" in [node.kind() for node in traced.graph.nodes()]
    fresh = [torch.randn(*s, device=device) for s in shapes]
    torch.testing.assert_close(traced(*fresh), first(*fresh))


def test_torch_fx_symbolic_trace_records_the_registered_ops():
    # symbolic_trace passes Proxies, not tensors: each op records its registered op's call (it
    # raised "must be a torch.Tensor, got Proxy"), and the traced module computes the same.
    import generated

    class Block(torch.nn.Module):
        def forward(self, a, b, w):
            h = generated.rms_norm(generated.scaled_silu_mul(a, b), w)[0]
            return h @ generated.matmul_relu(a.t(), b)

    module = torch.fx.symbolic_trace(Block())
    targets = [node.target for node in module.graph.nodes if node.op == "call_function"]
    assert {torch.ops.generated.scaled_silu_mul.default, torch.ops.generated.rms_norm.default,
            torch.ops.generated.matmul_relu.default} <= set(targets)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    a, b, w = torch.randn(8, 16, device=device), torch.randn(8, 16, device=device), torch.randn(16, device=device)
    torch.testing.assert_close(module(a, b, w), Block()(a, b, w))


def test_a_grid_wide_wait_only_where_every_program_can_be_resident(monkeypatch):
    # A reduction's column sums wait for every program only on a GPU that this process does not
    # share under an MPS cap on its multiprocessors (fewer programs than the device reports could
    # run at once, and the wait would never end), and not when TILEGEN_GRID_WAIT=0 says not to.
    from tilegen.runtime import sync

    gpu, cpu = torch.device("cuda", 0), torch.device("cpu")
    monkeypatch.setattr(sync, "INTERPRET", False)
    monkeypatch.delenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", raising=False)
    monkeypatch.delenv("TILEGEN_GRID_WAIT", raising=False)
    assert sync.grid_wait_allowed(gpu) and not sync.grid_wait_allowed(cpu)
    for share, allowed in [("100", True), ("50", False), ("", False), ("most", False)]:
        monkeypatch.setenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", share)
        assert sync.grid_wait_allowed(gpu) is allowed, share
    monkeypatch.delenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")
    monkeypatch.setenv("TILEGEN_GRID_WAIT", "0")
    assert not sync.grid_wait_allowed(gpu)
    monkeypatch.setattr(sync, "INTERPRET", True)
    monkeypatch.delenv("TILEGEN_GRID_WAIT")
    assert not sync.grid_wait_allowed(gpu)


# The GPUs whose facts (multiprocessors, shared memory a block) the committed tables were measured on.
_TABLE_GPU_FACTS = {"NVIDIA H200": (132, 232448, "NVIDIA H200")}


@pytest.mark.parametrize("table", sorted(p.stem for p in (REPO / "tilegen" / "tables" / "ops").glob("*.json")))
def test_every_entry_of_an_ops_own_table_is_launched_at_its_key(table):
    # An op's own entries (tune --scope op, tune --backward) were measured on that op: each must
    # be a config its chooser can launch at its key, or the op would quietly run another (a
    # backward's several looped rows a step were passed over at launch until the chooser took
    # every explored tile).
    import importlib

    from tilegen.naming import backward_op_name
    from tilegen.tables import load_table, parse_key

    op = table[:-len("_backward")] if table.endswith("_backward") else table
    module = importlib.import_module(f"generated.{op}")
    runtime_op = module._BACKWARD if table == backward_op_name(op) else module._OP
    for section, entries in load_table(table, scope="op").items():
        # A traced section's twins are what traced launches take where the entry loads through descriptors.
        gpu = next(g for g in _TABLE_GPU_FACTS if section in (g, rt.configs.traced_section(g)))
        traced = section != gpu
        for key_text in entries:
            key = parse_key(key_text)
            entry = runtime_op.configs.table[section][key]
            if traced and not runtime_op.configs.table[gpu][key].get("TMA"):
                continue  # (a stale twin: the entry itself loads through pointers, and stands)
            assert runtime_op.configs._pick(key, _TABLE_GPU_FACTS[gpu], None, traced) == entry, (table, key_text, entry)


@pytest.mark.parametrize("table", ["kind/matmul"] + sorted(
    f"op/{p.stem}" for p in (REPO / "tilegen" / "tables" / "ops").glob("*.json")))
def test_every_entry_a_traced_launch_cannot_make_has_its_twin(table):
    # A traced launch (torch.compile, export) loads through pointers: without a twin, an entry
    # measured through descriptors gives way to the nearest other entry or the heuristic, a config
    # no one timed at that key (bmm's scores shape took 2.1x its eager time inside torch.compile
    # that way: bench/results/h200/traced_twins/). `tilegen tune` writes the twin with the entry;
    # entries tuned before it did get theirs from `tilegen tune --traced`.
    from tilegen.tables import load_table

    scope, name = table.split("/")
    sections = load_table(name, scope=scope)
    for gpu in _TABLE_GPU_FACTS:
        twins = sections.get(rt.configs.traced_section(gpu), {})
        missing = [key for key, config in sections.get(gpu, {}).items()
                   if rt.configs.through_descriptors(config) and key not in twins]
        assert not missing, f"{table}: {gpu} entries without a traced twin: {missing} (tilegen tune --traced)"


def test_a_product_with_a_column_major_operand_through_descriptors_launches_persistent(monkeypatch, launches):
    """The backward's products read A^T or B^T; through descriptors their tiled launch lost to the
    persistent one on the tables' tiles (bench/probes/transposed_schedules.txt), so such a
    product launches persistent whatever the config says, unless the spec fixes the schedule."""
    import importlib

    module = importlib.import_module("generated.matmul")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    op = module._OP
    config = dict(BM=32, BN=32, BK=16, SPLIT_K=1, num_warps=4, num_stages=2, TMA=1, PERSISTENT=0)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(64, 48, generator=g).to(device), torch.randn(80, 48, generator=g).to(device)
    rows, columns = y.t().contiguous(), y.t()
    with op.products.forcing(config):
        for operand, transposed in ((rows, False), (columns, True)):
            got = op.product(x, operand)
            torch.testing.assert_close(got, x @ operand, atol=1e-3, rtol=1e-3)
            assert launches[-1].constexprs["USE_TMA"] and launches[-1].constexprs["TRANS_B"] == transposed
            assert launches[-1].constexprs["PERSISTENT"] == transposed
        monkeypatch.setattr(op, "schedule", "tiled")  # a spec's schedule.launch: tiled stands
        op.product_path.forget()  # (a GPU's compiled call path learned the call above, persistent)
        op.product(x, columns)
        assert launches[-1].constexprs["TRANS_B"] and not launches[-1].constexprs["PERSISTENT"]


def test_flatten_reaches_the_kernel_only_with_a_persistent_launch(launches):
    """FLATTEN pipelines a persistent program's tile loop with its K loop; a tiled launch has no
    tile loop, so the flag is dropped there rather than passed on (one compiled variant fewer)."""
    import importlib

    op = importlib.import_module("generated.matmul")._OP
    device = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(96, 48, generator=g).to(device), torch.randn(48, 80, generator=g).to(device)
    base = dict(BM=32, BN=32, BK=16, SPLIT_K=1, num_warps=4, num_stages=2, TMA=0)
    for persistent in (0, 1):
        with op.products.forcing(dict(base, PERSISTENT=persistent, FLATTEN=1)):
            torch.testing.assert_close(op.product(x, y), x @ y, atol=1e-3, rtol=1e-3)
        assert launches[-1].constexprs["PERSISTENT"] == launches[-1].constexprs["FLATTEN"] == bool(persistent)


def test_outputs_store_through_descriptors_where_their_rows_allow(launches):
    """TMA_STORE stores the outputs through tensor descriptors, which drop what lies past M and N
    (here N = 80 in 32-column tiles), where every output's rows are 16-byte aligned; an output
    whose rows are not (81 floats) goes out through pointers, its operands still through
    descriptors."""
    import importlib

    op = importlib.import_module("generated.matmul")._OP
    device = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator().manual_seed(2)
    x = torch.randn(96, 48, generator=g).to(device)
    config = dict(BM=32, BN=32, BK=16, SPLIT_K=1, num_warps=4, num_stages=2, TMA=1, TMA_STORE=1)
    for cols, stored in ((80, True), (81, False)):
        y = torch.randn(48, 96, generator=g).to(device)[:, :cols]
        for persistent in (0, 1):
            with op.products.forcing(dict(config, PERSISTENT=persistent)):
                torch.testing.assert_close(op.product(x, y), x @ y, atol=1e-3, rtol=1e-3)
            assert launches[-1].constexprs["USE_TMA"] and launches[-1].constexprs["USE_TMA_STORE"] == stored
    assert rt.layout.tma_stores_fit([torch.empty(3, 8, 8, device=device)])
    assert not rt.layout.tma_stores_fit([torch.empty(1, 8, 8, device=device).expand(3, 8, 8)])  # stride 0
    assert not rt.layout.tma_stores_fit([torch.empty(8, 8, device=device).t()])  # column-major
    # Tuning asks the op about the outputs a call returned (batch axes flattened into one).
    fits = op.stores_through_descriptors
    assert fits(config, [torch.empty(6, 96, 80, device=device)]) and not fits(config, [torch.empty(96, 81, device=device)])
    assert not fits(dict(config, TMA_STORE=0), [torch.empty(96, 80, device=device)])


def test_a_kernel_variant_short_of_shared_memory_launches_a_lighter_form_of_its_config(monkeypatch):
    """A config chosen for an op's forward may not fit the shared memory of its training variant,
    which also stores the float32 accumulator (bmm_bias_silu's tuned 128x128x128 3-stage TMA
    config at 32x2048x2048x128 on the H200: 237592 bytes of 232448). Such a call launches the
    config's first lighter form that fits (fewer stages, then the outputs stored through
    pointers) and keeps to it; the forward keeps the config; a forced config is launched as is."""
    import importlib

    from triton.runtime.errors import OutOfResources

    module = importlib.import_module("generated.matmul_bias_gelu")
    op = module._OP
    real, tried = op.kernel.launch, []

    def launch(grid, args, varying, constexprs, num_warps, num_stages=None):
        tried.append((constexprs["SAVE_ACC"], num_stages, constexprs["USE_TMA_STORE"]))
        if constexprs["SAVE_ACC"] and (num_stages > 1 or constexprs["USE_TMA_STORE"]):
            raise OutOfResources(237592, 232448, "shared memory")
        return real(grid, args, varying, constexprs, num_warps, num_stages)

    monkeypatch.setattr(op.kernel, "launch", launch)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator().manual_seed(5)
    a, b, bias = (torch.randn(*shape, generator=g, dtype=torch.float64).to(device, torch.float32)
                  for shape in ((64, 48), (48, 80), (80,)))
    config = dict(BM=64, BN=64, BK=32, SPLIT_K=1, num_warps=4, num_stages=3, TMA=0, PERSISTENT=0, TMA_STORE=0)
    with monkeypatch.context() as patch:
        patch.setattr(op.configs, "_pick", lambda key, facts, launch, traced=False: dict(config))
        op.configs.reset()
        leaves = [t.clone().requires_grad_() for t in (a, b, bias)]
        want_leaves = [t.double().requires_grad_() for t in (a, b, bias)]
        want = torch.nn.functional.gelu(want_leaves[0] @ want_leaves[1] + want_leaves[2])
        # The first training call tries stages 3, 2, 1; a repeat launches the fitting form at
        # once (or the compiled call path serves it: no launch through Triton).
        got = module.matmul_bias_gelu(*leaves)
        assert tried == [(True, 3, False), (True, 2, False), (True, 1, False)]
        tried.clear()
        torch.testing.assert_close(module.matmul_bias_gelu(*leaves).double(), want.detach(), atol=1e-4, rtol=1e-4)
        assert tried in ([(True, 1, False)], [])
        torch.testing.assert_close(got.double(), want.detach(), atol=1e-4, rtol=1e-4)
        seed = torch.randn(want.shape, generator=g, dtype=torch.float64)
        got.backward(seed.to(device, torch.float32))
        for leaf, want_grad in zip(leaves, torch.autograd.grad(want, want_leaves, seed.to(device))):
            torch.testing.assert_close(leaf.grad.double(), want_grad, atol=1e-3, rtol=1e-3)
        tried.clear()
        torch.testing.assert_close(module.matmul_bias_gelu(a, b, bias).double(), want.detach(), atol=1e-4, rtol=1e-4)
        assert tried in ([(False, 3, False)], [])
        with op.configs.forcing(config), pytest.raises(OutOfResources):
            op.run([a, b, bias, torch.empty(64, 80, device=device)], (), 64, 80, 48,
                   saved=torch.empty(64, 80, device=device))
    op.configs.reset()


def test_lighter_forms_of_a_config_shed_stages_then_the_store_staging():
    config = dict(BM=128, BN=128, BK=128, num_warps=4, num_stages=3, TMA=1, TMA_STORE=1)
    forms = rt.configs.lighter_forms(config)
    assert [(f["num_stages"], f["TMA_STORE"]) for f in forms] == [(2, 1), (1, 1), (3, 0), (2, 0), (1, 0)]
    assert all(dict(f, num_stages=3, TMA_STORE=1) == config for f in forms)
    assert [f["num_stages"] for f in rt.configs.lighter_forms(dict(config, TMA_STORE=0))] == [2, 1]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="shared memory limits are a GPU's, and torch.compile of "
                    "Triton kernels needs one")
@pytest.mark.parametrize("compiled", [False, True])
def test_a_training_step_where_the_forwards_config_is_too_heavy_for_the_training_kernel(compiled, monkeypatch):
    # bmm_bias_silu at 32x2048x2048x128 fp16 on the H200: a table config of 128x128x128 tiles, 3
    # stages, TMA loads and stores (the table's there until a retune) fits the forward's kernel,
    # not the training variant's, which also stores the accumulator (237592 bytes of shared memory
    # of 232448). Eager and compiled steps alike must run and agree with PyTorch's autograd. The
    # table is pinned to that entry, and another GPU (an H100 has the same shared memory) borrows
    # it as the H200's, so that it makes the same choice.
    import importlib

    module = importlib.import_module("generated.bmm_bias_silu")
    chooser = rt.op_of("generated.bmm_bias_silu").configs
    heavy = dict(BM=128, BN=128, BK=128, SPLIT_K=1, num_warps=4, num_stages=3, TMA=1, PERSISTENT=1, FLATTEN=1,
                 TMA_STORE=1)
    monkeypatch.setenv("TILEGEN_TABLE_GPU", "NVIDIA H200")
    monkeypatch.setattr(chooser, "table", {"NVIDIA H200": {(2048, 2048, 128, 32, 2): heavy}})
    chooser.reset()
    try:
        g = torch.Generator(device="cuda").manual_seed(3)
        leaves = [(0.25 * torch.randn(*shape, generator=g, device="cuda")).half().requires_grad_()
                  for shape in ((32, 2048, 128), (32, 128, 2048), (2048,))]

        def step(a, b, bias):
            # Scaled so that every gradient is a normal float16: a mean's (about 1e-7 here) would be
            # subnormals, a sum's bias gradient (about 8e4) past float16's largest.
            return module.bmm_bias_silu(a, b, bias).float().square().sum() / 1024

        run = torch.compile(step, fullgraph=True) if compiled else step
        got = torch.autograd.grad(run(*leaves), leaves)
        references = [leaf.detach().float().requires_grad_() for leaf in leaves]
        z = references[0] @ references[1] + references[2]
        want = torch.autograd.grad((z * torch.sigmoid(z)).square().sum() / 1024, references)
        for name, have, expect in zip(("a", "b", "bias"), got, want):
            scale = expect.abs().max().item()
            torch.testing.assert_close(have.float(), expect, atol=2e-2 * scale, rtol=2e-2, msg=lambda m: f"{name}: {m}")
        if not compiled:  # (a traced launch loads through pointers, which fit as they are)
            lightened = rt.op_of("generated.bmm_bias_silu")._lighter.values()
            assert any(form != config for config, form in lightened), "the training kernel launched the table's config"
    finally:
        chooser.reset()  # the choices made from a borrowed table go with it


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch.compile of Triton kernels needs a GPU")
def test_a_compiled_call_launches_the_pointer_twin_of_a_descriptor_entry(monkeypatch):
    # Inside torch.compile a launch loads through pointers; an entry measured through descriptors
    # (bmm's at 32x2048x2048x128 on the H200: 98 us, 208 us as a pointer launch) gives way to its
    # twin. The eager call keeps the entry; both agree with torch.matmul.
    import importlib

    module = importlib.import_module("generated.bmm")
    chooser = rt.op_of("generated.bmm").configs
    g = torch.Generator(device="cuda").manual_seed(4)
    a, b = (torch.randn(*shape, generator=g, device="cuda").half() for shape in ((4, 256, 64), (4, 64, 256)))
    with chooser.recording() as chosen:
        module.bmm(a, b)
    key = chosen[-1][0]
    entry = dict(BM=128, BN=128, BK=64, SPLIT_K=1, num_warps=4, num_stages=3, TMA=1, PERSISTENT=1, TMA_STORE=1)
    twin = dict(BM=64, BN=128, BK=32, SPLIT_K=1, num_warps=4, num_stages=4, TMA=0, PERSISTENT=0, FLATTEN=0, TMA_STORE=0)
    monkeypatch.setenv("TILEGEN_TABLE_GPU", "NVIDIA H200")
    monkeypatch.setattr(chooser, "table", {"NVIDIA H200": {key: entry},
                                           rt.configs.traced_section("NVIDIA H200"): {key: twin}})
    chooser.reset()
    try:
        want = torch.matmul(a.float(), b.float())
        for run in (module.bmm, torch.compile(lambda x, y: module.bmm(x, y), fullgraph=True)):
            with chooser.recording() as chosen:
                got = run(a, b)
            torch.testing.assert_close(got.float(), want, atol=5e-2, rtol=1e-2)
            assert chosen and chosen[-1][1]["TMA"] == (run is module.bmm), chosen
        assert chosen[-1][1] == twin
    finally:
        chooser.reset()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch.compile of Triton kernels needs a GPU")
def test_a_compiled_matmul_without_split_k_runs_its_kernel_alone():
    # A traced launch without split-K passes empty tensors for the workspace it never reads: the
    # compiled graph runs no fill or memset for them, only the op's kernel, every call (zeroed
    # counters took a fill kernel in some runs of the whole matrix: bools_in_place/s1/tests.log).
    import generated

    g = torch.Generator(device="cuda").manual_seed(5)
    a, b = (torch.randn(*shape, generator=g, device="cuda").half() for shape in ((512, 256), (256, 384)))
    chooser = rt.op_of("generated.matmul_relu").configs
    run = torch.compile(lambda x, y: generated.matmul_relu(x, y), fullgraph=True)
    with chooser.recording() as chosen:
        want = run(a, b)
    assert chosen and chosen[-1][1].get("SPLIT_K", 1) == 1, chosen
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profile:
        got = run(a, b)
        torch.cuda.synchronize()
    kernels = [e.name for e in profile.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    assert len(kernels) == 1 and "matmul_relu" in kernels[0], kernels
    torch.testing.assert_close(got, want, atol=0, rtol=0)
    torch.testing.assert_close(got.float(), torch.relu(a.float() @ b.float()), atol=5e-2, rtol=1e-2)


def test_traced_sizes_are_read_without_guards():
    # A size traced with dynamic shapes (a SymInt): choices read its example value, and what a
    # launch is wrong without is taken only where it holds for every size; neither adds a guard
    # (one would make the graph serve that size alone).
    from torch._dynamo.source import ConstantSource
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    from tilegen.runtime import sizes
    from tilegen.runtime.layout import collapse, size_factor, stride_factor

    env = ShapeEnv()
    rows = env.create_symintnode(env.create_symbol(6, source=ConstantSource("rows")), hint=6)
    assert sizes.hint(rows) == 6 and sizes.hint(7) == 7
    assert sizes.known(rows * 64 % 16 == 0) and not sizes.known(rows % 2 == 0)
    assert not sizes.known(rows <= 1024) and sizes.known(rows >= 2)  # (sizes traced as dynamic are >= 2)
    assert sizes.smaller(3, 5) == 3 and sizes.hint(sizes.smaller(rows, 132)) == 6
    # (a stride that may pass 32 bits stays whole, as a concrete one past them does)
    assert stride_factor(rows * 64) == 1 and stride_factor(rows) == 1 and size_factor(rows) == 1
    # [rows, 33] contiguous, and a column of it: the rows merge where the strides say so for every size.
    assert collapse([rows, 33], [[33, 1], [33, 1]]) == ([rows * 33], [[1], [1]])
    assert collapse([rows, 33], [[33, 1], [1, 0]])[0] == [rows, 33]
    assert env.guards == []


def test_traced_sizes_are_decided_by_guards_in_compiles_trace_only(monkeypatch):
    # Inside torch.compile's TracingContext (AOT autograd's trace, where Inductor runs a triton_op's
    # launches and torch 2.11's is_compiling() is False) a choice is taken for the size traced
    # with a guard; under torch.export, never.
    from torch._dynamo.source import ConstantSource
    from torch._guards import TracingContext, tracing
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    from tilegen.runtime import sizes

    env = ShapeEnv()
    rows = env.create_symintnode(env.create_symbol(6, source=ConstantSource("rows")), hint=6)
    assert not sizes.guarding()
    with tracing(TracingContext(FakeTensorMode(shape_env=env))):
        assert sizes.guarding()
        monkeypatch.setattr(torch.compiler, "_is_exporting_flag", True)
        assert not sizes.guarding() and not sizes.known(rows <= 1024) and env.guards == []
        monkeypatch.setattr(torch.compiler, "_is_exporting_flag", False)
        assert sizes.known(rows <= 1024) and not sizes.known(rows > 1024)
        # A matmul's traced size: a multiple of 16 passed as a quotient and a factor of 16 under
        # torch.compile (a guard), as Inductor's launch cannot mark it for Triton; whole under export.
        from tilegen.runtime.layout import size_factor
        k = env.create_symintnode(env.create_symbol(4096, source=ConstantSource("k")), hint=4096)
        assert size_factor(k) == 16 and size_factor(rows) == 1
        monkeypatch.setattr(torch.compiler, "_is_exporting_flag", True)
        assert size_factor(k) == 1
    assert f"{rows.node.expr} <= 1024" in [str(guard.expr) for guard in env.guards]


def test_a_one_gradient_backward_is_registered_returning_a_list():
    # A custom op returning a one-tensor tuple, in a backward AOT autograd traces with dynamic
    # shapes, makes every size constant: such implementations are registered returning Tensor[].
    import generated

    schema = torch.ops.generated.bias_gelu_backward.default._schema
    assert str(schema.returns[0].type) == "List[Tensor]", schema
    assert "Tensor[]" not in str(torch.ops.generated.add_rms_norm_backward.default._schema.returns)
    assert generated.bias_gelu  # imported, so registered


def test_an_exported_dim_beside_a_broadcast_input_stays_free():
    # Shapes of two ranks (a [rows, 16] input, a [16] bias; a matmul's [N] bias beside its
    # [M, N] output) compare unequal without comparing sizes: a tuple's == compares sizes first,
    # and `rows == 16` added a guard that turned the named Dim into an export error. (The same
    # comparison in the autograd formula's sum back to a bias' shape is run by the generated
    # dynamic-shape compile tests, with a backward, at coinciding sizes.)
    import generated

    device = "cuda" if torch.cuda.is_available() else "cpu"

    def random(*shape, seed=0):
        return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(device)

    class Model(torch.nn.Module):
        def forward(self, x, w, bias):
            return generated.bias_gelu(x, bias) + generated.matmul_bias_gelu(x, w, bias)

    w, bias = random(16, 16, seed=1), random(16, seed=2)
    rows = torch.export.Dim("rows", min=2, max=1024)
    exported = torch.export.export(Model(), (random(4, 16), w, bias), dynamic_shapes=({0: rows}, None, None))
    for count in (16, 33):
        x = random(count, 16, seed=count)
        torch.testing.assert_close(exported.module()(x, w, bias), Model()(x, w, bias))


def test_compiled_graphs_guard_on_the_tile_and_exported_ones_serve_every_size():
    # A reduction's rows held in one tile: torch.compile(dynamic=True) keeps the whole-row tile with
    # a guard on the row length (a longer row recompiles), where torch.export's graph, which must
    # serve every size its dims allow, loops over rows of any length.
    import torch._dynamo

    import generated

    device = "cuda" if torch.cuda.is_available() else "cpu"
    backend = "inductor" if device == "cuda" else "aot_eager"  # (Inductor compiles Triton on a GPU only)

    def model(x):
        return generated.softmax(x) * 2

    def rows(count, length, seed):
        return torch.randn(count, length, generator=torch.Generator().manual_seed(seed)).to(device)

    torch._dynamo.reset()
    counters = torch._dynamo.utils.counters
    counters.clear()
    compiled = torch.compile(model, dynamic=True, fullgraph=True, backend=backend)
    for count, length in [(6, 50), (10, 60), (10, 5000)]:
        x = rows(count, length, length)
        torch.testing.assert_close(compiled(x), model(x))
    assert counters["stats"]["unique_graphs"] == 2, dict(counters["stats"])  # 5000 did not fit the tile

    class Model(torch.nn.Module):
        def forward(self, x):
            return model(x)

    auto = torch.export.Dim.AUTO
    exported = torch.export.export(Model(), (rows(6, 50, 1),), dynamic_shapes=({0: auto, 1: auto},))
    for count, length in [(10, 60), (3, 5000)]:
        x = rows(count, length, 2)
        torch.testing.assert_close(exported.module()(x), model(x))


def test_an_input_no_stored_output_reads_leaves_the_contiguous_kernel_to_the_others(monkeypatch):
    # reads=: per input, the STORES bits of the outputs that read it. A shape-only stand-in
    # (strides 0) for an input read by no output asked for is never addressed: the others, all
    # contiguous, take the flat kernel; asked for an output that reads it, the call is strided.
    op = rt.ElementwiseOp("gate_backward", _StubKernel(), _StubKernel(), rt.ConfigChooser(
        "fixed", rt.ElementwiseSpace("BLOCK", [1024], [4], exact=False)), selective=True, reads=(None, 0b01, None))
    flat = []
    monkeypatch.setattr(rt.launch.Kernel, "launch", lambda self, grid, args, varying, constexprs, *rest:
                        flat.append((self is op.kernel, constexprs["STORES"])))
    a, g = torch.empty(2048), torch.empty(2048)
    stand_in = torch.empty(()).expand(2048)
    op.run((a, stand_in, g), (torch.empty(0), torch.empty(2048)), stores=(False, True))
    op.run((a, stand_in, g), (torch.empty(2048), torch.empty(0)), stores=(True, False))
    assert flat == [(True, 0b10), (False, 0b01)]
    with pytest.raises(ValueError, match="reads= is a backward kernel's"):
        rt.ElementwiseOp("forward", _StubKernel(), _StubKernel(), op.configs, reads=(None,))


def test_a_selective_kernel_stores_only_the_outputs_asked_for():
    from tilegen.runtime.ops import stored_outputs

    outputs = [torch.empty(3), torch.empty(0), torch.empty(3)]
    assert stored_outputs(outputs, (True, False, True), selective=True) == (0b101, [0, 2])
    assert stored_outputs(outputs, None, selective=True) == (0b111, [0, 1, 2])
    bits, stored = stored_outputs(outputs, None, selective=False)  # (a forward: no STORES)
    assert bits is None and list(stored) == [0, 1, 2]
    with pytest.raises(ValueError, match="2 flags for 3 outputs"):
        stored_outputs(outputs, (True, False), selective=True)


def test_ops_called_from_several_threads_at_once_compute_right():
    # Triton's interpreter patches its language module for the kernel it runs: two threads'
    # kernels at once broke each other's (InterpreterError). Launches take turns there; on a GPU
    # they run as they come.
    from generated import scaled_silu_mul

    device = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(4096, generator=g).to(device) for _ in range(2))
    want = torch.nn.functional.silu(a.double()) * b.double()
    outcomes = []

    def calls():
        for _ in range(25):
            try:
                outcomes.append(scaled_silu_mul(a, b))
            except Exception as error:  # (a thread's exception is not the test's)
                outcomes.append(error)

    run_in_threads(calls, 4)
    assert len(outcomes) == 100
    for got in outcomes:
        assert isinstance(got, torch.Tensor), got
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-6)
