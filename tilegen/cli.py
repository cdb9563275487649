"""The `tilegen` command line. Exit codes: 0 success, 1 checks or tests failed, 2 bad input."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import traceback
from pathlib import Path

import click

from . import __version__
from .build import (BuildError, compare_package, display_path, load_specs, render_package, spec_summary,
                    write_package)
from .errors import SpecFailure
from .render import Renderer, TemplateError
from .scaffold import SCAFFOLD_KINDS, scaffold_spec
from .tables import SCOPES, TABLE_DIR

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
DEFAULT_SPECS = "specs"
DEFAULT_OUT = "generated"


def _fail(message: str, code: int = EXIT_BAD_INPUT) -> None:
    click.echo(message, err=True)
    sys.exit(code)


def _guarded(debug: bool, action, writes: bool = False):
    """Run `action`, turning expected failures into one-line messages (a traceback with --debug).
    `writes`: the command would have written files, so a spec failure says nothing was."""
    try:
        return action()
    except SpecFailure as exc:
        for line in exc.log.lines():
            click.echo(line, err=True)
        count = len(exc.log.lines())
        tail = "; nothing was written" if writes else ""
        click.echo(f"tilegen: {count} error{'s' if count != 1 else ''}{tail}", err=True)
        sys.exit(EXIT_BAD_INPUT)
    except (BuildError, TemplateError) as exc:
        if debug:
            traceback.print_exc()
        _fail(f"tilegen: {exc}")
    except OSError as exc:
        if debug:
            traceback.print_exc()
        _fail(f"tilegen: {exc.filename or ''}: {exc.strerror or exc}")


def _spec_paths(specs: tuple[str, ...]) -> list[Path]:
    return [Path(s) for s in (specs or (DEFAULT_SPECS,))]


def _root_for(out: Path) -> Path:
    """The project root: the output folder's parent, so headers read specs/<op>.yaml from anywhere."""
    return out.resolve().parent


# Click 8.2+ raises this (a UsageError) for a group called with no command; older click prints help.
_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())


class _OneLineUsageErrors(click.Group):
    """A usage mistake (an unknown option, a value of the wrong type or outside its choices) ends
    in one line naming the command, exit status 2, as every other bad input does; click's own
    form adds a usage line and a hint around it."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            result = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except _NO_ARGS_IS_HELP as exc:  # a bare `tilegen`: the help, as click gives it
            exc.show()
            sys.exit(exc.exit_code)
        except click.UsageError as exc:
            command = exc.ctx.command_path if exc.ctx is not None else "tilegen"
            _fail(f"{command}: {exc.format_message()}", exc.exit_code)
        except click.ClickException as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except click.Abort:
            _fail("Aborted!", EXIT_FAILED)
        sys.exit(result if isinstance(result, int) else 0)


@click.group(cls=_OneLineUsageErrors, context_settings={"help_option_names": ["-h", "--help"]})
# The version comes from the package itself, so --version works from a checkout on PYTHONPATH too
# (click would otherwise look for installed metadata).
@click.version_option(__version__, prog_name="tilegen")
def main() -> None:
    """tilegen: YAML op specs in, tested Triton kernels out.

    \b
    Example:
      tilegen build specs/ && python -c "from generated import matmul_relu"
    """


@main.command()
@click.argument("specs", nargs=-1)
@click.option("--package", "-o", "--out", "out", default=DEFAULT_OUT, show_default=True,
              help="Folder of the generated package (-o and --out: shorter spellings).")
@click.option("--check", is_flag=True, help="Write nothing; exit 1 with a diff if the output is stale.")
@click.option("--force", is_flag=True, help="Build even if the output holds files tilegen did not write (they are kept).")
@click.option("--debug", is_flag=True, help="Show tracebacks for internal errors.")
def build(specs, out, check, force, debug):
    """Validate SPECS (folders or files; default specs/) and render the package into OUT.

    \b
    Examples:
      tilegen build specs/
      tilegen build specs/ --package generated --check   # CI: fail if generated/ is stale
    """
    out_path = Path(out)
    sources = _guarded(debug, lambda: load_specs(_spec_paths(specs), _root_for(out_path)), writes=not check)
    files = _guarded(debug, lambda: render_package(sources, out_path, _root_for(out_path)), writes=not check)
    if check:
        stale = compare_package(files, out_path)
        if stale.clean:
            click.echo(f"{out}: up to date ({len(files)} files, {len(sources)} ops)")
            return
        if stale.diff:
            click.echo(stale.diff, nl=False)
        for label, names in (("missing", stale.missing), ("changed", stale.changed), ("not from specs", stale.extra)):
            for name in names:
                click.echo(f"{out}/{name}: {label}", err=True)
        _fail(f"tilegen: {out} is stale; run `tilegen build` and commit the result", EXIT_FAILED)
    before = compare_package(files, out_path, diff_text=False) if out_path.is_dir() else None
    if before is not None and before.clean:
        click.echo(f"{out}: up to date ({len(files)} files, {len(sources)} ops)")
        return
    _guarded(debug, lambda: write_package(files, out_path, force=force), writes=True)
    ops = ", ".join(s.spec.op for s in sources)
    if before is None:
        click.echo(f"{out}: wrote {len(files)} files for {len(sources)} ops ({ops})")
        return
    changes = [(label, names) for label, names in (("new", before.missing), ("changed", before.changed),
                                                   ("removed", before.extra)) if names]
    said = "; ".join(f"{label}: {', '.join(names[:6])}{f' and {len(names) - 6} more' if len(names) > 6 else ''}"
                     for label, names in changes)
    # (Removed files are none of the package's files: counted apart, not as some of them updated.)
    removed = f", removed {len(before.extra)}" if before.extra else ""
    click.echo(f"{out}: updated {len(before.missing) + len(before.changed)} of {len(files)} files{removed} for "
               f"{len(sources)} ops ({said})")


@main.command()
@click.argument("specs", nargs=-1)
@click.option("--debug", is_flag=True, help="Show tracebacks for internal errors.")
def check(specs, debug):
    """Validate SPECS without writing anything.

    \b
    Example:
      tilegen check specs/ specs/extra.yaml
    """
    sources = _guarded(debug, lambda: load_specs(_spec_paths(specs)))
    click.echo(f"{len(sources)} spec{'s' if len(sources) != 1 else ''} OK")


@main.command()
@click.argument("spec")
@click.option("--tests", is_flag=True, help="Print the op's generated tests instead of its module.")
@click.option("--specs", "specs_dir", default=DEFAULT_SPECS, show_default=True,
              help="Folder to look for SPEC in when SPEC names an op.")
@click.option("--debug", is_flag=True, help="Show tracebacks for internal errors.")
def render(spec, tests, specs_dir, debug):
    """Print the module generated for one SPEC: a spec file, or an op name found in --specs.

    \b
    Examples:
      tilegen render specs/matmul_relu.yaml | less
      tilegen render matmul_relu --tests
    """
    path = Path(spec)
    if not path.exists() and "/" not in spec and not spec.endswith((".yaml", ".yml")):
        path = Path(specs_dir) / f"{spec}.yaml"  # an op name
        if not path.exists():
            _fail(f"tilegen render: no spec for op {spec!r} in {specs_dir}/ (give a spec file, or --specs DIR)")
    sources = _guarded(debug, lambda: load_specs([path]))
    if len(sources) > 1:
        _fail(f"tilegen render: {spec} holds {len(sources)} specs; name one ({sources[0].display}) or an op "
              f"({sources[0].spec.op})")
    renderer = Renderer(package=DEFAULT_OUT)
    text = _guarded(debug, lambda: renderer.op_test(sources[0]) if tests else renderer.op_module(sources[0]))
    click.echo(text, nl=False)


@main.command(name="list")
@click.argument("specs", nargs=-1)
@click.option("--debug", is_flag=True, help="Show tracebacks for internal errors.")
def list_ops(specs, debug):
    """List the ops defined by SPECS (default specs/).

    \b
    Example:
      tilegen list
    """
    sources = _guarded(debug, lambda: load_specs(_spec_paths(specs)))
    rows = [(*spec_summary(source.spec), source.display) for source in sorted(sources, key=lambda s: s.spec.op)]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:  # columns as wide as their widest entry, so long names keep them in line
        click.echo("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[3])


@main.command(context_settings={"ignore_unknown_options": True})
@click.argument("ops", nargs=-1)
@click.option("--package", "-o", "--out", "out", default=DEFAULT_OUT, show_default=True,
              help="Folder of the generated package (-o and --out: older spellings).")
@click.option("--pytest-args", default="", help="Extra arguments for pytest, as one string split as a shell would (-k 'a or b').")
def test(ops, out, pytest_args):
    """Run the generated tests of OPS (default: every op).

    Without a CUDA GPU the kernels run in Triton's interpreter (TRITON_INTERPRET=1) on CPU tensors.

    \b
    Examples:
      tilegen test
      tilegen test add matmul_relu --pytest-args "-x -q"
      tilegen test softmax --pytest-args "-q -k 'reference or gradient'"
    """
    tests_dir = (Path(out) / "tests").resolve()  # pytest runs from the package's parent folder
    if not tests_dir.is_dir():
        _fail(f"tilegen: {tests_dir}: no generated tests; run `tilegen build` first")
    targets = []
    for op in ops:
        path = tests_dir / f"test_{op}.py"
        if not path.is_file():
            known = sorted(p.stem[5:] for p in tests_dir.glob("test_*.py"))
            _fail(f"tilegen: unknown op {op!r} (generated ops: {', '.join(known) or 'none'})")
        targets.append(str(path))
    env = dict(os.environ)
    if not _cuda_available():
        # No GPU: the generated tests run in Triton's interpreter on CPU tensors.
        env.setdefault("TRITON_INTERPRET", "1")
    command = [sys.executable, "-m", "pytest", *(targets or [str(tests_dir)]), *shlex.split(pytest_args)]
    code = subprocess.call(command, env=env, cwd=str(Path(out).resolve().parent))
    sys.exit(0 if code == 0 else EXIT_FAILED if code in (1, 5) else EXIT_BAD_INPUT)


@main.command()
@click.argument("ops", nargs=-1)
@click.option("-o", "--out", "out_dir", default="bench/out", show_default=True, help="Folder for the table, CSV, JSON and plots.")
@click.option("--package", default=DEFAULT_OUT, show_default=True, help="Folder of the generated package.")
@click.option("--shapes", default=None, help="Shapes instead of the defaults: 4096x4096x4096,16x4096x4096 (matmul: MxNxK; batched matmul: BxMxNxK) or 2^20,4096.")
@click.option("--compile", "compile_too", is_flag=True, help="Also time torch.compile (max-autotune, no CUDA graphs).")
@click.option("--dtype", "dtypes", multiple=True, help="Time these dtypes only (repeatable); default: every dtype "
              "each op benchmarks.")
@click.option("--cold-start", "cold_start", default="", metavar="OPS",
              help="Also time the first call of these ops (comma-separated) in fresh processes: with the "
                   "tuned table (fresh and warm compile cache) and with runtime autotuning.")
@click.option("--rounds", default=1, show_default=True, type=int,
              help="Time each point this many times, the providers taking turns, and report the medians.")
@click.option("--timer", default="do_bench", show_default=True, metavar="do_bench|cudagraph|loop",
              help="do_bench: each call alone, L2 emptied, launch latency included. cudagraph: GPU time per "
                   "call of back-to-back calls replayed from a CUDA graph (no host time, caches warm), which "
                   "tells apart kernels of a few microseconds; not with --compile or --backward. loop: wall "
                   "time per call of back-to-back calls (host and GPU, caches warm): what a training loop "
                   "waits for, where a step's host time exceeds its kernels'.")
@click.option("--backward", is_flag=True,
              help="Time a training step (forward, then the gradients of every input) against eager autograd "
                   "and, with --compile, torch.compile in its default mode and max-autotune; records peak memory.")
@click.option("--render", "render_dir", default=None, metavar="DIR",
              help="Time nothing: write README.md and the plots of an earlier run again from DIR/results.json "
                   "(no GPU needed).")
def bench(ops, out_dir, package, shapes, compile_too, dtypes, cold_start, rounds, timer, backward, render_dir):
    """Time OPS (default: every op) against PyTorch on a CUDA GPU.

    Prints a table, writes results.csv, results.json, README.md and one PNG plot per op to OUT.

    \b
    Examples:
      tilegen bench --out bench/results/h200
      tilegen bench matmul_relu --shapes 4096x4096x4096 --compile
      tilegen bench matmul add --cold-start matmul,add
      tilegen bench matmul --rounds 5                 # medians of 5 interleaved timings
      tilegen bench add --timer cudagraph            # GPU time per call, no launch latency
      tilegen bench add --backward --timer loop      # training steps back to back, host time included
      tilegen bench matmul_bias_gelu --backward --compile  # forward+backward, time and peak memory
      tilegen bench --render bench/results/h200      # README and plots again, from results.json
    """
    from . import bench as bench_module

    command = "tilegen bench " + " ".join(sys.argv[2:]) if sys.argv[1:2] == ["bench"] else "tilegen bench"
    try:
        if render_dir is not None:
            if ops or shapes or compile_too or dtypes or cold_start or rounds != 1 or timer != "do_bench" or backward:
                raise bench_module.BenchError("--render re-renders an earlier run; it takes no ops, --shapes, "
                                              "--compile, --dtype, --cold-start, --rounds, --timer or --backward")
            out = Path(render_dir)
            report = bench_module.load_report(out)
        else:
            out = Path(out_dir)
            report = bench_module.run(list(ops), package, out, shapes, compile_too, command,
                                      [op for op in cold_start.split(",") if op], rounds, timer, backward, list(dtypes))
    except bench_module.BenchError as exc:
        _fail(f"tilegen bench: {exc}")
    table = bench_module.format_table(report.rows)
    summary = bench_module.summary_lines(report.rows)
    click.echo(table)
    click.echo("")
    click.echo("\n".join(summary))
    for host in report.host_us:
        click.echo(f"host overhead {host['op']:<24} tilegen {host['tilegen_us']:.1f} us, torch {host['torch_us']:.1f} us"
                   f" ({bench_module.launch_paths(host)})")
    written = [] if render_dir is not None else bench_module.write_reports(report, out)
    written += bench_module.write_plots(report, out)
    written.append(bench_module.write_readme(report, out, table, summary))
    click.echo(f"wrote {', '.join(str(p) for p in written)}")


@main.command()
@click.argument("ops", nargs=-1)
@click.option("--package", default=DEFAULT_OUT, show_default=True, help="Folder of the generated package.")
@click.option("--shapes", default=None, help="Shapes instead of the benchmark defaults (as for `tilegen bench`).")
@click.option("--tables", default=None, help="Folder of the config tables (default: tilegen's own tables/).")
@click.option("--dtype", "dtypes", multiple=True, help="Tune these dtypes only (entries are per element size, "
              "so float16 also serves bfloat16); default: every dtype the benchmark runs.")
@click.option("--jobs", type=int, default=min(16, os.cpu_count() or 1), show_default=True,
              help="Processes that compile candidate configs ahead of timing (1: compile while timing).")
@click.option("--scope", type=click.Choice(SCOPES), default=None,
              help="kind (the default): entries every op of the kind may use; op: entries for each op alone "
              "(tables/ops/<op>.json), ahead of its kind's.")
@click.option("--backward", is_flag=True, help="Tune each op's backward kernel (an elementwise or reduction "
              "op's), timing the backward of a training step, into tables/ops/<op>_backward.json (scope op); "
              "without one an elementwise backward reads the op's entries, a reduction's the heuristic.")
@click.option("--traced", is_flag=True, help="Tune only the launches through pointers, which torch.compile and "
              "torch.export take, into the tables' \"<GPU> traced\" sections alone (the entries stay): for keys "
              "whose entry loads through descriptors and has no traced twin yet (matmul-kind ops; default: matmul).")
def tune(ops, package, shapes, tables, dtypes, jobs, scope, backward, traced):
    """Measure candidate configs of OPS (default: matmul, add) on this GPU; record the best.

    Every candidate tile is timed in each way it can launch (descriptor loads and stores,
    persistent, flattened) with its default warps and stages (a tile only tuning tries, such as a
    reduction's other rows per program, with each of its warp counts); the fastest few launches
    are then timed with the other warps and stages the spec leaves open (each config three times, ranked
    by the median). The leaders are timed again; the three still ahead then meet in rounds of
    their own, which alone decide (a GPU's speed drifts as it heats), and a line per shape gives
    their times there. A config's time is its kernel's, plus any host time per call that would hold back a loop of calls (the least of
    three batches of calls, as a busy host only adds time). Each shape fills its table key
    (power-of-two bucket and element size): give one shape per key. Each key's entry is written
    as soon as its shape is done in every dtype, so a run stopped early keeps the shapes it finished.
    Where the best config loads through tensor descriptors, the fastest one through pointers is
    written beside it (the table's "<GPU> traced" section), for launches traced by torch.compile
    or torch.export, which cannot take descriptors; --traced tunes that section alone, from
    launches through pointers only, leaving the entries as they are.

    Writes <kind>.json tables (with --scope op, ops/<op>.json; with --backward,
    ops/<op>_backward.json); run `tilegen build` afterwards so the ops launch the measured configs.

    \b
    Examples:
      tilegen tune matmul add && tilegen build specs/
      tilegen tune matmul_residual_scaled --scope op --shapes 128x4096x4096 && tilegen build specs/
      tilegen tune softmax --backward --shapes 4096x32768 && tilegen build specs/
      tilegen tune matmul --traced --shapes 4096x4096x4096 && tilegen build specs/
    """
    from . import tune as tune_module
    from .bench import BenchError

    try:
        written = tune_module.run(list(ops), package, shapes, Path(tables) if tables else TABLE_DIR,
                                  list(dtypes), jobs, scope or ("op" if backward else "kind"), backward, traced)
    except BenchError as exc:
        _fail(f"tilegen tune: {exc}")
    click.echo(f"wrote {', '.join(str(p) for p in written)}; now run `tilegen build`")


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


@main.command()
@click.argument("name")
@click.option("--kind", type=click.Choice(SCAFFOLD_KINDS), default="elementwise", show_default=True)
@click.option("--specs", "specs_dir", default=DEFAULT_SPECS, show_default=True, help="Folder to write the spec into.")
def new(name, kind, specs_dir):
    """Write a starting spec specs/NAME.yaml of the given kind.

    \b
    Example:
      tilegen new scaled_silu --kind elementwise && tilegen build specs/
    """
    target = Path(specs_dir) / f"{name}.yaml"
    text = _guarded(False, lambda: scaffold_spec(name, kind))
    if target.exists():
        _fail(f"tilegen: {target}: already exists; not overwritten")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    _guarded(False, lambda: load_specs([target]))
    click.echo(f"wrote {display_path(target, Path.cwd())}; edit it, then run `tilegen build`")


if __name__ == "__main__":  # pragma: no cover
    main()
