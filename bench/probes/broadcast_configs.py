"""Which block and warp count a broadcast elementwise call wants, against the table's choice
(tuned on same-shape inputs) and a copy of the same bytes.

scaled_silu_mul(x, row) with x [numel / 4096, 4096] and row [4096] (a stride-0 view, the strided
kernel with LINES), every block and warp count forced in turn (launched as forced), alternating
over ROUNDS rounds, each config's median taken; the same-shape call and the call as the op
launches it beside them.

    PYTHONPATH=. python3 bench/probes/broadcast_configs.py
"""

import contextlib
import statistics

import torch
import triton

import tilegen.runtime as rt
from generated import scaled_silu_mul
from generated.scaled_silu_mul import _OP

HIDDEN = 4096
ROUNDS = 3
CONFIGS = [dict(BLOCK=block, num_warps=warps) for block in (1024, 2048, 4096, 8192) for warps in (4, 8, 16)
           if block // (32 * warps) >= 4]


@contextlib.contextmanager
def launched_as_forced(config):
    """Launch `config` as it is (a broadcast call's block otherwise follows
    runtime.configs.block_for_streams)."""
    _OP._for_broadcast = lambda config, *_: config
    try:
        with _OP.configs.forcing(config):
            yield
    finally:
        del _OP._for_broadcast


def timed(fn, config=None):
    with launched_as_forced(config) if config else contextlib.nullcontext():
        fn()
        return triton.testing.do_bench(fn, warmup=25, rep=100)


def main():
    rt.callpath.load(wait=True)  # repeat calls on the compiled call path, as a user's settle
    for dtype in (torch.float16, torch.bfloat16):
        for numel in (1 << 24, 1 << 26, 1 << 28):
            x = torch.randn(numel // HIDDEN, HIDDEN, device="cuda", dtype=dtype)
            full = torch.randn_like(x)
            row = torch.randn(HIDDEN, device="cuda", dtype=dtype)
            cases = {"copy of x": (lambda: x.clone(), None), "same-shape (table)": (lambda: scaled_silu_mul(x, full), None),
                     "broadcast (as launched)": (lambda: scaled_silu_mul(x, row), None)}
            for config in CONFIGS:
                cases[f"broadcast BLOCK {config['BLOCK']} w{config['num_warps']}"] = (lambda: scaled_silu_mul(x, row), config)
            times = {name: [] for name in cases}
            for _ in range(ROUNDS):
                for name, (fn, config) in cases.items():
                    times[name].append(timed(fn, config))
            copy = statistics.median(times["copy of x"])
            for name in cases:
                ms = statistics.median(times[name])
                print(f"{str(dtype)[6:]:9s} 2^{numel.bit_length() - 1} {name:28s} {ms * 1e3:8.1f} us "
                      f"{copy / ms:6.1%} of copy's time", flush=True)


if __name__ == "__main__":
    main()
