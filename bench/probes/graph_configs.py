"""add's configs at the small sizes, timed on the GPU alone: each config forced in turn, 100 calls
captured in a CUDA graph and replayed (small_add_graph.graph_us), torch.add beside them, five
interleaved rounds, medians. do_bench's 0.5 us steps hide differences of 0.1 us that a loop of
calls still pays; a graph shows them.

    PYTHONPATH=. python3 bench/probes/graph_configs.py
"""
import statistics
import sys

import torch

from generated import add
from small_add_graph import graph_us

ROUNDS = 5
CONFIGS = [dict(BLOCK=block, num_warps=warps) for block in (1024, 2048, 4096) for warps in (1, 2, 4, 8)
           if block // (32 * warps) <= 64]
chooser = sys.modules["generated.add"]._CONFIGS

print("torch", torch.__version__, torch.cuda.get_device_name())
for dtype in (torch.float16, torch.float32):
    for exponent in (12, 14, 16, 18, 20):
        a = torch.randn(2**exponent, device="cuda", dtype=dtype)
        b = torch.randn(2**exponent, device="cuda", dtype=dtype)
        chooser.reset()
        add(a, b)
        table = chooser.cache.get(chooser.last_key)
        samples = {"torch.add": []} | {str(config): [] for config in CONFIGS}
        for turn in range(ROUNDS):
            order = list(CONFIGS) if turn % 2 == 0 else list(reversed(CONFIGS))
            samples["torch.add"].append(graph_us(lambda: torch.add(a, b)))
            for config in order:
                with chooser.forcing(config):
                    torch.testing.assert_close(add(a, b), a + b)
                    samples[str(config)].append(graph_us(lambda: add(a, b)))
        medians = sorted((statistics.median(v), name) for name, v in samples.items())
        best = ", ".join(f"{name} {us:.2f}" for us, name in medians[:4])
        mine = statistics.median(samples[str(table)]) if str(table) in samples else float("nan")
        print(f"{str(dtype).replace('torch.', ''):8} 2^{exponent:<3} table {table} {mine:.2f} us | "
              f"torch.add {statistics.median(samples['torch.add']):.2f} | fastest: {best}", flush=True)
chooser.reset()
