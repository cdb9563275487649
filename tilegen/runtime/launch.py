"""Launching: Triton's own launch, which serves first calls, the interpreter, other devices,
profilers and tracing; what it launched, for the compiled call path to learn; split-K scratch."""

import threading

import torch
import triton

from . import library

# Triton's interpreter patches its language module's functions for the kernel it runs and puts
# them back after: two threads running kernels at once broke each other's run (InterpreterError:
# "Did you forget to add @triton.jit?"). Its launches take turns.
_INTERPRETER_TURN = threading.Lock()


class Launched:
    """One launch through Triton: the compiled binary (None in the interpreter), its grid, its
    argument list (constexprs excluded), how many leading arguments vary from call to call, and
    the device index."""

    __slots__ = ("binary", "arg_names", "grid", "args", "varying", "device")

    def __init__(self, binary, arg_names, grid, args, varying, device):
        self.binary, self.arg_names, self.grid = binary, arg_names, grid
        self.args, self.varying, self.device = args, varying, device


class Kernel:
    """One @triton.jit kernel, launched the standard way: `kernel[grid](*args, **constexprs)`.
    Without `fp_fusion`, compiled with no multiply and add fused into one FMA: an op whose backward
    decides a kink on a value it computes again (tilegen.decisions) rounds it as its forward did."""

    def __init__(self, fn, fp_fusion=True):
        self.fn = fn
        self.fp_fusion = fp_fusion
        # The compiled binary takes every parameter positionally, constexprs included.
        self.arg_names = list(getattr(fn, "arg_names", []))

    def launch(self, grid, args, varying, constexprs, num_warps, num_stages=None):
        """Launch now, on the device of the first tensor argument; return what was launched.

        With tensors that stand in for data while an op is traced, the launch is recorded through
        torch.library.wrap_triton (TorchInductor then sees the kernel), or, where ops are opaque
        (the interpreter), left out: a fake implementation only computes the outputs' metadata."""
        options = {"num_warps": num_warps}
        if not self.fp_fusion:
            options["enable_fp_fusion"] = False
        if num_stages is not None:
            options["num_stages"] = num_stages
        if library.traced(args):
            if library.TRACEABLE:
                torch.library.wrap_triton(self.fn)[grid](*args, **constexprs, **options)
            return Launched(None, self.arg_names, grid, args, varying, None)
        device = next((a.device for a in args if isinstance(a, torch.Tensor)), None)
        if device is None or device.type != "cuda":
            with _INTERPRETER_TURN:
                self.fn[grid](*args, **constexprs, **options)
            return Launched(None, self.arg_names, grid, args, varying, None)
        index = device.index if device.index is not None else torch.cuda.current_device()
        if index == torch.cuda.current_device():
            binary = self.fn[grid](*args, **constexprs, **options)
        else:
            with torch.cuda.device(index):
                binary = self.fn[grid](*args, **constexprs, **options)
        return Launched(binary, self.arg_names, grid, args, varying, index)


_SPLIT_K_WORKSPACES = {}


def split_k_workspace(device, partials, tiles, fresh=False, dtype=torch.float32):
    """(`dtype` room for `partials` partial sums (float32 unless said), zeroed int32 arrival
    counters, one per output tile) for a split-K launch, or a reduction's column sums.

    Within a launch each partial sum is written before it is read, and split-K kernels leave
    every counter at zero when they finish, so one workspace serves every launch on a stream
    (launches on one stream run in order); each stream gets its own, grown for a larger launch
    (the old one is freed in stream order, or kept by the compiled call path for the calls it
    learned on that stream). A fresh buffer per call would cost each call about 2 us of host
    time, as much as split-K gains at 64x4096x4096 (bench/probes/skinny_split.txt). Under CUDA
    graph capture the workspace is a fresh one, its counters zeroed inside the graph, and the
    graph keeps it; so is a traced launch's (`fresh`), which the traced graph allocates.
    """
    if device.type != "cuda" or torch.cuda.is_current_stream_capturing() or fresh:
        return (torch.empty(partials, dtype=dtype, device=device),
                torch.zeros(tiles, dtype=torch.int32, device=device))
    key = (device.index, triton.runtime.driver.active.get_current_stream(device.index), dtype)
    held = _SPLIT_K_WORKSPACES.get(key)
    if held is None or held[0].numel() < partials or held[1].numel() < tiles:
        sums, counters = held or (None, None)
        if sums is None or sums.numel() < partials:
            sums = torch.empty(partials, dtype=dtype, device=device)
        if counters is None or counters.numel() < tiles:
            counters = torch.zeros(max(tiles, 1024), dtype=torch.int32, device=device)
        held = _SPLIT_K_WORKSPACES[key] = sums, counters
    return held
