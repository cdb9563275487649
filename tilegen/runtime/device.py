"""Where kernels run: CUDA tensors, or CPU tensors in Triton's interpreter."""

import os

import torch
import triton

# Read once, when the runtime is imported: Triton decides then too, so TRITON_INTERPRET=1 must
# be set before the first import of a generated package.
INTERPRET = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")

_FACTS = {}


def on_device(value):
    """True when `value` is where kernels run: CUDA, or the CPU under the interpreter."""
    return value.device.type == "cpu" if INTERPRET else value.is_cuda


def cdiv(a, b):
    return -(-a // b)


def device_facts(device):
    """(multiprocessor count, shared memory per block in bytes, GPU name).

    The interpreter gets generous stand-ins and no name, so no tuned table applies there.
    """
    if INTERPRET or device.type != "cuda":
        return 132, 1 << 30, ""
    index = device.index if device.index is not None else torch.cuda.current_device()
    facts = _FACTS.get(index)
    if facts is None:
        props = triton.runtime.driver.active.utils.get_device_properties(index)
        facts = _FACTS[index] = (props["multiprocessor_count"], props["max_shared_mem"],
                                 torch.cuda.get_device_name(index))
    return facts
