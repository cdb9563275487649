"""Host-side runtime helpers of the generated package, checked on the CPU."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
import torch

from generated import _runtime as rt
from tilegen.build import load_specs
from tilegen.render import Renderer
from tilegen.tables import render_table, table_for_spec
from tests.conftest import REPO


def test_collapse_merges_contiguous_dims_and_drops_ones():
    t = torch.empty(4, 1, 5, 6)
    sizes, strides = rt.collapse(t.shape, [t.stride()])
    assert sizes == [120] and strides == [[1]]
    u = t.transpose(0, 3)
    sizes, strides = rt.collapse(u.shape, [u.stride(), u.contiguous().stride()])
    assert sizes == [6, 5, 4] and strides[0] == [1, 6, 30]


def test_needs_int64_on_huge_tensors_without_memory():
    small = torch.empty(1024, device="meta")
    assert not rt.needs_int64(small, extra=1024)
    huge = torch.empty(2**31 + 1, device="meta", dtype=torch.float16)
    assert rt.needs_int64(huge)
    # A view whose elements are few but whose reach (strides) passes 2**31 needs it too.
    reach = torch.empty(2**16, 2**16, device="meta", dtype=torch.float16)[:, :2]
    assert reach.numel() < 2**31 and rt.needs_int64(reach)
    assert rt.needs_int64(torch.empty(2**31 - 100, device="meta"), extra=1024)


def test_generated_kernels_switch_to_64_bit_offsets():
    for name in ("add", "matmul", "matmul_relu", "scaled_silu_mul"):
        source = (REPO / "generated" / f"{name}.py").read_text()
        assert "INDEX_64: tl.constexpr" in source and "INDEX_64=rt.needs_int64(" in source
        assert ".to(tl.int64)" in source


def test_nearest_table_entry():
    fitting = [dict(BM=64, BN=64, BK=64, num_warps=4, num_stages=4),
               dict(BM=128, BN=128, BK=64, num_warps=8, num_stages=3)]
    entries = {(1024, 1024, 1024, 2): dict(BM=64, BN=64, BK=64, num_warps=4, num_stages=4),
               (4096, 4096, 4096, 2): dict(BM=128, BN=128, BK=64, num_warps=8, num_stages=3),
               (8192, 8192, 8192, 2): dict(BM=256, BN=128, BK=64, num_warps=8, num_stages=3)}
    assert rt.nearest_entry(entries, (4096, 4096, 4096, 2), fitting)["BM"] == 128
    assert rt.nearest_entry(entries, (2048, 1024, 1024, 2), fitting)["BM"] == 64
    # The nearest entry's tiles are not candidates: the next one within reach.
    assert rt.nearest_entry(entries, (8192, 8192, 4096, 2), fitting)["BM"] == 128
    # Another element size, or too far away: no entry (the heuristic decides).
    assert rt.nearest_entry(entries, (4096, 4096, 4096, 4), fitting) is None
    assert rt.nearest_entry(entries, (16, 16, 16, 2), fitting) is None


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


def test_config_chooser_modes():
    candidates = lambda facts, key: [dict(BLOCK=1024, num_warps=4), dict(BLOCK=4096, num_warps=8)]  # noqa: E731
    fixed = rt.ConfigChooser("fixed", candidates, rt.elementwise_heuristic)
    assert fixed.choose((1 << 20, 2), (132, 1 << 30, ""), None)["BLOCK"] == 1024
    table = {"GPU": {(1 << 20, 2): dict(BLOCK=4096, num_warps=8)}}
    auto = rt.ConfigChooser("auto", candidates, rt.elementwise_heuristic, table)
    assert auto.choose((1 << 20, 2), (132, 1 << 30, "GPU"), None)["BLOCK"] == 4096
    assert auto.choose((1 << 20, 2), (132, 1 << 30, "Other"), None) == auto.cache[(1 << 20, 2)]
    with auto.forcing(dict(BLOCK=1024, num_warps=4)):
        assert auto.choose((1 << 20, 2), (132, 1 << 30, "GPU"), None)["BLOCK"] == 1024


def test_config_key_leaves_out_axes_not_in_configs_key():
    calls = []

    def candidates(facts, key):
        calls.append(key)
        return [dict(BM=64, BN=64, BK=32, num_warps=4, num_stages=3)]

    chooser = rt.ConfigChooser("auto", candidates, rt.matmul_heuristic, key_mask=(True, False, False, True))
    facts = (132, 1 << 30, "")
    chooser.choose((64, 128, 256, 2), facts, None)
    chooser.choose((64, 4096, 32, 2), facts, None)  # same M bucket and element size: cached
    chooser.choose((128, 128, 256, 2), facts, None)
    assert calls == [(64, 128, 256, 2), (128, 128, 256, 2)]


def test_launch_plans_repeat_a_call_with_the_same_signature():
    from generated import add, matmul_relu
    from generated.matmul_relu import _CONFIGS
    from generated.tests import _support as s

    _CONFIGS.reset()
    a, b = s.random((70, 90), torch.float32, 0), s.random((90, 40), torch.float32, 1)
    first = matmul_relu(a, b)
    assert len(_CONFIGS.plans) == 1
    # New data, same signature: the plan launches it, and the result is that of the new data.
    a2 = s.random((70, 90), torch.float32, 2)
    torch.testing.assert_close(matmul_relu(a2, b), torch.relu(a2 @ b), atol=1e-4, rtol=1e-4)
    assert len(_CONFIGS.plans) == 1 and not torch.equal(first, matmul_relu(a2, b))
    # Another layout is another signature; so is each out= layout (after the checks, which run),
    # and out= with those very tensors (addresses too) is remembered as checked.
    torch.testing.assert_close(matmul_relu(a, b.t().contiguous().t()), first, atol=1e-5, rtol=1e-5)
    out = torch.empty_like(first)
    assert matmul_relu(a, b, out=out) is out and len(_CONFIGS.plans) == 4
    transposed = torch.empty(40, 70, dtype=first.dtype, device=first.device).t()
    assert matmul_relu(a2, b, out=transposed) is transposed and len(_CONFIGS.plans) == 6
    torch.testing.assert_close(transposed, torch.relu(a2 @ b), atol=1e-4, rtol=1e-4)
    with pytest.raises(ValueError, match="matmul_relu: argument 'out' shares memory with input 'a'"):
        matmul_relu(a, b, out=a[:, :40])
    # Bad arguments still get the named errors once plans exist.
    with pytest.raises(TypeError, match="matmul_relu: argument 'a' must be a torch.Tensor"):
        matmul_relu(a.tolist(), b)
    with pytest.raises(TypeError, match="matmul_relu: argument 'b' has dtype float16"):
        matmul_relu(a, b.half())
    with pytest.raises(ValueError, match="matmul_relu: argument 'b' is on meta"):
        matmul_relu(a, b.to("meta"))
    # Forcing a config drops the plans, so the forced config is the one launched, then and after.
    forced = dict(BM=64, BN=64, BK=32, SPLIT_K=2, num_warps=4, num_stages=2)
    with _CONFIGS.forcing(forced):
        assert not _CONFIGS.plans
        matmul_relu(a, b)
        assert len(_CONFIGS.plans) == 1 and _CONFIGS.last_key is not None
    assert not _CONFIGS.plans
    x = s.random((3, 5), torch.float32, 3)
    torch.testing.assert_close(add(x, x.t().contiguous().t()), x + x)
    torch.testing.assert_close(add(x, x), x + x)


def test_out_checks_are_remembered_for_the_same_tensors_only(monkeypatch):
    from generated import matmul_relu, rms_scale_exp
    from generated.tests import _support as s

    checked = []
    prepare_out = rt.prepare_out
    monkeypatch.setattr(rt, "prepare_out", lambda *args, **kw: checked.append(args[0]) or prepare_out(*args, **kw))
    a, b = s.random((64, 64), torch.float32, 0), s.random((64, 64), torch.float32, 1)
    out = torch.full((64, 64), float("nan"), device=s.DEVICE)
    matmul_relu(a, b, out=out)
    assert checked == ["matmul_relu"]
    # The same tensors again: no checks, and the new data is what gets written.
    a.copy_(s.random((64, 64), torch.float32, 2))
    assert matmul_relu(a, b, out=out) is out and checked == ["matmul_relu"]
    torch.testing.assert_close(out, torch.relu(a @ b), atol=1e-4, rtol=1e-4)
    # The same layouts at other addresses are checked again, so an overlap is still refused.
    with pytest.raises(ValueError, match="matmul_relu: argument 'out' shares memory with input 'a'"):
        matmul_relu(a, b, out=a)
    with pytest.raises(ValueError, match="matmul_relu: argument 'out' shares memory with input 'b'"):
        matmul_relu(a, b, out=b)
    assert checked == ["matmul_relu"] * 3
    # Several outputs: the tuple's tensors make the key.
    x, v = s.random((8, 16), torch.float32, 3), s.random((8, 16), torch.float32, 4).abs()
    outs = (torch.empty(8, 16, device=s.DEVICE), torch.empty(8, 16, device=s.DEVICE))
    first = rms_scale_exp(x, v, out=outs)
    checked.clear()
    again = rms_scale_exp(x, v, out=list(outs))
    assert checked == [] and all(g is o for g, o in zip(again, outs)) and all(g is o for g, o in zip(first, outs))
    with pytest.raises(ValueError, match="rms_scale_exp: argument 'out\\[1\\]' shares memory with input 'x'"):
        rms_scale_exp(x, v, out=(outs[0], x))


def test_plans_are_bounded():
    chooser = rt.ConfigChooser("fixed", lambda facts, key: [dict(BLOCK=1, num_warps=1)], rt.elementwise_heuristic)
    for i in range(rt.MAX_PLANS + 5):
        chooser.remember(i, print)
    assert len(chooser.plans) == 5


def test_stride_factor_is_the_largest_power_of_two_dividing_the_stride():
    strides = (1, 2, 12, 300, 1000, 4096, 769, 0)
    assert [rt.stride_factor(s) for s in strides] == [1, 2, 4, 4, 8, 16, 1, 16]
    assert all(s // rt.stride_factor(s) * rt.stride_factor(s) == s for s in strides)
    # Past 32 bits the stride stays whole, so multiplying it back never needs a wider type.
    assert rt.stride_factor(2**31 + 16) == 1


def test_size_factor_splits_only_sizes_triton_would_not_mark():
    sizes = [1, 2, 6, 12, 1000, 1025, 16, 4096, 4000, 2**31 + 8]
    assert [rt.size_factor(s) for s in sizes] == [1, 2, 2, 4, 8, 1, 1, 1, 1, 1]
    assert all(s % rt.size_factor(s) == 0 for s in sizes)


def test_k_rows_load_wide_only_from_aligned_rows_along_k():
    odd_a, odd_b = torch.empty(64, 513, dtype=torch.float16), torch.empty(513, 64, dtype=torch.float16)
    assert rt.k_rows_load_wide(torch.empty(64, 1000, dtype=torch.float16), odd_b)  # A: K contiguous, rows of 2000 bytes
    assert not rt.k_rows_load_wide(odd_a, odd_b)  # rows of 1026 bytes; B holds N contiguously
    assert rt.k_rows_load_wide(odd_a, torch.empty(64, 520, dtype=torch.float16).t()[:513])  # B: K contiguous
    assert not rt.k_rows_load_wide(torch.empty(1, 64 * 1000 + 1, dtype=torch.float16)[0, 1:].view(64, 1000), odd_b)


def test_exploring_varies_warps_and_stages_around_the_same_tiles():
    candidates = rt.matmul_candidates([64, 128, 256], [64, 128, 256], [32, 64, 128], [], [], (False,) * 3,
                                      splits=(1, 2, 4, 8))
    facts, key = (132, 232448, "H200"), (2048, 2048, 2048, 2)
    base, wide = candidates(facts, key), candidates(facts, key, explore=True)

    assert {rt.tile_of(c) for c in wide} == {rt.tile_of(c) for c in base} and all(c in wide for c in base)
    # Every config is explored with tensor-descriptor loads too; only tuning offers them.
    assert [c for c in wide if c.get("TMA")] == [dict(c, TMA=1) for c in wide if not c.get("TMA")]
    assert not any("TMA" in c for c in base)
    assert {c["num_warps"] for c in wide} == {4, 8} and {c["num_stages"] for c in wide} == {2, 3, 4, 5}
    assert all((c["BM"] + c["BN"]) * c["BK"] * 2 * c["num_stages"] <= facts[1] for c in wide)
    # Accumulators of 128x256 need 8 warps, exploring or not.
    assert {c["num_warps"] for c in wide if c["BM"] * c["BN"] == 128 * 256} == {8}
    # Warps and stages the spec lists are all there is to explore, besides the loads.
    fixed = rt.matmul_candidates([64], [64], [32], [4], [3], (False,) * 3)
    one = dict(BM=64, BN=64, BK=32, SPLIT_K=1, num_warps=4, num_stages=3)
    # (2048^2 in 64x64 tiles fills more than one wave, so the persistent launch is tried too.)
    assert fixed(facts, key) == [one]
    assert fixed(facts, key, explore=True) == [one, dict(one, TMA=1), dict(one, PERSISTENT=1),
                                                dict(one, PERSISTENT=1, TMA=1)]
    blocks = rt.elementwise_candidates([1024, 4096], [], False)
    assert blocks(facts, (1 << 20, 2)) == [dict(BLOCK=1024, num_warps=4), dict(BLOCK=4096, num_warps=8)]
    assert [c["num_warps"] for c in blocks(facts, (1 << 20, 2), explore=True)] == [2, 4, 8, 4, 8, 16]


def test_split_k_candidates_only_where_tiles_leave_the_gpu_idle():
    candidates = rt.matmul_candidates([64, 128, 256], [64, 128, 256], [32, 64, 128], [], [], (False,) * 3,
                                      splits=(1, 2, 4, 8))
    facts = (132, 232448, "")
    large = candidates(facts, (4096, 4096, 4096, 2))
    assert {c["SPLIT_K"] for c in large} == {1} and {c["BM"] for c in large} == {64, 128, 256}
    skinny = candidates(facts, (16, 4096, 4096, 2))
    assert {c["BM"] for c in skinny} == {64} and {c["SPLIT_K"] for c in skinny} == {1, 2, 4, 8}
    assert all(4096 // c["BN"] * c["SPLIT_K"] <= 4 * 132 for c in skinny)
    # The heuristic splits K for a skinny shape and keeps whole tiles for a large one.
    assert rt.matmul_heuristic(skinny, facts, (16, 4096, 4096, 2))["SPLIT_K"] > 1
    assert rt.matmul_heuristic(large, facts, (4096, 4096, 4096, 2))["SPLIT_K"] == 1


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
        return rt.matmul_candidates([64, 128], [64, 128], [64], [], [], (False,) * 3, splits=(1, 2),
                                    launch=launch)(facts, key, explore)

    # auto: the runtime list has none (the table may name them); tuning varies the unsplit
    # configs whose tiles fill more than one wave.
    assert not any(c.get("PERSISTENT") for c in candidates("auto", (4096, 4096, 4096, 2), False))
    explored = candidates("auto", (4096, 4096, 4096, 2), True)
    persistent = [c for c in explored if c.get("PERSISTENT")]
    assert persistent and all(c["SPLIT_K"] == 1 for c in persistent)
    assert {(c["BM"], c["BN"]) for c in persistent} == {(64, 64), (64, 128), (128, 64), (128, 128)}
    assert not any(c.get("PERSISTENT") for c in candidates("auto", (1024, 1024, 1024, 2), True)
                   if c["BM"] * c["BN"] == 128 * 128)  # 64 tiles: one wave, nothing to loop over
    # tiled and persistent fix the style in the wrapper: tuning has nothing to vary.
    for launch in ("tiled", "persistent"):
        assert not any(c.get("PERSISTENT") for c in candidates(launch, (4096, 4096, 4096, 2), True))


@pytest.mark.parametrize("value, launch, persistent", [
    (None, "auto", 'bool(config.get("PERSISTENT")) and split_k == 1'),
    ("tiled", "tiled", "persistent = False"),
    ("persistent", "persistent", "persistent = split_k == 1"),
])
def test_schedule_launch(tmp_path, value, launch, persistent):
    text = (REPO / "specs" / "matmul_relu.yaml").read_text()
    if value is not None:
        text += f"schedule:\n  launch: {value}\n"
    (tmp_path / "op.yaml").write_text(text)
    item = load_specs([tmp_path / "op.yaml"], tmp_path)[0]
    assert item.spec.launch == launch
    source = Renderer().op_module(item)
    assert persistent in source and f"launch={launch!r}" in source


def test_repeat_calls_allocate_outputs_as_the_first_call_did():
    from generated import add
    from generated.tests import _support as s

    a, b = s.random((6, 8), torch.float32, 0), s.random((6, 8), torch.float32, 1)
    # Contiguous inputs (the hot path's torch.empty_like) and transposed ones (new_empty).
    for x, y in ((a, b), (a.t(), b.t()), (a[:, ::2], b[:, ::2])):
        first, again = add(x, y), add(x, y)
        assert again.is_contiguous() and again.stride() == first.stride() and again.dtype == x.dtype
        torch.testing.assert_close(again, x + y)


def _fake_binary(signature, **metadata):
    """A compiled kernel as the static launcher reads it: its signature and metadata."""
    fields = dict(num_ctas=1, global_scratch_size=0, profile_scratch_size=0, num_warps=4, shared=1024)
    fields.update(metadata)
    return SimpleNamespace(src=SimpleNamespace(signature=signature), metadata=SimpleNamespace(**fields),
                           function=1234, packed_metadata="packed", run=None, launch_metadata=None)


_FLAT_NAMES = ["a_ptr", "b_ptr", "c_ptr", "alpha", "numel", "BLOCK", "EVEN"]
_FLAT_SIGNATURE = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "alpha": "fp32", "numel": "i32",
                   "BLOCK": "constexpr", "EVEN": "constexpr"}


def test_static_launch_args_follow_the_binarys_parameters(monkeypatch):
    monkeypatch.setattr(rt, "_STATIC_LAUNCH", object())
    args = lambda binary, varying=4: rt.static_launch_args(binary, _FLAT_NAMES, varying)  # noqa: E731
    # Constexprs are left out; each scratch area the compiler declares takes a null pointer.
    assert args(_fake_binary(_FLAT_SIGNATURE)) == ("OOOfiOO", 0, (4, None, None))
    no_scratch = _fake_binary(_FLAT_SIGNATURE)
    del no_scratch.metadata.global_scratch_size, no_scratch.metadata.profile_scratch_size
    assert args(no_scratch) == ("OOOfi", 0, (4,))
    # Where it cannot launch, Triton's launcher does.
    assert args(_fake_binary(dict(_FLAT_SIGNATURE, a_ptr="tensordesc<fp16[64, 64]>"))) is None
    assert args(_fake_binary(_FLAT_SIGNATURE, global_scratch_size=256)) is None
    assert args(_fake_binary(_FLAT_SIGNATURE, num_ctas=2)) is None
    assert args(_fake_binary(_FLAT_SIGNATURE, launch_pdl=True)) is None
    # Leading varying arguments it does not take (None pointers) are skipped; others it cannot.
    assert args(_fake_binary(dict(_FLAT_SIGNATURE, a_ptr="constexpr", b_ptr="constexpr"))) == ("OfiOO", 2, (4, None, None))
    assert args(_fake_binary(dict(_FLAT_SIGNATURE, alpha="constexpr"))) is None
    assert args(_fake_binary(dict(_FLAT_SIGNATURE, numel="constexpr"))) == ("OOOfOO", 0, (None, None))
    monkeypatch.setattr(rt, "_STATIC_LAUNCH", None)
    assert args(_fake_binary(_FLAT_SIGNATURE)) is None


def test_plans_launch_through_the_static_launcher_where_it_applies(monkeypatch):
    import triton

    launched, ran = [], []
    monkeypatch.setattr(rt, "_STATIC_LAUNCH", lambda *call: launched.append(call))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(triton.runtime, "driver", SimpleNamespace(active=SimpleNamespace(get_current_stream=lambda d: 77)))
    a, b, c = (torch.zeros(4) for _ in range(3))
    for static in (True, False):
        launcher = rt.Launcher(SimpleNamespace(arg_names=_FLAT_NAMES))
        launcher.native, launcher.static = False, static
        binary = _fake_binary(_FLAT_SIGNATURE)
        binary.run = lambda *call: ran.append(call)
        plan = launcher._direct_plan(binary, (4,), 0, (a, b, c, 0.5, 4096), (4096,), dict(BLOCK=1024, EVEN=True), {}, None)
        plan(c, b, a, 2.0)
        assert launcher.static_plans == int(static)
    # Tensors reach the static launcher as their addresses; Triton's launcher takes them as they are.
    addresses = (c.data_ptr(), b.data_ptr(), a.data_ptr())
    assert launched == [(1234, 4, 1, 1, 4, 1024, "OOOfiOO", (*addresses, 2.0, 4096, None, None), 77)]
    assert ran == [(4, 1, 1, 77, 1234, "packed", None, None, None, c, b, a, 2.0, 4096, 1024, True)]
    # An unsplit matmul's leading None buffers are constexprs the binary does not take.
    launched.clear()
    launcher = rt.Launcher(SimpleNamespace(arg_names=_FLAT_NAMES))
    launcher.native = False
    binary = _fake_binary(dict(_FLAT_SIGNATURE, a_ptr="constexpr", b_ptr="constexpr"))
    launcher._direct_plan(binary, (4,), 0, (None, None, c, 0.5, 4096), (4096,), dict(BLOCK=1024, EVEN=True), {}, None)(None, None, a, 3.0)
    assert launched == [(1234, 4, 1, 1, 4, 1024, "OfiOO", (a.data_ptr(), 3.0, 4096, None, None), 77)]


def test_native_launch_args_leave_uncertain_widths_to_the_static_launcher(monkeypatch):
    monkeypatch.setattr(rt, "_STATIC_LAUNCH", object())
    binary = _fake_binary(_FLAT_SIGNATURE)
    assert rt.native_launch_args(binary, _FLAT_NAMES, 4) == ("pppfipp", 0, (4, None, None))
    # A half-precision scalar: its width in the parameter list is not certain, so only the
    # static launcher takes it.
    half = _fake_binary(dict(_FLAT_SIGNATURE, alpha="fp16"))
    assert rt.native_launch_args(half, _FLAT_NAMES, 4) is None
    assert rt.static_launch_args(half, _FLAT_NAMES, 4) == ("OOOfiOO", 0, (4, None, None))


class _FakeNative:
    """The native launcher's interface, recording what plans ask of it."""

    def __init__(self, refuse=False):
        self.prepared, self.refuse = [], refuse

    def prepare(self, *args):
        if self.refuse:
            raise OverflowError("does not fit")
        self.prepared.append(args)
        return b"plan"

    class Launch:
        def __init__(self, *args):
            self.args = args


def test_plans_launch_through_the_native_launcher_first(monkeypatch):
    import triton

    static = []
    monkeypatch.setattr(rt, "_STATIC_LAUNCH", lambda *call: static.append(call))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: 0, raising=False)
    stream_of = lambda d: 77  # noqa: E731
    monkeypatch.setattr(triton.runtime, "driver", SimpleNamespace(active=SimpleNamespace(get_current_stream=stream_of)))
    native = _FakeNative()
    monkeypatch.setattr(rt._native, "load", lambda: native)
    a, b, c = (torch.zeros(4) for _ in range(3))
    launcher = rt.Launcher(SimpleNamespace(arg_names=_FLAT_NAMES))
    plan = launcher._direct_plan(_fake_binary(_FLAT_SIGNATURE), (4,), 0, (a, b, c, 0.5, 4096), (4096,),
                                 dict(BLOCK=1024, EVEN=True), {}, None)
    # Prepared once: the grid, 4 warps as 128 threads, the shared memory, the device, a type code
    # per parameter, how many vary, and the fixed ones (numel, then two null scratch pointers).
    assert native.prepared == [(1234, 4, 1, 1, 128, 1024, 0, "pppfipp", 4, (4096, None, None))]
    # The plan is the native Launch: it skips no argument, reads the device and stream as the
    # Python plan would, and hands calls it cannot serve to that plan.
    assert isinstance(plan, _FakeNative.Launch)
    prepared, skip, current_device, stream, hooks, slow = plan.args
    assert (prepared, skip, current_device(), stream, hooks) == (b"plan", 0, 0, stream_of, triton.knobs.runtime)
    assert callable(slow) and launcher.native_plans == 1 and launcher.static_plans == 0 and static == []
    # Leading arguments the binary does not take (an unsplit matmul's None buffers) are skipped.
    binary = _fake_binary(dict(_FLAT_SIGNATURE, a_ptr="constexpr", b_ptr="constexpr"))
    plan = launcher._direct_plan(binary, (4,), 0, (None, None, c, 0.5, 4096), (4096,), dict(BLOCK=1024, EVEN=True),
                                 {}, None)
    assert native.prepared[-1][7:] == ("pfipp", 2, (4096, None, None)) and plan.args[1] == 2
    # A value the native launcher cannot pass, or a launcher off: the static launcher takes over.
    for refuse, enabled in ((True, True), (False, False)):
        monkeypatch.setattr(rt._native, "load", lambda: _FakeNative(refuse=refuse))
        launcher = rt.Launcher(SimpleNamespace(arg_names=_FLAT_NAMES))
        launcher.native = enabled
        launcher._direct_plan(_fake_binary(_FLAT_SIGNATURE), (4,), 0, (a, b, c, 0.5, 4096), (4096,),
                              dict(BLOCK=1024, EVEN=True), {}, None)(c, b, a, 2.0)
        assert launcher.native_plans == 0 and launcher.static_plans == 1
    assert len(static) == 2


def test_native_launcher_unavailable_warns_once_and_falls_back(monkeypatch):
    import triton

    static = []
    monkeypatch.setattr(rt, "_STATIC_LAUNCH", lambda *call: static.append(call))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(triton.runtime, "driver", SimpleNamespace(active=SimpleNamespace(get_current_stream=lambda d: 77)))
    monkeypatch.setattr(rt._native, "load", lambda: None)
    monkeypatch.setattr(rt._native, "UNAVAILABLE", "no C compiler (cc, gcc or clang) on PATH")
    monkeypatch.setattr(rt, "_NATIVE_WARNED", False)
    a = torch.zeros(4)
    with pytest.warns(RuntimeWarning, match="no C compiler"):
        for _ in range(2):
            launcher = rt.Launcher(SimpleNamespace(arg_names=_FLAT_NAMES))
            launcher._direct_plan(_fake_binary(_FLAT_SIGNATURE), (4,), 0, (a, a, a, 0.5, 4096), (4096,),
                                  dict(BLOCK=1024, EVEN=True), {}, None)(a, a, a, 2.0)
    assert len(static) == 2


@pytest.fixture
def native_module(tmp_path, monkeypatch):
    """The native launcher built from source into a fresh cache."""
    import shutil

    if not (shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")):
        pytest.skip("no C compiler to build the native launcher with")
    monkeypatch.setenv("TILEGEN_CACHE_DIR", str(tmp_path))
    return rt._native.import_built()


def test_native_launcher_builds_once_and_prepares_plans(native_module, tmp_path):
    import struct

    built = rt._native.library_path()
    assert built.startswith(str(tmp_path))
    stamp = os.stat(built).st_mtime_ns
    rt._native.import_built()  # from the cache: not built again
    assert os.stat(built).st_mtime_ns == stamp
    t = torch.zeros(4)
    plan = native_module.prepare(99, 8, 2, 1, 256, 49152, 0, "pifdlpH", 2, (0.5, 0.25, 2**40, t, 65535))
    function, grid, threads, shared, device, codes, varying, fixed = native_module.describe(plan)
    assert (function, grid, threads, shared, device, codes, varying) == (99, (8, 2, 1), 256, 49152, 0, "pifdlpH", 2)
    # Each fixed value as the kernel reads it from the start of its 8-byte slot.
    assert struct.pack("<Q", fixed[0])[:4] == struct.pack("<f", 0.5)
    assert struct.pack("<Q", fixed[1]) == struct.pack("<d", 0.25)
    assert fixed[2] == 2**40 and fixed[3] == t.data_ptr() and fixed[4] == 65535
    assert native_module.describe(native_module.prepare(1, 1, 1, 1, 32, 0, 0, "pi", 1, (-3,)))[-1] == (2**32 - 3,)


def test_native_launcher_refuses_what_it_cannot_pass(native_module):
    prepare = native_module.prepare
    with pytest.raises(ValueError, match="unknown type code 'z'"):
        prepare(1, 1, 1, 1, 32, 0, 0, "pz", 1, (None,))
    with pytest.raises(OverflowError, match="does not fit in 32 bits"):
        prepare(1, 1, 1, 1, 32, 0, 0, "pi", 1, (2**31,))
    with pytest.raises(OverflowError, match="does not fit in 16 bits"):
        prepare(1, 1, 1, 1, 32, 0, 0, "pH", 1, (2**16,))
    with pytest.raises(ValueError, match="3 type codes for 1 varying and 1 fixed"):
        prepare(1, 1, 1, 1, 32, 0, 0, "ppi", 1, (4,))
    with pytest.raises(ValueError, match="at most"):
        prepare(1, 1, 1, 1, 32, 0, 0, "p" * 200, 200, ())
    plan = prepare(1, 1, 1, 1, 32, 0, 0, "ppi", 2, (4,))
    with pytest.raises(TypeError, match="takes 2 varying arguments, got 1"):
        native_module.launch(plan, 0, 5)
    with pytest.raises(TypeError, match="takes a plan"):
        native_module.launch(b"not a plan", 0)
    with pytest.raises(TypeError, match="a pointer takes a tensor, an address or None, not float"):
        native_module.launch(plan, 0, 1.5, 2)
    empty = prepare(1, 0, 1, 1, 32, 0, 0, "ppi", 2, (4,))
    assert native_module.launch(empty, 0, 5, 6) is None  # no programs: nothing to launch, driver or not
    if native_module.driver_ready() is not None:  # no GPU driver here: it says so, and launches nothing
        with pytest.raises(RuntimeError, match="libcuda"):
            native_module.launch(plan, 0, 5, 6)


def test_native_launch_serves_the_common_call_and_hands_on_the_rest(native_module):
    """Launch's checks, on a plan with no programs (which launches nothing, driver or not)."""
    slow, streams = [], []

    def make(device=0, enter=None, leave=None, skip=0):
        hooks = SimpleNamespace(launch_enter_hook=enter, launch_exit_hook=leave)
        plan = native_module.prepare(1, 0, 1, 1, 32, 0, 0, "ppi", 2, (4,))
        return native_module.Launch(plan, skip, lambda: device, lambda d: streams.append(d) or 77, hooks,
                                    lambda *args: slow.append(args) or "slow")

    # The plan's device, no hook listening (None, or a chain with no calls): launched here.
    assert make()(5, 6) is None and make(enter=SimpleNamespace(calls=[]))(5, 6) is None
    assert streams == [0, 0] and slow == []
    # Another device, or a hook that listens (a chain with calls, or a plain callable): handed on.
    assert make(device=1)(5, 6) == "slow"
    assert make(enter=SimpleNamespace(calls=[print]))(5, 6) == "slow"
    assert make(leave=print)(5, 6) == "slow"
    assert slow == [(5, 6)] * 3 and streams == [0, 0]
    # Leading arguments the binary does not take are skipped; the count must match.
    assert make(skip=2)(None, None, 5, 6) is None
    with pytest.raises(TypeError, match="takes 2 arguments, got 3"):
        make()(5, 6, 7)
    with pytest.raises(TypeError, match="a pointer takes a tensor, an address or None, not str"):
        make()("x", 6)
    with pytest.raises(AttributeError):  # hooks without the attributes: the error is not swallowed
        native_module.Launch(native_module.prepare(1, 0, 1, 1, 32, 0, 0, "ppi", 2, (4,)), 0, lambda: 0,
                             lambda d: 77, object(), print)(5, 6)
    with pytest.raises(TypeError, match="takes a plan"):
        native_module.Launch(b"not a plan", 0, print, print, None, print)


def test_only_leading_tensors_go_as_addresses():
    t = torch.zeros(1)
    assert rt._leading_tensors((t, t, 2.0, 7)) == 2
    assert rt._leading_tensors((t, t)) == 2
    assert rt._leading_tensors((2.0, t)) == 0  # a tensor after a scalar: every value goes as it is
    assert rt._leading_tensors((t, None, t)) == 0
    assert rt._leading_tensors(()) == 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="plans launch compiled binaries on a GPU only")
@pytest.mark.parametrize("launcher_kind", ["native", "static"])
def test_repeat_calls_on_the_gpu_launch_through_plans_and_stay_right(launcher_kind, monkeypatch):
    import sys

    import torch.nn.functional as F

    import generated as ops
    from generated.tests import _support as s

    def launchers(op):
        return [v for v in vars(sys.modules[f"generated.{op}"]).values() if isinstance(v, rt.Launcher)]

    counter = f"{launcher_kind}_plans"
    for op in ("add", "scaled_silu_mul", "matmul_relu", "matmul"):
        # Plans made before (by other tests) may launch the other way: start afresh.
        sys.modules[f"generated.{op}"]._CONFIGS.drop_plans()
        for launcher in launchers(op):
            monkeypatch.setattr(launcher, "native", launcher_kind == "native")

    def fresh(shape, seed):
        return s.random(shape, torch.float16, seed)

    a, b = fresh((4000,), 0), fresh((4000,), 1)
    x, y = fresh((256, 192), 2), fresh((192, 320), 3)
    skinny_a, skinny_b = fresh((16, 4096), 4), fresh((4096, 512), 5)  # split-K: workspace buffers lead
    cases = [
        ("add", lambda: ops.add(a, b), lambda: a + b, (a, b)),
        ("scaled_silu_mul", lambda: ops.scaled_silu_mul(a, b, alpha=0.5), lambda: 0.5 * F.silu(a.float()) * b.float(), (a, b)),
        ("matmul_relu", lambda: ops.matmul_relu(x, y), lambda: torch.relu(x.float() @ y.float()), (x, y)),
        ("matmul", lambda: ops.matmul(skinny_a, skinny_b), lambda: skinny_a.float() @ skinny_b.float(), (skinny_a, skinny_b)),
    ]
    for seed, (op, call, want, inputs) in enumerate(cases):
        before = sum(getattr(launcher, counter) for launcher in launchers(op))
        call()  # the first call launches through Triton and leaves a plan
        for tensor in inputs:  # new values, same tensors: the second call repeats the plan
            tensor.copy_(s.random(tuple(tensor.shape), tensor.dtype, 100 + seed))
        torch.testing.assert_close(call().float(), want().float(), atol=2e-2, rtol=2e-2, msg=op)
        # Other tensors of the same signature: the plan reads their addresses afresh.
        others = [s.random(tuple(t.shape), t.dtype, 200 + seed) for t in inputs]
        got = getattr(ops, op)(*others, **({"alpha": 0.5} if op == "scaled_silu_mul" else {}))
        for tensor, other in zip(inputs, others):  # the oracle reads `inputs`
            tensor.copy_(other)
        torch.testing.assert_close(got.float(), want().float(), atol=2e-2, rtol=2e-2, msg=op)
        if (rt._native.load() if launcher_kind == "native" else rt._STATIC_LAUNCH) is not None:
            assert sum(getattr(launcher, counter) for launcher in launchers(op)) > before, op


@pytest.mark.skipif(not torch.cuda.is_available(), reason="plans launch compiled binaries on a GPU only")
def test_plans_launch_from_a_thread_of_its_own():
    """A thread that has not used CUDA yet has no current context; the launch makes the
    device's primary one current (the native launcher does it itself)."""
    import threading

    import generated as ops
    from generated.tests import _support as s

    a, b = s.random((4000,), torch.float16, 0), s.random((4000,), torch.float16, 1)
    ops.add(a, b)  # leaves a plan
    torch.cuda.synchronize()
    found = {}

    def call():
        try:
            found["sum"] = ops.add(a, b)
            torch.cuda.synchronize()
        except BaseException as exc:  # reported by the main thread below
            found["error"] = exc

    worker = threading.Thread(target=call)
    worker.start()
    worker.join()
    assert "error" not in found, found.get("error")
    torch.testing.assert_close(found["sum"], a + b)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="plans launch compiled binaries on a GPU only")
def test_repeat_calls_through_tensor_descriptors_stay_right_as_addresses_change():
    import sys

    import generated as ops
    from generated.tests import _support as s

    if not rt.tma_loads_fit(torch.empty(64, 64, device="cuda", dtype=torch.float16)):
        pytest.skip("this GPU has no tensor-memory-accelerator loads")
    module = sys.modules["generated.matmul"]
    x, y = s.random((256, 192), torch.float16, 0), s.random((192, 320), torch.float16, 1)
    config = dict(BM=64, BN=64, BK=64, SPLIT_K=1, num_warps=4, num_stages=3, TMA=1, PERSISTENT=0)
    with module._CONFIGS.forcing(config):
        first = ops.matmul(x, y)  # launches through Triton with descriptors, and leaves a plan
        torch.testing.assert_close(first.float(), x.float() @ y.float(), atol=2e-2, rtol=2e-2)
        for seed in range(2, 8):
            # New values at the same addresses, then tensors at new addresses (each plan encodes
            # the descriptors of an address once), then the first ones again.
            x.copy_(s.random(tuple(x.shape), x.dtype, seed))
            others = (s.random(tuple(x.shape), x.dtype, 100 + seed), s.random(tuple(y.shape), y.dtype, 200 + seed))
            for a, b in ((x, y), others, (x, y)):
                torch.testing.assert_close(ops.matmul(a, b).float(), a.float() @ b.float(), atol=2e-2, rtol=2e-2)
    if launches_descriptors_as_triton_3_6():
        assert module._LAUNCH.encoding_plans > 0


def launches_descriptors_as_triton_3_6():
    try:
        from triton.backends.nvidia import driver
    except ImportError:
        return False
    return getattr(driver, "_BASE_ARGS_FORMAT", None) == "iiiKKppOOOOOO"


def test_descriptor_plan_encodes_each_address_once_and_launches_in_order(monkeypatch):
    """_launch_encoding_descriptors with a stand-in binary and launcher, on the CPU."""
    if rt.TensorDescriptor is None:
        pytest.skip("this Triton has no host tensor descriptors")
    from triton.backends.nvidia import driver

    encoded, launched = [], []

    def encode(descriptor, meta):
        encoded.append((descriptor.base.data_ptr(), list(descriptor.block_shape), meta))
        return [f"map{len(encoded)}", *descriptor.shape, *descriptor.strides]

    def make_binary(indices):
        def launcher(*args):
            launched.append(args)
        tensordesc_indices, tensordesc_meta = set(indices), ["meta a", "meta b"]

        def inner(*args):  # Triton 3.6's wrapper around its C launcher holds these three
            return launcher, tensordesc_indices, tensordesc_meta
        metadata = SimpleNamespace(launch_cooperative_grid=False, launch_pdl=False, global_scratch_size=0,
                                   profile_scratch_size=0)
        return SimpleNamespace(run=SimpleNamespace(launch=inner), metadata=metadata, function=7, packed_metadata="pm")

    monkeypatch.setattr(driver, "_BASE_ARGS_FORMAT", "iiiKKppOOOOOO", raising=False)
    monkeypatch.setattr(driver, "make_tensordesc_arg", encode)
    blocks = {1: [64, 32], 2: [32, 64]}
    launch = rt._launch_encoding_descriptors(make_binary([1, 2]), blocks, (4, 2, 1), ("k", 16))
    a, b, c = torch.zeros(128, 64), torch.zeros(64, 128), torch.zeros(128, 128)
    for _ in range(3):
        launch("stream", (None, a, b, c, 2.0))
    assert [address for address, _, _ in encoded] == [a.data_ptr(), b.data_ptr()]  # once each
    assert encoded[0][1:] == ([64, 32], "meta a") and encoded[1][1:] == ([32, 64], "meta b")
    assert launched[-1] == (4, 2, 1, "stream", 7, False, False, None, None, "pm", None, None, None,
                            None, "map1", 128, 64, 64, 1, "map2", 64, 128, 128, 1, c, 2.0, "k", 16)
    other = torch.zeros(128, 64)
    launch("stream", (None, other, b, c, 2.0))
    assert len(encoded) == 3 and encoded[-1][0] == other.data_ptr()
    # Descriptors where the plan has none, scratch memory, or another launcher: no such plan.
    assert rt._launch_encoding_descriptors(make_binary([1]), blocks, (1, 1, 1), ()) is None
    scratch = make_binary([1, 2])
    scratch.metadata.global_scratch_size = 128
    assert rt._launch_encoding_descriptors(scratch, blocks, (1, 1, 1), ()) is None
    monkeypatch.setattr(driver, "_BASE_ARGS_FORMAT", "iiiKKppOOOOOOO")
    assert rt._launch_encoding_descriptors(make_binary([1, 2]), blocks, (1, 1, 1), ()) is None


def test_split_k_workspace_off_cuda_is_fresh_for_each_call():
    # No stream orders CPU (interpreter) launches: each call gets its own buffers.
    first = rt.split_k_workspace(torch.device("cpu"), 64, 4)
    second = rt.split_k_workspace(torch.device("cpu"), 64, 4)
    assert first[0].numel() == 64 and first[1].tolist() == [0, 0, 0, 0]
    assert first[0].data_ptr() != second[0].data_ptr() and first[1].data_ptr() != second[1].data_ptr()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="only CUDA streams keep a split-K workspace")
def test_split_k_workspace_is_kept_per_stream_and_grows():
    device = torch.empty(0, device="cuda").device  # as the wrappers pass it: with its index
    sums, counters = rt.split_k_workspace(device, 1000, 10)
    assert sums.numel() >= 1000 and counters.numel() >= 10 and not counters.any()
    # A smaller launch on the same stream reuses both; a larger one grows the partial sums.
    again = rt.split_k_workspace(device, 500, 5)
    assert (again[0].data_ptr(), again[1].data_ptr()) == (sums.data_ptr(), counters.data_ptr())
    grown = rt.split_k_workspace(device, sums.numel() + 1, 10)
    assert grown[0].numel() > sums.numel() and grown[1].data_ptr() == counters.data_ptr()
    # Another stream's launches may run at the same time: it has a workspace of its own.
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        theirs = rt.split_k_workspace(device, 500, 5)
    assert theirs[0].data_ptr() != grown[0].data_ptr() and theirs[1].data_ptr() != counters.data_ptr()
