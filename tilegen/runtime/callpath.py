"""The fast eager path: an op's repeat calls served by one C++ call (csrc/callpath.cpp).

A wrapper's first call with a signature runs its checks, picks a config and launches through
Triton's own launch (`launch.py`); the op's `CallPath` then learns the call: its signature, its
outputs' shapes and dtypes, and the compiled binary's launch, with every parameter that does not
change from call to call converted once. A later call with the signature is one C++ call: the
signature's read, at::empty for each output, one cuLaunchKernel (and, for each tensor-descriptor
operand, its CUtensorMap encoded for the call's address). Anything else (another signature, `out=`,
an input that requires grad while grad mode is on, another device, a profiler's launch hook)
returns None and takes the wrapper's Python path.

The module compiles against torch's headers (10-20 s), so it is built in a background thread on
first use; calls take the Python path until it is ready. Where it cannot be built (no compiler), a
warning says so once. TILEGEN_CALL_PATH=0 turns it off (TILEGEN_FAST_PATH=0, its older name, too).
"""

import os
import re
import threading
import warnings
from typing import NamedTuple

import torch
import triton

from . import native
from .device import INTERPRET

DISABLED = "TILEGEN_CALL_PATH=0"
UNAVAILABLE = None  # why the module cannot be had, once that is known
_module = None
_loader = None  # the thread that builds or loads the module, and the process that started it
_lock = threading.Lock()


def _load_in_background():
    global _module, UNAVAILABLE
    # A table takes its op's autograd node when made (CallPath.learn): the node is built beside
    # this module (its own thread), and waited for before this one is handed out.
    from .autograd import native_module
    native_module()
    try:
        module = native.load("callpath")
        missing = module.driver_ready()
        if missing is not None:
            raise native.BuildError(f"no CUDA driver: {missing}")
        native_module(wait=True)
        _module = module
    except (OSError, ImportError) as exc:
        UNAVAILABLE = f"the compiled call path is not available: {exc}"


def load(wait=False):
    """The module once built and loaded, else None. The first call starts the build (or the wait
    for another process's) in a thread; wait=True waits for it (benchmarks and tests do, so that
    they see the path calls settle on)."""
    global _loader, UNAVAILABLE
    if _module is not None or UNAVAILABLE is not None:
        return _module
    with _lock:
        if _loader is None or _loader[1] != os.getpid():  # a forked child starts its own
            if os.environ.get("TILEGEN_CALL_PATH", os.environ.get("TILEGEN_FAST_PATH", "1")) in ("", "0"):
                UNAVAILABLE = DISABLED
                return None
            thread = threading.Thread(target=_load_in_background, name="tilegen-call-path", daemon=True)
            _loader = (thread, os.getpid())
            thread.start()
    if wait:
        _loader[0].join()
    return _module


def _no_entry(*args):
    return None


# Triton scalar types as the launch's type codes: only those whose width in the kernel's
# parameter list is certain (fp16 and bf16 scalars, which Triton never makes of a Python float,
# stay with Triton's launch). A Python bool is u1, a byte, as Triton's launcher passes it.
_TYPE_CODES = {"i8": "b", "i16": "h", "i32": "i", "i64": "l", "u1": "B", "u8": "B", "u16": "H", "u32": "I",
               "u64": "K", "fp32": "f", "fp64": "d"}


class Codes(NamedTuple):
    """How a binary takes its launch's arguments (launch_codes)."""
    codes: str  # a type code per parameter
    skip: int  # how many leading varying arguments the binary does not take
    tail: tuple  # where each parameter after the varying ones comes from: an argument's position, None for null
    maps: dict  # for each tensor-descriptor argument (by position): its tensordesc metadata from the compiler


def launch_codes(binary, arg_names, varying):
    """How `binary` takes the arguments `arg_names` of its launch (Codes); None where the call
    path cannot launch it: an argument it has no code for, a tensor descriptor that is not one of
    the varying arguments or that the compiler did not lower to a tensor map, scratch memory to
    allocate, more than one CTA per program, a cooperative or programmatic launch.

    The binary takes its parameters in order, less the constexprs (a None argument is one: the
    split-K buffers of an unsplit matmul lead its arguments), then one pointer for each scratch
    area its compiler declares (null when it needs none). A tensor descriptor of rank r is 2r + 1
    parameters, as Triton's launcher passes it: the CUtensorMap (code D), its shape (r int32) and
    its strides (r int64)."""
    meta = getattr(binary, "metadata", None)
    src = getattr(binary, "src", None)
    if meta is None or not hasattr(src, "signature") or not hasattr(binary, "function"):
        return None
    if getattr(meta, "num_ctas", 1) != 1 or getattr(meta, "launch_cooperative_grid", False) \
            or getattr(meta, "launch_pdl", False):
        return None
    scratch = []
    for field in ("global_scratch_size", "profile_scratch_size"):
        if hasattr(meta, field):
            if getattr(meta, field):
                return None
            scratch.append(None)
    signature = src.signature
    map_metas = iter(getattr(meta, "tensordesc_meta", None) or ())
    codes, kept, maps = [], [], {}
    for index, name in enumerate(arg_names):
        kind = signature.get(name, signature.get(index))
        if not isinstance(kind, str):
            return None
        if kind == "constexpr":
            continue
        if kind.startswith("tensordesc"):
            map_meta = next(map_metas, None)
            rank = _descriptor_rank(kind)
            if map_meta is None or index >= varying or rank is None or map_meta.get("fp4_padded") \
                    or map_meta.get("is_im2col"):
                return None
            code = "D" + "i" * rank + "l" * rank
            maps[index] = map_meta
        else:
            code = "p" if kind.startswith("*") else _TYPE_CODES.get(kind)
        if code is None:
            return None
        codes.append(code)
        kept.append(index)
    if next(map_metas, None) is not None:
        return None  # metadata for descriptors it did not see: a layout it does not know
    kept_head = [index for index in kept if index < varying]
    skip = kept_head[0] if kept_head else varying
    if kept_head != list(range(skip, varying)):
        return None  # the binary drops a varying argument after one it takes
    return Codes("".join(codes) + "p" * len(scratch), skip, (*kept[len(kept_head):], *scratch), maps)


def _descriptor_rank(kind):
    """The rank of a `tensordesc<fp16[64, 64]>` parameter (its input_rank where it names one)."""
    match = re.match(r"tensordesc<[^\[>]*\[([^\]]*)\]", kind)
    if match is None:
        return None
    rank = re.search(r",input_rank=(\d+)", kind)
    return int(rank.group(1)) if rank else match.group(1).count(",") + 1


def _packed(args, maps):
    """The varying launch arguments as the binary's parameters, for Table.learn: each tensor
    descriptor as its tensor map's encoding (the tensor, CUDA's data type, shape, strides less
    the innermost, box, swizzle, fill, as Triton's launcher encodes it), then its shape and
    strides as values the signature fixes (1-tuples). None where a descriptor asks for more."""
    if not maps:
        return args
    from triton.backends.nvidia.driver import TMA_DTYPE_DEVICE_TO_HOST  # (differs from the device's enum)

    packed = []
    for index, arg in enumerate(args):
        map_meta = maps.get(index)
        if map_meta is None:
            packed.append(arg)
            continue
        if getattr(arg, "round_f32_to_tf32", False) or list(arg.strides)[-1] != 1:
            return None
        shape, strides = [int(v) for v in arg.shape], [int(v) for v in arg.strides]
        fill = 1 if arg.padding == "nan" else 0
        packed.append((arg.base, TMA_DTYPE_DEVICE_TO_HOST[map_meta["elem_type"]], tuple(shape), tuple(strides[:-1]),
                       tuple(int(v) for v in map_meta["block_size"]), int(map_meta["swizzle"]), fill))
        packed.extend((v,) for v in shape + strides)
    return packed


class CallPath:
    """One op's compiled call path. `call(*args)` serves a call with a learned signature (the
    op's result) or returns None; `learn(...)` hands it a call the Python path served.

    Until the module is ready, `call` returns None at once; the Python path keeps offering what
    it serves, and the first offer that finds the module ready opens the table.
    """

    def __init__(self):
        self.call = _no_entry
        self.table = None
        self._formula = None

    @property
    def formula(self):
        """The op's autograd formula (a Gradients), where its table may serve calls that record
        autograd: its node (autograd.native_module) is attached in C++ to the results."""
        return self._formula

    @formula.setter
    def formula(self, formula):
        self._formula = formula
        if formula is not None and self not in formula.call_paths:
            formula.call_paths.append(self)  # (node_formula gives the node to a table made before it loaded)

    def learn(self, call_args, launched, result):
        """After the Python path served `call_args` with the launch `launched` (launch.Launched)
        and returned `result`: from now on, serve such calls here, where they can be."""
        if INTERPRET or launched is None or torch.cuda.is_current_stream_capturing():
            return False
        codes = launch_codes(launched.binary, launched.arg_names, launched.varying)
        if codes is None:
            return False
        if self.table is None:
            module = load()
            if module is None:
                _warn_unavailable()
                return False
            current_device = getattr(torch._C, "_cuda_getDevice", torch.cuda.current_device)
            self.table = module.Table(current_device, triton.runtime.driver.active.get_current_stream,
                                      triton.knobs.runtime)
            self.table.formula = None if self.formula is None else self.formula.node_formula()
            self.call = self.table
        binary, args, grid, device = launched.binary, launched.args, launched.grid, launched.device
        tail = tuple(None if i is None else args[i] for i in codes.tail)
        varying = _packed(args[codes.skip:launched.varying], {i - codes.skip: m for i, m in codes.maps.items()})
        if varying is None:
            return False
        grid = (*grid, 1, 1)[:3]
        meta = binary.metadata
        try:
            plan = _module.prepare(binary.function, *grid, meta.num_warps * 32, meta.shared, device, codes.codes,
                                   len(varying), tail)
        except (TypeError, ValueError, OverflowError):  # a value it cannot pass: Triton's launch can
            return False
        stream = triton.runtime.driver.active.get_current_stream(device)
        return self.table.learn(tuple(call_args), (*args[:codes.skip], *varying), plan, codes.skip, result, stream)

    def forget(self):
        """Drop every learned call (a forced config, a changed mode)."""
        if self.table is not None:
            self.table.forget()


def _warn_unavailable():
    """Say once why calls stay on the Python path, where that is not by choice."""
    global _WARNED
    if not _WARNED and UNAVAILABLE is not None and UNAVAILABLE != DISABLED:
        _WARNED = True
        warnings.warn(f"tilegen: {UNAVAILABLE}; repeat calls take Triton's launch, with more host time a call",
                      RuntimeWarning, stacklevel=4)


_WARNED = False
