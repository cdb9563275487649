"""What the elementwise template needs from a `Spec`: its tile and masks, the wrapper's checks
(broadcasting included), and the backward kernel derived from its math."""

from __future__ import annotations

from .derivatives import Backward, differentiate
from .expressions import assignments
from .lowering import (NEEDED_PARAM, common_context, fixed_or, gradient_dtype, gradient_sources, gradients_formula,
                       input_checks, int_results, named_pairs, needed_gradients, output_context, output_records,
                       scalar_params, summed_gradient_dtype, tuple_source)
from .naming import backward_op_name
from .schema import store_bit
from .spec import Spec
from .torch_gradients import gradient_kinds, torch_gradients


def _elementwise_backward(spec: Spec) -> dict:
    """The backward of an elementwise op: one kernel computing every input's gradient that is not
    an incoming gradient as it is, from the inputs it reads and the incoming gradients."""
    inputs = [t.name for t in spec.inputs]
    outputs = [t.name for t in spec.outputs]
    floats = spec.float_inputs()  # int and bool inputs carry no gradient
    backward = differentiate(list(spec.body), floats, kinds=spec.number_kinds())
    computed = backward.computed()
    saved = [n for n in inputs if n in backward.reads] if computed else []
    seeds = [backward.seeds[o] for o in outputs]
    results = [backward.results[n] for n in computed]
    scalars = [s.name for s in spec.scalars]
    name = backward_op_name(spec.op)
    sources = gradient_sources(backward, inputs, outputs)
    # The gradients' shape and device: the first float output's incoming gradient's (an int or
    # bool output's is of its own dtype, and carries none).
    like_output = next(iter(spec.float_outputs()), outputs[0])
    like = backward.seeds[like_output]
    readers = backward.readers()
    return dict(
        name=name,
        saved=saved,
        kernel_inputs=saved + seeds,
        load_bits=(bits := load_bits(saved + seeds, readers, backward)),
        reads=tuple_source(bits) if bits else None,
        results=results,
        pointer_params=", ".join(f"{n}_ptr" for n in saved + seeds + results),
        math_args=", ".join(saved + seeds + scalars),
        math_lines=backward.lines("triton", kinds=gradient_kinds(spec, backward)),
        # Float values are upcast to the math's precision on load; int and bool ones stay as they are.
        upcast=[n for n in saved if n in floats] + seeds,
        typed_params=", ".join([f"{n}: torch.Tensor" for n in saved + seeds] + scalar_params(spec) + NEEDED_PARAM),
        call_args=", ".join(saved + seeds + scalars),
        return_type="tuple[" + ", ".join("torch.Tensor" for _ in results) + "]",
        like=like,
        gradient_dtypes=_gradient_dtypes(spec, backward, saved, like_output, like),
        **needed_gradients(inputs, backward),
        in_torch=torch_gradients(spec, backward, saved + seeds, results),
        gradients=gradients_formula(f"_{name}" if computed else None, inputs, saved, sources, len(outputs), whole=True,
                                    records=output_records(spec), selective=True,
                                    read_by={n: readers[n] for n in saved if set(readers[n]) != set(floats)},
                                    differentiable=f"_{name}_in_torch"),
    )


def _gradient_dtypes(spec: Spec, backward: Backward, saved: list[str], like_output: str, like: str) -> list[str]:
    """Per computed gradient, the dtype its buffer is made in (gradient_dtype; summed_gradient_dtype
    where it depends on whether an input is broadcast in the call)."""
    return [summed_gradient_dtype(spec, backward, name, gradient_dtype(spec, like_output, like, name, saved),
                                  like_output, saved, f"{like}.shape")
            for name in backward.computed()]


def load_bits(kernel_inputs: list[str], readers: dict, backward: Backward) -> list[int | None] | None:
    """Per input of a backward kernel, the STORES bits of the gradients that read it, where not
    every gradient does (None): the kernel loads it only where one of those is stored, so a call
    may pass a shape-only stand-in for it (Gradients read_by keeps no more for it). None where
    every gradient reads every input."""
    computed = backward.computed()
    bits = []
    for name in kernel_inputs:
        read = {computed.index(backward.aliases.get(n, n)) for n in readers.get(name, ())}
        bits.append(None if len(read) == len(computed) else sum(store_bit(i) for i in sorted(read)))
    return None if all(b is None for b in bits) else bits



def elementwise_context(spec: Spec, header: str) -> dict:
    tile = spec.tiles[0]
    policy = spec.mask(tile.axis)
    exact = policy == "never"
    inputs = [t.name for t in spec.inputs]
    outputs = [t.name for t in spec.outputs]
    ctx = common_context(spec, header)
    blocks = fixed_or(spec, tile.block, tile.sizes)
    warps = fixed_or(spec, "num_warps", spec.configs.num_warps)
    outs, prelude, result = output_context(spec)
    checks = input_checks(spec, {})
    declared = [t for t in spec.inputs if t.shape is not None]
    if declared:
        # Shapes the spec declares: ranks, and one size per named axis, checked before broadcasting.
        entries = ", ".join(f'("{t.public}", {t.name}, {tuple(t.shape)!r})' for t in declared)
        checks.append(f'rt.check_axes("{spec.op}", [{entries}])')
    # The call as made, for the compiled call path to learn (also where the inputs are expanded
    # below: it reads the views' pointers from the arguments, their strides from the signature).
    checks.append(f"_call = ({', '.join(inputs + [s.name for s in spec.scalars])},) if out is None else None")
    if len(inputs) > 1:
        # Inputs broadcast as in PyTorch, read through stride-0 views (nothing is materialized).
        checks.append(f'_broadcast = rt.broadcast_shape("{spec.op}", [{named_pairs(spec.inputs)}])')
        checks.append("if _broadcast is not None:")
        checks.append(f"    {', '.join(inputs)} = {', '.join(f'{name}.expand(_broadcast)' for name in inputs)}")
    if exact:
        checks.append(f'rt.check_divisible("{spec.op}", "{tile.axis}", {inputs[0]}.numel(), '
                      f'{min(blocks)}, "{tile.block}")')
    scalars = [s.name for s in spec.scalars]
    math_lines = assignments(list(spec.body), "triton", kinds=spec.number_kinds())
    ctx.update(
        block=tile.block,
        mask=policy,
        space=f"rt.ElementwiseSpace({tile.block!r}, {blocks}, {warps}, exact={exact})",
        input_names=inputs,
        # Float inputs are upcast to the math's precision on load; int and bool ones stay as they are.
        upcast=spec.float_inputs(),
        output_names=outputs,
        int_results=int_results(spec),
        tensor_names=inputs + outputs,
        pointer_params=", ".join(f"{n}_ptr" for n in inputs + outputs),
        math_params=", ".join(inputs + scalars),
        math_args=", ".join(inputs + scalars),
        math_lines=math_lines,
        outputs=outs,
        checks=checks + prelude,
        first_input=inputs[0],
        result=result,
        compute_floor=spec.compute or "float32",
        backward=_elementwise_backward(spec),
    )
    return ctx
