"""GPU time per call of add and torch.add at small sizes with the host out of the picture: 100
calls captured in a CUDA graph, the graph replayed 20 times between two events, per call the
total over 2000; five interleaved rounds, medians. Beside it, each size's do_bench median (as
`tilegen bench` times), to tell the kernels' own cost from the 0.5 us steps single timings take.

    PYTHONPATH=. python3 bench/probes/small_add_graph.py
"""
import statistics

import torch
from triton.testing import do_bench

from generated import add

CALLS, REPLAYS, ROUNDS = 100, 20, 5


def graph_us(fn):
    """Per-call GPU time of fn() replayed from a CUDA graph of CALLS calls."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):  # warm up off the capture: plans, allocator pools
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(CALLS):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(REPLAYS):
        graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / (CALLS * REPLAYS)


def main():
    print("torch", torch.__version__, torch.cuda.get_device_name())
    print(f"{'dtype':9} {'size':5} {'graph tilegen':>14} {'graph torch':>12} {'ratio':>6}   {'do_bench tilegen':>16} {'do_bench torch':>14} {'ratio':>6}")
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        for exponent in (12, 14, 16, 18, 20, 22):
            a = torch.randn(2**exponent, device="cuda", dtype=dtype)
            b = torch.randn(2**exponent, device="cuda", dtype=dtype)
            torch.testing.assert_close(add(a, b), a + b)
            samples = {"graph tilegen": [], "graph torch": [], "bench tilegen": [], "bench torch": []}
            for turn in range(ROUNDS):
                pairs = [("tilegen", lambda: add(a, b)), ("torch", lambda: torch.add(a, b))]
                for name, fn in (pairs if turn % 2 == 0 else pairs[::-1]):
                    samples[f"graph {name}"].append(graph_us(fn))
                    samples[f"bench {name}"].append(do_bench(fn, return_mode="median") * 1e3)
            m = {name: statistics.median(values) for name, values in samples.items()}
            print(f"{str(dtype).replace('torch.', ''):9} 2^{exponent:<3} {m['graph tilegen']:14.2f} {m['graph torch']:12.2f} "
                  f"{m['graph torch'] / m['graph tilegen']:6.2f}   {m['bench tilegen']:16.2f} {m['bench torch']:14.2f} "
                  f"{m['bench torch'] / m['bench tilegen']:6.2f}", flush=True)


if __name__ == "__main__":
    main()
