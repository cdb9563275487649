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


def table_gpu(name):
    """The GPU whose tuned table entries apply on a GPU named `name`: the one TILEGEN_TABLE_GPU
    names where set, else that GPU itself. Tables are measured per GPU and keyed by its name; a
    GPU with none of its own launches the heuristic's configs, and may borrow another's entries
    (an H100's sm_90 and 227 KB of shared memory are the H200's: TILEGEN_TABLE_GPU="NVIDIA H200").
    A borrowed entry stands only where its tile is among this GPU's candidates, as any entry (a
    matmul's launch then sheds pipeline stages its kernel overflows: configs.lighter_forms). Read
    at each choice (a reset chooser reads it again), so that one process can compare both. The
    interpreter (no name) reads no table."""
    if not name:
        return name
    return os.environ.get("TILEGEN_TABLE_GPU") or name
