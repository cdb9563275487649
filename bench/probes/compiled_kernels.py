"""Which kernels a forward call runs eager and under torch.compile: one op at one shape, tilegen's
call and PyTorch's form, each eager and compiled with static shapes, traced by torch.profiler
(each kernel's mean GPU time a call, and the call's summed kernel time), then the config each of
Inductor's autotuned kernels settled on (block sizes, warps, stages) and, with KERNELS=DIR, its
source in DIR. With TORCH_LOGS=output_code the compiled graphs' code goes to stderr.

    PYTHONPATH=. python3 bench/probes/compiled_kernels.py layer_norm 16384x1024 [float16]
    MODE=max-autotune-no-cudagraphs ...   (the compile mode; default: torch.compile's default)
    KERNELS=$OUT/inductor ...             (write each Inductor kernel's source there)
"""
import gc
import os
import sys

import torch
from step_kernels import kernel_times

from tilegen.measure import load_bench_modules


def inductor_choices(seen):
    """(name, chosen config, source) of each of Inductor's autotuned kernels not in `seen`."""
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    for tuner in gc.get_objects():
        # (type(), not isinstance: the heap holds weak proxies, whose referents may be gone)
        if not issubclass(type(tuner), CachingAutotuner) or id(tuner) in seen:
            continue
        seen.add(id(tuner))
        configs = [dict(launcher.config.kwargs, num_warps=launcher.config.num_warps,
                        num_stages=launcher.config.num_stages) for launcher in getattr(tuner, "launchers", [])]
        name = getattr(tuner.fn, "__name__", "?")
        source = getattr(tuner.fn, "src", "") or ""
        yield name, configs, source


def main(op, shape_text, dtype_name="float16"):
    mode = os.environ.get("MODE") or None
    module = load_bench_modules([op], "generated")[0]
    shape = tuple(int(s) for s in shape_text.split("x"))
    inputs = module.make_inputs(shape, getattr(torch, dtype_name), device="cuda")
    seen = set()
    for provider, forward in (("tilegen", module.run_tilegen), ("torch", module.run_torch)):
        compiled = torch.compile(forward, fullgraph=True, dynamic=False, mode=mode)
        for call_mode, call in (("eager", forward), ("compiled", compiled)):
            times = kernel_times(lambda call=call: call(inputs))
            print(f"{op} {shape_text} {dtype_name} {provider} {call_mode} (mode {mode}): "
                  f"{sum(times.values()):.1f} us of kernels a call")
            for name, us in sorted(times.items(), key=lambda item: -item[1]):
                print(f"  {us:8.1f} us  {name}")
            for name, configs, source in inductor_choices(seen):
                print(f"  Inductor kernel {name}: chose {configs}")
                if os.environ.get("KERNELS") and source:
                    os.makedirs(os.environ["KERNELS"], exist_ok=True)
                    path = os.path.join(os.environ["KERNELS"], f"{op}_{shape_text}_{dtype_name}_{name}.py")
                    with open(path, "w") as file:
                        file.write(source)


if __name__ == "__main__":
    main(*sys.argv[1:])
