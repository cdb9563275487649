"""The bench logic that needs no GPU: shapes, metrics, reports, the no-GPU exit."""

from __future__ import annotations

import importlib
import json

import pytest
import torch

from tests.conftest import REPO
from tilegen import bench
from tilegen.measure import module_dtypes


def test_bench_shapes_of_an_op_without_masks_round_to_its_smallest_blocks():
    # matmul_residual_scaled masks no axis: its wrapper takes multiples of its smallest blocks
    # (64, 64, 32), and its bench keeps the kind's shapes where they are such multiples.
    from generated.bench import bench_matmul_residual_scaled as residual
    from tilegen.build import load_specs

    spec = next(s.spec for s in load_specs([REPO / "specs"], REPO) if s.spec.op == "matmul_residual_scaled")
    assert spec.fit_to_blocks(("M", "N", "K"), (16, 4096, 1025), min) == (64, 4096, 1056)
    assert spec.fit_to_blocks(("M", "N", "K"), (16, 4096, 1025)) == (256, 4096, 1152)  # every tile fits
    assert {(128, 4096, 4096), (4096, 11008, 4096)} <= set(residual.SHAPES)
    assert all(m % 64 == 0 and n % 64 == 0 and k % 32 == 0 for m, n, k in residual.SHAPES)


def test_parse_shapes():
    assert bench.parse_shapes("1024x1024x1024, 16x4096x4096", "matmul") == [(1024, 1024, 1024), (16, 4096, 4096)]
    assert bench.parse_shapes("2^20,4096", "elementwise") == [(1 << 20,), (4096,)]
    assert bench.parse_shapes(None, "matmul") is None
    with pytest.raises(bench.BenchError, match="is not MxNxK"):
        bench.parse_shapes("1024x1024", "matmul")
    with pytest.raises(bench.BenchError, match="is not a size"):
        bench.parse_shapes("12ax3", "elementwise")
    with pytest.raises(bench.BenchError, match="empty dimension"):
        bench.parse_shapes("0x4x4", "matmul")


def test_metric_math():
    tflops, gbs = bench.throughput(2.0, 2 * 4096**3, 0)
    assert tflops == pytest.approx(2 * 4096**3 / 2e-3 / 1e12)
    assert gbs is None
    tflops, gbs = bench.throughput(0.5, 0, 3 * 2**20 * 2)
    assert tflops is None and gbs == pytest.approx(3 * 2**21 / 0.5e-3 / 1e9)
    assert bench.geometric_mean([2.0, 0.5]) == pytest.approx(1.0)
    assert bench.shape_label((1 << 20,)) == "2^20" and bench.shape_label((16, 4096, 4096)) == "16x4096x4096"


def _rows():
    rows = [
        bench.Row("matmul", "matmul", "float16", "4096x4096x4096", "tilegen", 0.2, 687.2, None),
        bench.Row("matmul", "matmul", "float16", "4096x4096x4096", "torch", 0.25, 549.8, None),
        bench.Row("add", "elementwise", "float32", "2^20", "tilegen", 0.004, None, 3000.0),
        bench.Row("add", "elementwise", "float32", "2^20", "torch", 0.002, None, 6000.0),
    ]
    limits = {"copy_gbs": 4000.0, "matmul_tflops": {"float16": 700.0}}
    bench.attach_ratios(rows, limits)
    return rows, limits


def test_ratios_and_fractions():
    rows, _ = _rows()
    assert rows[0].speedup_vs_torch == pytest.approx(1.25)
    assert rows[0].fraction_of_limit == pytest.approx(687.2 / 700.0)
    assert rows[1].speedup_vs_torch == pytest.approx(1.0)
    assert rows[2].speedup_vs_torch == pytest.approx(0.5)
    assert rows[2].fraction_of_limit == pytest.approx(0.75)


def test_reports_are_written(tmp_path):
    rows, limits = _rows()
    report = bench.Report({"gpu": "Test GPU", "torch": "x", "triton": "y"}, limits, rows, [
        {"op": "matmul", "tilegen_us": 12.0, "torch_us": 13.0, "direct_launch": True, "fast_path": True},
        {"op": "add", "tilegen_us": 9.0, "torch_us": 7.0, "direct_launch": True}], command="tilegen bench")
    table = bench.format_table(rows)
    assert "1.25x" in table and "0.50x" in table
    summary = bench.summary_lines(rows)
    assert any("worst 0.50x at 2^20" in line for line in summary)
    paths = bench.write_reports(report, tmp_path)
    bench.write_readme(report, tmp_path, table, summary)
    lines = (tmp_path / "results.csv").read_text().splitlines()
    assert lines[0].startswith("op,kind,dtype,shape,provider,ms") and lines[0].endswith("gpu,torch,triton")
    assert len(lines) == 5 and lines[1].endswith("Test GPU,x,y")
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["limits"]["copy_gbs"] == 4000.0 and len(data["rows"]) == 4
    readme = (tmp_path / "README.md").read_text()
    assert "tilegen bench" in readme and "Test GPU" in readme
    # How calls launched; a run from before the compiled call path does not claim either way.
    assert "matmul                   tilegen   12.0 us   torch   13.0 us   (direct launch: yes, compiled call path: yes)" in readme
    assert "add                      tilegen    9.0 us   torch    7.0 us   (direct launch: yes)" in readme
    assert len(paths) == 2


def test_plots_are_written(tmp_path):
    pytest.importorskip("matplotlib")
    rows, limits = _rows()
    paths = bench.write_plots(bench.Report({}, limits, rows), tmp_path)
    assert sorted(p.name for p in paths) == ["add.png", "matmul.png"]
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in paths)


def _stand_in_module():
    """A bench module for an op that doubles its input, with the eager equivalent beside it."""
    from types import SimpleNamespace

    return SimpleNamespace(OP="stand_in", KIND="elementwise", DTYPES=[torch.float32], SHAPES=[(1024,)],
                           make_inputs=lambda shape, dtype: [torch.ones(shape, dtype=dtype)],
                           run_tilegen=lambda inputs: inputs[0] * 2, run_torch=lambda inputs: inputs[0] + inputs[0],
                           flops=lambda shape: 0, bytes_moved=lambda shape, dtype: 3 * 4 * shape[0])


def test_each_point_reports_its_times_as_it_finishes(monkeypatch):
    import triton.testing

    from tilegen.bench import bench_module

    module = _stand_in_module()
    times = iter([0.010, 0.020])  # ms, in the order bench times them: tilegen, then torch
    monkeypatch.setattr(triton.testing, "do_bench", lambda fn, return_mode: next(times))
    lines = []
    rows = bench_module(module, None, ["tilegen", "torch"], lines.append)
    assert [(r.provider, r.ms) for r in rows] == [("tilegen", 0.010), ("torch", 0.020)]
    assert lines == ["stand_in float32 1024: tilegen 10.0 us, torch 20.0 us"]


def test_a_copy_of_the_same_bytes_is_timed_beside_a_memory_bound_op(monkeypatch):
    # The yardstick for a memory-bound op's bandwidth at its own size: a copy of as many bytes,
    # timed the same way (at 2^24 elements a lone copy is itself far from the large-copy rate).
    import triton.testing

    from tilegen.bench import bench_module

    module = _stand_in_module()
    timed = []

    def do_bench(fn, return_mode):
        timed.append(fn())
        return [0.010, 0.020, 0.008][len(timed) - 1]

    monkeypatch.setattr(triton.testing, "do_bench", do_bench)
    rows = bench_module(module, None, ["tilegen", "torch", "copy"], lambda line: None)
    assert [(r.provider, r.ms) for r in rows] == [("tilegen", 0.010), ("torch", 0.020), ("copy", 0.008)]
    copied = timed[2]  # half the op's bytes read, half written
    assert copied.dtype == torch.uint8 and copied.numel() == module.bytes_moved((1024,), torch.float32) // 2
    assert rows[2].gbs == pytest.approx(rows[0].gbs * 0.010 / 0.008)
    bench.attach_ratios(rows, {"copy_gbs": 4000.0})
    assert rows[0].fraction_of_copy == pytest.approx(0.8) and rows[2].speedup_vs_torch is None
    table = bench.format_table(rows)
    assert table.splitlines()[0].split()[-2:] == ["of", "copy"] and table.splitlines()[1].endswith("80.0%")
    assert "stand_in                 float32   of a copy of its bytes: worst 80% at 1024" in bench.summary_lines(rows)
    # A matmul is bound by its products, not its bytes: no copy beside it.
    matmul = _stand_in_module()
    matmul.KIND = "matmul"
    timed.clear()
    assert [r.provider for r in bench_module(matmul, None, ["tilegen", "torch", "copy"], lambda line: None)] == [
        "tilegen", "torch"]


def test_the_summary_holds_memory_bound_ops_to_a_copy_from_2_24_elements():
    rows = []
    for shape, fraction in (("8192x128", 0.5), ("4096x4096", 0.95), ("4096x32768", 0.9)):
        rows.append(bench.Row("softmax", "reduction", "float16", shape, "tilegen", 1.0, None, 100.0))
        rows.append(bench.Row("softmax", "reduction", "float16", shape, "copy", fraction, None, 100.0 / fraction))
    bench.attach_ratios(rows, {})
    assert bench.shape_elements("2^24") == bench.shape_elements("4096x4096") == 1 << 24
    assert ("softmax                  float16   of a copy of its bytes: worst 50% at 8192x128; from 2^24 "
            "elements worst 90% at 4096x32768") in bench.summary_lines(rows)


def test_no_gpu_exits_2_with_one_line(cli, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.chdir(REPO)
    result = cli("bench")
    assert result.exit_code == 2
    assert result.output.strip().count("\n") == 0
    assert "no CUDA GPU found" in result.output


@pytest.mark.parametrize("op", sorted(p.stem[6:] for p in (REPO / "generated" / "bench").glob("bench_*.py")))
def test_eager_equivalent_agrees_with_the_kernel(op, monkeypatch):
    """The PyTorch side of each benchmark computes the same function (checked in the interpreter)."""
    monkeypatch.syspath_prepend(str(REPO))
    module = importlib.import_module(f"generated.bench.bench_{op}")
    shape = module.SMALL_SHAPE
    device = "cuda" if torch.cuda.is_available() else "cpu"
    inputs = module.make_inputs(shape, torch.float32 if torch.float32 in module.DTYPES else module.DTYPES[0],
                                device=device)
    if inputs[0].dtype == torch.bfloat16 and device == "cpu" and module.KIND == "matmul":
        pytest.skip("Triton's interpreter cannot multiply bfloat16 matrices")
    if inputs[0].dtype.itemsize == 1 and inputs[0].is_floating_point() and device == "cpu":
        pytest.skip("Triton's interpreter has no fp8 dot (and PyTorch's fp8 matmul, torch._scaled_mm, needs a GPU)")
    got, want = module.run_tilegen(inputs), module.run_torch(inputs)
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        assert g.dtype == w.dtype  # the same output written: an int op's eager side in ints too
        torch.testing.assert_close(g.float(), w.float(), atol=2e-2, rtol=2e-2)
    assert module.bytes_moved(shape, inputs[0].dtype) > 0


SCALAR_MATH = """\
op: scalar_math
kind: elementwise
inputs:
  x: {dtype: [float32]}
scalars:
  eps: {type: float, default: 0.25}
  k: {type: int, default: -3}
outputs:
  y: {dtype: x}
compute:
  y: maximum(x, sqrt(eps)) * exp(eps) + where(eps > 1.0, x, 2.0) + abs(k)
tiles:
  N: {block: BLOCK, sizes: [256]}
"""


INT_MATH = """\
op: int_math
kind: elementwise
inputs:
  a: {dtype: [int32, int64]}
scalars:
  k: {type: int, default: -3}
outputs:
  y: {dtype: a}
compute:
  y: a * 2 + maximum(k, 1) + abs(k)
tiles:
  N: {block: BLOCK, sizes: [256]}
"""


def test_the_eager_baseline_of_int_math_stays_int(tmp_path):
    # Int literals were written as floats (a * 2.0): the eager side computed an int op in float32.
    from tests.conftest import built_package

    with built_package(tmp_path, "int_ops", {"int_math.yaml": INT_MATH}):
        module = importlib.import_module("int_ops.bench.bench_int_math")
        device = "cuda" if torch.cuda.is_available() else "cpu"
        for dtype in (torch.int32, torch.int64):
            inputs = module.make_inputs(module.SMALL_SHAPE, dtype, device=device)
            got, want = module.run_tilegen(inputs), module.run_torch(inputs)
            assert want.dtype == dtype and torch.equal(got, want) and torch.equal(want, inputs[0] * 2 + 4)


def test_the_eager_baseline_computes_functions_of_scalars_alone(tmp_path):
    # torch.sqrt(eps) of a Python number and torch.where(eps > 1.0, ...) of a Python bool raise
    # TypeError: the eager side of a spec writing them failed before it timed anything.
    from tests.conftest import built_package

    with built_package(tmp_path, "scalar_ops", {"scalar_math.yaml": SCALAR_MATH}):
        module = importlib.import_module("scalar_ops.bench.bench_scalar_math")
        device = "cuda" if torch.cuda.is_available() else "cpu"
        inputs = module.make_inputs(module.SMALL_SHAPE, torch.float32, device=device)
        got, want = module.run_tilegen(inputs), module.run_torch(inputs)
        x = inputs[0]
        torch.testing.assert_close(want, torch.clamp(x, min=0.5) * 1.2840254166877414 + 2.0 + 3.0)
        torch.testing.assert_close(got, want)


def test_the_eager_baseline_computes_no_step_its_outputs_do_not_read():
    """A reduction whose reference is PyTorch's own op (torch.softmax) times that op alone: the
    spec's steps it replaces (the max, the exp) would be eager work charged for nothing."""
    from tilegen.build import load_specs
    from tilegen.testgen import pytorch_lines

    specs = {item.spec.op: item.spec for item in load_specs([REPO / "specs"], REPO)}
    assert pytorch_lines(specs["softmax"], "eager") == ["y = torch.softmax(x, -1)"]
    # Steps an output reads stay (rms_norm's rstd is its step r).
    assert any(line.startswith("r = ") for line in pytorch_lines(specs["rms_norm"], "eager"))


def test_the_eager_baseline_is_what_a_pytorch_user_writes_for_the_outputs_a_model_reads(monkeypatch):
    """A reduction's per-row statistics (layer_norm's mean and rstd) are left out of the compared
    outputs: F.layer_norm computes them inside its kernel, and a composition beside it charged
    eager five more kernels (and a training step's loss a gradient through them). A reference
    that repeats a step reads it (add_rms_norm's sum once), and a norm's input is computed once
    for its shape."""
    from tilegen.benchgen import compared_outputs
    from tilegen.build import load_specs
    from tilegen.testgen import pytorch_lines

    specs = {item.spec.op: item.spec for item in load_specs([REPO / "specs"], REPO)}
    assert [t.name for t in compared_outputs(specs["layer_norm"])] == ["y"]
    assert [t.name for t in compared_outputs(specs["rms_norm"])] == ["y"]
    assert [t.name for t in compared_outputs(specs["add_rms_norm"])] == ["h", "y"]
    assert [t.name for t in compared_outputs(specs["matmul_relu"])] == ["c"]
    layer_norm = pytorch_lines(specs["layer_norm"], "eager", outputs=compared_outputs(specs["layer_norm"]))
    assert layer_norm == ["y = torch.nn.functional.layer_norm(x, x.shape[-1:], w, b, float(eps))"]
    add_rms_norm = pytorch_lines(specs["add_rms_norm"], "eager", outputs=compared_outputs(specs["add_rms_norm"]))
    assert sum(line.count("x + residual") for line in add_rms_norm) == 1, add_rms_norm
    assert "y = torch.nn.functional.rms_norm(s, s.shape[-1:], w, float(eps))" in add_rms_norm
    # The generated benchmark compares those outputs: its training step's loss reads y alone.
    monkeypatch.syspath_prepend(str(REPO))
    module = importlib.import_module("generated.bench.bench_layer_norm")
    inputs = module.make_inputs((4, 64), torch.float32, device="cuda" if torch.cuda.is_available() else "cpu")
    assert isinstance(module.run_torch(inputs), torch.Tensor) and isinstance(module.run_tilegen(inputs), torch.Tensor)


def test_cold_start_rows_reach_the_readme(tmp_path):
    from tilegen import coldstart

    rows, limits = _rows()
    cold = [dict(op="matmul", mode="table", shape=[1024, 1024, 1024], dtype="float16", import_s=3.1,
                 first_call_s=1.404, second_call_s=0.00015, config=None),
            dict(op="matmul", mode="autotune", error="RuntimeError: boom")]
    report = bench.Report({"gpu": "Test GPU"}, limits, rows, cold_start=cold, command="tilegen bench")
    bench.write_readme(report, tmp_path, bench.format_table(rows), bench.summary_lines(rows))
    readme = (tmp_path / "README.md").read_text()
    section = readme.index("## Time to first result")
    assert section < readme.index("## All results")
    assert "matmul                   table              first call     1404 ms   second   0.15 ms" in readme
    assert "(1024x1024x1024 float16, import 3.1 s)" in readme
    assert "autotune           failed: RuntimeError: boom" in readme
    assert coldstart.MODES == ("table", "table, warm cache", "autotune")


def test_unknown_cold_start_op_is_refused_before_timing(cli, monkeypatch):
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(bench, "environment", lambda: pytest.fail("timed before checking the op names"))
    result = cli("bench", "add", "--cold-start", "nope")
    assert result.exit_code == 2 and "unknown op 'nope'" in result.output


def test_a_dtype_no_op_benchmarks_is_refused_before_timing(cli, monkeypatch):
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(bench, "environment", lambda: pytest.fail("timed before checking the dtypes"))
    result = cli("bench", "matmul", "add", "--dtype", "float16", "--dtype", "int8")
    assert result.exit_code == 2 and result.output.strip().count("\n") == 0
    assert "--dtype 'int8' is not a dtype these ops benchmark (one of: bfloat16, float16, float32)" in result.output


def test_dtype_reaches_every_op_the_run_times(monkeypatch):
    # What run hands the timing of each op (forward and training step), with no GPU: the timing
    # and what needs a GPU stood in.
    from tilegen import training_bench

    monkeypatch.chdir(REPO)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    limits, timed = [], []
    monkeypatch.setattr(bench, "environment", lambda: {})
    monkeypatch.setattr(bench, "settle_call_path", lambda training=False: None)
    monkeypatch.setattr(bench, "measure_limits", lambda names: limits.append(names) or {})
    monkeypatch.setattr(bench, "host_overhead", lambda module: {})
    monkeypatch.setattr(bench, "bench_module", lambda module, *args: timed.append((module.OP, args[-1])) or [])
    monkeypatch.setattr(training_bench, "bench_module", lambda module, *args: timed.append((module.OP, args[-1])) or [])
    for backward in (False, True):
        timed.clear()
        bench.run(["add", "matmul_relu"], "generated", None, None, False, "tilegen bench", backward=backward,
                  dtypes=["bfloat16"])
        assert timed == [("add", [torch.bfloat16]), ("matmul_relu", [torch.bfloat16])]
    assert limits[-1] == ["bfloat16"]  # the matmul peak measured for the dtypes timed only


def test_dtype_picks_the_dtypes_each_op_times():
    from generated.bench import bench_matmul_relu

    from generated.bench import bench_rms_norm

    assert module_dtypes(bench_matmul_relu, ["bfloat16"]) == [torch.bfloat16]
    assert module_dtypes(bench_matmul_relu, []) == [torch.float16, torch.bfloat16]
    # A float32 matmul (against SGEMM) is timed where asked for, never by default.
    assert module_dtypes(bench_matmul_relu, ["float32"]) == [torch.float32]
    assert module_dtypes(bench_matmul_relu, ["float16", "float32"]) == [torch.float16, torch.float32]
    assert module_dtypes(bench_rms_norm, ["float64"]) == []  # (another op's dtype: this op times none)


def test_tune_refuses_bad_arguments_in_one_line(cli, monkeypatch):
    monkeypatch.chdir(REPO)
    result = cli("tune", "matmul", "--jobs", "0")  # flags first, as bench: no GPU needed to say so
    assert result.exit_code == 2 and "--jobs must be at least 1, got 0" in result.output
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = cli("tune", "nope")  # then the GPU, before the ops, as bench does
    assert result.exit_code == 2 and result.output.strip() == ("tilegen tune: no CUDA GPU found; `tilegen tune` "
                                                               "measures compiled kernels and needs one")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # what a GPU machine checks next
    result = cli("tune", "matmul", "--dtype", "float8")
    assert result.exit_code == 2 and result.output.strip().count("\n") == 0
    assert "--dtype 'float8' is not a dtype these ops benchmark (one of: bfloat16, float16, float32)" in result.output
    result = cli("tune", "nope")
    assert result.exit_code == 2 and "unknown op 'nope'" in result.output


def test_torch_compile_times_get_their_own_column_and_summary():
    rows, limits = _rows()
    rows.append(bench.Row("matmul", "matmul", "float16", "4096x4096x4096", "torch.compile", 0.3, 458.1, None))
    bench.attach_ratios(rows, limits)
    table = bench.format_table(rows).splitlines()
    assert table[0].endswith("compile ms vs compile")
    assert table[1].endswith("0.3000      1.50x")  # 0.3 ms compiled against tilegen's 0.2 ms
    assert table[2].endswith("%")  # add has no compiled time, so no compile columns
    summary = bench.summary_lines(rows)
    assert "matmul                   float16   vs torch.compile: geomean 1.50x, worst 1.50x at 4096x4096x4096" in summary
    assert not any("add" in line and "torch.compile" in line for line in summary)


def test_tilegen_inside_torch_compile_gets_a_column_and_a_summary_line():
    rows, limits = _rows()
    rows.append(bench.Row("matmul", "matmul", "float16", "4096x4096x4096", "torch.compile", 0.3, 458.1, None))
    rows.append(bench.Row("matmul", "matmul", "float16", "4096x4096x4096", "tilegen.compile", 0.21, 654.5, None))
    bench.attach_ratios(rows, limits)
    table = bench.format_table(rows).splitlines()
    assert table[0].endswith("in compile ms") and table[1].endswith("0.2100")
    summary = bench.summary_lines(rows)
    # 0.21 ms composed into a compiled function, against 0.2 ms called eagerly.
    assert ("matmul                   float16   inside torch.compile: geomean 1.05x its eager time, worst 1.05x "
            "at 4096x4096x4096") in summary


def test_render_writes_the_readme_again_from_results_json(cli, tmp_path):
    rows, limits = _rows()
    report = bench.Report({"gpu": "Test GPU", "torch": "x", "triton": "y"}, limits, rows,
                          [{"op": "matmul", "tilegen_us": 12.0, "torch_us": 13.0}], command="tilegen bench --out x")
    bench.write_reports(report, tmp_path)
    result = cli("bench", "--render", str(tmp_path))
    assert result.exit_code == 0, result.output
    readme = (tmp_path / "README.md").read_text()
    assert "tilegen bench --out x" in readme and "1.25x" in readme and "Test GPU" in readme
    assert bench.load_report(tmp_path) == report

    (tmp_path / "results.json").write_text("{}")
    result = cli("bench", "--render", str(tmp_path))
    assert result.exit_code != 0 and "results.json: not a results file written by `tilegen bench`" in result.output
    assert len(result.output.strip().splitlines()) == 1
    result = cli("bench", "matmul", "--render", str(tmp_path))
    assert result.exit_code != 0 and "--render re-renders an earlier run" in result.output


def test_agreement_check_names_the_point_and_takes_a_tolerance():
    want = torch.ones(4, dtype=torch.float16)
    bench.check_agreement(want + 0.01, want, "op 4")  # within 2e-2
    with pytest.raises(AssertionError, match="op 4: tilegen and PyTorch disagree"):
        bench.check_agreement(want + 0.04, want, "op 4")
    bench.check_agreement((want + 0.04,), (want,), "op 4", tolerance=5e-2)  # tune's looser bound
    with pytest.raises(AssertionError):
        bench.check_agreement(torch.ones(4) + 0.01, torch.ones(4), "op 4")  # 1e-3 for float32
    # The tolerance follows each output's dtype, not the operands' (an fp8 matmul stores bfloat16).
    bench.check_agreement((torch.ones(4, dtype=torch.bfloat16) + 0.01, torch.ones(4) + 1e-4),
                          (torch.ones(4, dtype=torch.bfloat16), torch.ones(4)), "op 4")
    # A float32 output (a norm's rstd) against an eager equivalent computed in bfloat16 is held to
    # bfloat16's precision, which alone moves it by up to 0.5%; against a float32 one, to 1e-3.
    bench.check_agreement(torch.ones(4) + 0.005, torch.ones(4, dtype=torch.bfloat16), "op 4")
    with pytest.raises(AssertionError):
        bench.check_agreement(torch.ones(4) + 0.005, torch.ones(4), "op 4")


def test_rounds_interleave_the_providers_and_keep_the_median(monkeypatch):
    import triton.testing

    from tilegen.bench import bench_module

    module = _stand_in_module()
    # Timed in turns (tilegen, torch, tilegen, ...): tilegen 30, 10, 11 us; torch 20, 21, 90 us.
    times = iter([0.030, 0.020, 0.010, 0.021, 0.011, 0.090])
    monkeypatch.setattr(triton.testing, "do_bench", lambda fn, return_mode: next(times))
    lines = []
    rows = bench_module(module, None, ["tilegen", "torch"], lines.append, rounds=3)
    assert [(r.provider, r.ms) for r in rows] == [("tilegen", 0.011), ("torch", 0.021)]
    assert lines == ["stand_in float32 1024: tilegen 11.0 us, torch 21.0 us (medians of 3 rounds)"]


def test_the_cudagraph_timer_times_each_point_from_a_graph_and_the_readme_says_so(monkeypatch, tmp_path):
    import triton.testing

    from tilegen.bench import Report, bench_module, write_readme

    module = _stand_in_module()
    times = iter([0.0011, 0.0012])
    monkeypatch.setattr(triton.testing, "do_bench", lambda fn, return_mode: pytest.fail("do_bench used"))
    monkeypatch.setattr(triton.testing, "do_bench_cudagraph", lambda fn, return_mode: next(times))
    rows = bench_module(module, None, ["tilegen", "torch"], lambda line: None, timer="cudagraph")
    assert [(r.provider, r.ms) for r in rows] == [("tilegen", 0.0011), ("torch", 0.0012)]
    report = Report({"gpu": "G"}, {}, rows=rows, command="tilegen bench --timer cudagraph", timer="cudagraph")
    text = write_readme(report, tmp_path, "table", []).read_text()
    assert "Times are medians of triton.testing.do_bench_cudagraph (back-to-back calls" in text
    assert "Times are medians of triton.testing.do_bench (each call timed alone" in \
        write_readme(Report({}, {}, rows=rows), tmp_path, "table", []).read_text()


@pytest.mark.parametrize("args, message", [
    (("--timer", "events"), "tilegen bench: --timer must be one of do_bench, cudagraph, loop, got 'events'"),
    (("--timer", "cudagraph", "--compile"), "tilegen bench: --timer cudagraph does not time torch.compile "
                                            "(its kernels are captured by its own CUDA graphs); time --compile with do_bench"),
])
def test_timer_refused_in_one_line(cli, monkeypatch, args, message):
    monkeypatch.chdir(REPO)
    result = cli("bench", "add", *args)
    assert result.exit_code == 2 and result.output.strip() == message


def test_rounds_below_one_are_refused_in_one_line(cli, monkeypatch):
    monkeypatch.chdir(REPO)
    result = cli("bench", "matmul", "--rounds", "0")
    assert result.exit_code == 2 and result.output.strip() == "tilegen bench: --rounds must be at least 1, got 0"


def test_host_overhead_takes_turns_and_reports_each_sides_median_batch(monkeypatch):
    import time as time_module

    from tilegen import bench

    module = _stand_in_module()
    module.SMALL_SHAPE, module.__name__ = (8,), "generated.bench.bench_stand_in"
    order = []
    module.run_tilegen = lambda inputs: order.append("tilegen")
    module.run_torch = lambda inputs: order.append("torch")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    # perf_counter as each batch reads it (start, end): tilegen batches of 3, 1 and 2 s, torch
    # batches of 5, 4 and 60 s (one slow moment).
    clock = iter([0, 3, 10, 15, 20, 21, 30, 34, 40, 42, 50, 110])
    monkeypatch.setattr(time_module, "perf_counter", lambda: next(clock))
    result = bench.host_overhead(module, calls=2, batches=3)
    warm = 2 * 200
    assert order[:warm] == ["tilegen"] * 200 + ["torch"] * 200
    assert order[warm:] == (["tilegen"] * 2 + ["torch"] * 2) * 3
    assert result["tilegen_us"] == 2 / 2 * 1e6 and result["torch_us"] == 5 / 2 * 1e6
    assert (result["batches"], result["calls"]) == (3, 2)
    assert bench._host_method([result]) == "Each the median of 3 batches of 2 calls, tilegen and torch taking turns."
    assert bench._host_method([{"op": "old", "tilegen_us": 1.0, "torch_us": 1.0}]) == "Each one loop of calls per provider."


# ---- training steps (--backward) ------------------------------------------------------------

from tilegen import training_bench  # noqa: E402


def _training_rows():
    def row(provider, ms, peak):
        made = bench.Row("scaled_silu_mul+bwd", "elementwise", "float16", "2^24", provider, ms, None, 1000.0)
        made.peak_mb = peak
        return made
    return [row("tilegen", 0.2, 96.0), row("torch", 0.3, 128.0), row("torch.compile", 0.25, 112.0),
            row("torch.compile.max-autotune", 0.24, 112.0)]


def test_training_steps_get_memory_and_max_autotune_columns_and_summary_lines():
    rows = _training_rows()
    bench.attach_ratios(rows, {"copy_gbs": 4000.0})
    table = bench.format_table(rows).splitlines()
    assert table[0].endswith("max-autotune ms  vs it tilegen MiB torch MiB")
    assert table[1].endswith("0.2400  1.20x        96.0     128.0")
    summary = bench.summary_lines(rows)
    assert any("vs torch " in line and "geomean 1.50x" in line for line in summary)
    assert any("vs torch.compile.max-autotune" in line and "geomean 1.20x" in line for line in summary)
    assert any("peak memory / eager autograd's: worst 0.75x at 2^24" in line for line in summary)
    # A training step's rows do not count in the forward summary's lines.
    assert not any(line.startswith("scaled_silu_mul+bwd") and "geomean speedup" in line for line in summary)


def test_training_gradients_may_differ_only_at_a_few_kinks():
    want = [torch.linspace(-3, 3, 1000)]
    kinked = want[0].clone()
    kinked[:5] = 0  # five elements took the other side of a clamp
    training_bench.gradients_agree([kinked], want, 1e-3, "fma_clamp+bwd")
    wrong = want[0] * 1.1
    with pytest.raises(bench.BenchError, match=r"fma_clamp\+bwd: gradient 0 disagrees with eager autograd's in"):
        training_bench.gradients_agree([wrong], want, 1e-3, "fma_clamp+bwd")


def test_training_step_work_counts_three_products_or_both_passes_bytes():
    class Matmul:
        KIND = "matmul"

        @staticmethod
        def flops(shape):
            return 2 * shape[0] * shape[1] * shape[2]

    class Elementwise:
        KIND = "elementwise"

        @staticmethod
        def input_specs(shape, dtype):
            return [(shape, dtype), (shape, dtype)]

        @staticmethod
        def output_specs(shape, dtype):
            return [(shape, dtype)]

    assert training_bench.step_work(Matmul, (4, 8, 16), torch.float16) == (3 * 2 * 4 * 8 * 16, 0)
    # Forward: two inputs read, one output written; backward: both inputs and the output's
    # gradient read, both inputs' gradients written.
    assert training_bench.step_work(Elementwise, (1024,), torch.float16) == (0, (3 * 2 + 2 * 1) * 1024 * 2)


def test_training_step_bytes_are_what_the_derived_backward_moves():
    import importlib

    def work(op, shape):
        return training_bench.step_work(importlib.import_module(f"generated.bench.bench_{op}"), shape, torch.float16)

    n = 4096
    # add: both gradients are the incoming one passed on, no kernel: the forward's traffic alone.
    assert work("add", (n,)) == (0, 3 * n * 2)
    # scaled_silu_mul: the backward kernel reads both saved inputs and the incoming gradient and
    # writes both inputs' gradients.
    assert work("scaled_silu_mul", (n,)) == (0, 3 * n * 2 + 5 * n * 2)
    # softmax: reads the saved input and the incoming gradient, writes the input's gradient.
    assert work("softmax", (8, 512)) == (0, 2 * 8 * 512 * 2 + 3 * 8 * 512 * 2)


@pytest.mark.parametrize("args", [("--rounds", "3"), ("--timer", "cudagraph")])
def test_backward_takes_no_rounds_or_cudagraph_timer(cli, monkeypatch, args):
    monkeypatch.chdir(REPO)
    result = cli("bench", "add", "--backward", *args)
    assert result.exit_code == 2
    assert result.output.strip() == ("tilegen bench: --backward times each point once, with do_bench or the loop "
                                     "timer; it takes no --rounds or --timer cudagraph")


def test_the_loop_timer_times_rounds_of_back_to_back_calls_between_synchronizes():
    # A stand-in clock: each call takes 0.2 ms of it, each synchronize 0.05 ms (a GPU draining).
    now, log = [0.0], []

    def call():
        now[0] += 0.2e-3
        log.append("call")

    def synchronize():
        now[0] += 0.05e-3
        log.append("sync")

    ms = bench.loop_ms(call, synchronize, clock=lambda: now[0], rounds=3)
    calls = int(bench.LOOP_ROUND_MS / ((3 * 0.2 + 0.05) / 3))  # from the estimate of the three timed calls
    # Each round: a synchronize, `calls` calls, a synchronize; the round's end sync is in its time.
    assert log.count("call") == 1 + 3 + 3 * calls
    assert ms == pytest.approx((calls * 0.2 + 0.05) / calls)
    assert log[-calls - 2:] == ["sync", *["call"] * calls, "sync"]


def test_training_steps_are_timed_once_the_autograd_node_is_built(monkeypatch, capsys):
    # Until the C++ node is built (in the background, from the first training call), training calls
    # record torch.autograd.Function's node: the first op's steps would be timed on it.
    from tilegen import measure
    from tilegen.runtime import autograd, callpath

    waited = []
    monkeypatch.setattr(callpath, "load", lambda wait=False: object())
    monkeypatch.setattr(autograd, "native_module", lambda wait=False: waited.append(wait))
    measure.settle_call_path()
    assert waited == []  # a forward bench needs no node
    measure.settle_call_path(training=True)
    assert waited == [True]
    assert "no C++ autograd node here" in capsys.readouterr().err  # (the stand-in built none)
