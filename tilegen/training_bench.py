"""`tilegen bench --backward`: a training step of each op, forward and backward, beside PyTorch.

One step is the op's forward on inputs that require grad, then torch.autograd.grad of its
outputs against fixed output gradients. Providers: tilegen, eager PyTorch (its autograd of the
same math), and with --compile torch.compile of that math in its default mode and in
max-autotune (AOT autograd compiles the backward too). Each point also records the step's peak
memory: torch.cuda.max_memory_allocated during one step, above what was allocated before it
(inputs and output gradients, made once, are not counted).
"""

from __future__ import annotations

import statistics
import sys

from .measure import BenchError, as_tuple, dtype_name, shape_label

SUFFIX = "+bwd"  # a training step's rows are the op's name with this suffix
COMPILE_MODES = {"torch.compile": "default", "torch.compile.max-autotune": "max-autotune-no-cudagraphs"}


def leaves(inputs):
    return [t.detach().requires_grad_() if t.is_floating_point() else t for t in inputs]


def output_seeds(module, inputs):
    """Fixed gradients for the op's float outputs on `inputs` (what a loss would send back)."""
    import torch

    outputs = [o for o in as_tuple(module.run_torch(inputs)) if o.is_floating_point()]
    generator = torch.Generator(device=outputs[0].device).manual_seed(7)
    return [torch.randn(o.shape, device=o.device, generator=generator, dtype=torch.float32).to(o.dtype)
            for o in outputs]


def step_function(forward, inputs, seeds):
    """One training step: forward on `inputs` (float ones: leaves that require grad), then the
    gradients of every float input for the float outputs' gradients `seeds` (int and bool
    values carry none)."""
    import torch

    floats = [t for t in inputs if t.is_floating_point()]

    def step():
        outputs, grads = recorded([o for o in as_tuple(forward(inputs)) if o.is_floating_point()], seeds)
        return torch.autograd.grad(outputs, floats, grads)
    return step


def recorded(outputs, seeds):
    """(outputs, seeds): those of the float `outputs` that record a graph, with their seeds (an
    output that reads the inputs only through detach() or a comparison records none)."""
    pairs = [(o, s) for o, s in zip(outputs, seeds) if o.requires_grad]
    return [o for o, _ in pairs], [s for _, s in pairs]


def peak_mb(step) -> float:
    """Memory a step allocates at its peak, above what was allocated before it, in MiB."""
    import torch

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    result = step()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    del result
    return peak / 2**20


def compiled(forward, inputs, mode):
    """torch.compile of `forward` in `mode`, specialized to these inputs (one shape per compile,
    as in the forward bench)."""
    import torch

    torch._dynamo.reset()
    return torch.compile(forward, mode=mode, dynamic=False)


def step_work(module, shape, dtype) -> tuple[int, int]:
    """(flops, bytes) of a training step: a matmul's three products; another op's forward traffic
    (inputs read, outputs written), then what its derived backward moves. Where a backward kernel
    runs: the saved inputs and outputs and the incoming gradients it reads, the gradients it
    writes. An input whose gradient is an incoming one passed on moves nothing (add's backward is
    no kernel), unless it was broadcast: the incoming gradient is read and summed into its own.
    An op whose formula cannot be reached counts a backward that reads every input and output
    gradient and writes every input's gradient."""
    if module.KIND == "matmul":
        return 3 * module.flops(shape), 0
    inputs = [(s, _numel(s) * d.itemsize) for s, d in module.input_specs(shape, dtype)]
    outputs = [(s, _numel(s) * d.itemsize, d.is_floating_point) for s, d in module.output_specs(shape, dtype)]
    forward = sum(n for _, n in inputs) + sum(n for _, n, _ in outputs)
    formula = _formula(module)
    if formula is None:
        return 0, forward + 2 * sum(n for _, n in inputs) + sum(n for _, n, _ in outputs)
    computed = [i for i, source in enumerate(formula.sources) if source is not None and source[0] == "result"]
    backward = 0
    if formula.backward is not None and computed:
        backward += sum(inputs[i][1] for i in formula.saved + tuple(computed))
        backward += sum(outputs[i][1] for i in formula.saved_outputs if i is not None)
        backward += sum(n for _, n, floating in outputs[:formula.outputs] if floating)
    for i, source in enumerate(formula.sources):
        if source is not None and source[0] == "grad" and inputs[i][0] != outputs[source[1]][0]:
            backward += outputs[source[1]][1] + inputs[i][1]
    return 0, forward + backward


def _formula(module):
    """The autograd formula (rt.Gradients) of the op a bench module times, or None."""
    from .runtime import ops

    function = getattr(module, getattr(module, "OP", ""), None)
    try:
        return ops.op_of(function.__module__).call_path.formula
    except (AttributeError, LookupError):
        return None


def _numel(shape):
    n = 1
    for size in shape:
        n *= size
    return n


def bench_module(module, shapes, compile_too, progress, measure, make_row, dtypes=None):
    """Rows for each of `dtypes` (default: every dtype the op benchmarks) and shape of one op's training step."""
    import torch

    rows = []
    if not getattr(module, "DIFFERENTIABLE", True):
        print(f"{module.OP}: no input holds floats, so no training step to time", file=sys.stderr, flush=True)
        return rows
    for dtype in module.DTYPES if dtypes is None else dtypes:
        name = dtype_name(dtype)
        for shape in shapes or module.SHAPES:
            label = f"{module.OP}{SUFFIX} {name} {shape_label(shape)}"
            inputs = leaves(module.make_inputs(shape, dtype))
            seeds = output_seeds(module, inputs)
            forwards = {"tilegen": module.run_tilegen, "torch": module.run_torch}
            if compile_too:
                for provider, mode in COMPILE_MODES.items():
                    forwards[provider] = compiled(module.run_torch, inputs, mode)
            steps = {provider: step_function(fn, inputs, seeds) for provider, fn in forwards.items()}
            want = steps["torch"]()
            for provider, step in steps.items():
                if provider != "torch":  # every provider's gradients agree with eager autograd's
                    gradients_agree(step(), want, gradient_tolerance(dtype, module), f"{label} ({provider})")
            del want
            flops, nbytes = step_work(module, shape, dtype)
            times = []
            for provider, step in steps.items():
                ms = measure(step)
                row = make_row(module, name, shape, provider, ms, flops, nbytes)
                row.op = module.OP + SUFFIX
                row.peak_mb = peak_mb(step)
                rows.append(row)
                times.append(f"{provider} {ms * 1e3:.1f} us {row.peak_mb:.0f} MiB")
            progress(f"{label}: {', '.join(times)}")
            del inputs, seeds, steps, forwards
        torch.cuda.empty_cache()
    return rows


# Where the math has a kink (clamp, relu, where), an input on it may take the other side when
# the forward rounds differently (PyTorch's eager half-precision math rounds each step): its
# gradient then differs by the whole incoming gradient. A few such elements are allowed.
KINK_FRACTION = 1e-2


def gradients_agree(got, want, tolerance, label):
    """Raise (naming `label`) unless gradients `got` match eager autograd's `want`: to `tolerance`
    relative to each gradient's size, all but KINK_FRACTION of the elements."""
    import torch

    for index, (g, w) in enumerate(zip(got, want)):
        g, w = g.float(), w.float()
        finite = w[torch.isfinite(w)].abs()
        scale = max(1.0, finite.max().item()) if finite.numel() else 1.0
        close = torch.isclose(g, w, atol=tolerance * scale, rtol=tolerance, equal_nan=True)
        wrong = 1.0 - close.float().mean().item()
        if wrong > KINK_FRACTION:
            raise BenchError(f"{label}: gradient {index} disagrees with eager autograd's in {wrong:.2%} "
                             f"of its elements (max difference {(g - w).abs().max().item():.3g})")


def gradient_tolerance(dtype, module):
    """Gradients of half-precision matmuls sum over a whole axis of half-precision values."""
    import torch

    if dtype in (torch.float16, torch.bfloat16):
        return 5e-2 if module.KIND == "matmul" else 2e-2
    return 2e-3


def summary(rows) -> list[str]:
    """Per op and dtype: geomean and worst speedup of the step against each provider, and the
    worst peak-memory ratio against eager autograd."""
    out = []
    by_point = {}
    for row in rows:
        if row.op.endswith(SUFFIX):
            by_point.setdefault((row.op, row.dtype, row.shape), {})[row.provider] = row
    groups = {}
    for (op, dtype, shape), providers in by_point.items():
        groups.setdefault((op, dtype), []).append((shape, providers))
    for (op, dtype), points in groups.items():
        for other in ("torch", *COMPILE_MODES):
            ratios = [(shape, p[other].ms / p["tilegen"].ms) for shape, p in points if other in p and "tilegen" in p]
            if not ratios:
                continue
            mean = statistics.geometric_mean(r for _, r in ratios)
            worst = min(ratios, key=lambda pair: pair[1])
            out.append(f"{op:<28} {dtype:<9} vs {other:<26} geomean {mean:.2f}x, worst {worst[1]:.2f}x at {worst[0]}")
        memory = [(shape, p["tilegen"].peak_mb / p["torch"].peak_mb) for shape, p in points
                  if "tilegen" in p and "torch" in p and p["torch"].peak_mb]
        if memory:
            worst = max(memory, key=lambda pair: pair[1])
            out.append(f"{op:<28} {dtype:<9} peak memory / eager autograd's: worst {worst[1]:.2f}x at {worst[0]}")
    return out
