"""Which tensors a training step allocates, and when they are freed: one step of a tilegen op and
of its eager PyTorch form, each allocation with the tilegen or generated/ frames that made it, and
each side's peak above what was allocated before the step. Runs anywhere (CPU tensors, Triton's
interpreter): tensor lifetimes are those of a GPU, with two differences. Split-K workspaces, which
a GPU keeps per stream from call to call, are fresh here each step (their lines say
split_k_workspace; the second peak leaves them out). And the interpreter holds a launch's
arguments until its next launch, so a tensor whose last reference goes right after a launch that
read it is freed one launch late here.

    PYTHONPATH=. python3 bench/probes/step_allocations.py matmul_relu 256x384x128 [float32 [cuda]]

With `cuda` (a GPU) the kernels run compiled and the trace is of the caching allocator's blocks.
"""
import os
import sys

DEVICE = sys.argv[4] if len(sys.argv) > 4 else "cpu"
if DEVICE == "cpu":
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
from torch._C._profiler import _EventType  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from tilegen.measure import load_bench_modules  # noqa: E402
from tilegen.training_bench import leaves, output_seeds, step_function  # noqa: E402


def allocations(step):
    """(bytes, address, the frames that made it) per allocation (negative: a free) of one call of
    `step`."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, with_stack=True) as prof:
        result = step()
    del result
    found = []

    def walk(nodes):
        for node in nodes:
            if node.tag == _EventType.Allocation:
                frames, parent = [], node.parent
                while parent is not None:
                    if "generated/" in parent.name or "tilegen/" in parent.name:
                        frames.append(parent.name.split("/")[-1][:48])
                    parent = parent.parent
                found.append((node.start_time_ns, node.extra_fields.alloc_size, node.extra_fields.ptr,
                              " <- ".join(frames[:3])))
            walk(node.children)

    walk(prof.profiler.kineto_results.experimental_event_tree())
    return [(size, ptr, frames) for _, size, ptr, frames in sorted(found)]


def main(op, shape_text, dtype_name="float32", device="cpu"):
    module = load_bench_modules([op], "generated")[0]
    shape = tuple(int(s) for s in shape_text.split("x"))
    inputs = leaves(module.make_inputs(shape, getattr(torch, dtype_name), device=device))
    seeds = output_seeds(module, inputs)
    for provider, forward in (("tilegen", module.run_tilegen), ("torch", module.run_torch)):
        step = step_function(forward, inputs, seeds)
        step()  # first calls compile and choose configs
        live = peak = kept = peak_kept = 0
        workspaces = set()  # addresses of split-K workspaces, which a GPU keeps from call to call
        print(f"{provider}:")
        for size, ptr, frames in allocations(step):
            if size > 0 and "split_k_workspace" in frames:
                workspaces.add(ptr)
            live += size
            kept += 0 if ptr in workspaces else size
            if size < 0:
                workspaces.discard(ptr)
            peak, peak_kept = max(peak, live), max(peak_kept, kept)
            if size:
                print(f"  {size / 1024:+9.1f} KiB  live {live / 1024:8.1f}  {frames}")
        print(f"{provider} {op} {shape_text} {dtype_name}: peak {peak / 1024:.1f} KiB above the step's start, "
              f"{peak_kept / 1024:.1f} without split-K workspaces")
        if device == "cuda":  # what the bench reads: the allocator's own peak over one step
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            start = torch.cuda.memory_allocated()
            step()
            torch.cuda.synchronize()
            print(f"{provider}: torch.cuda.max_memory_allocated {(torch.cuda.max_memory_allocated() - start) / 1024:.1f} KiB "
                  "above the step's start")


if __name__ == "__main__":
    main(*sys.argv[1:])
