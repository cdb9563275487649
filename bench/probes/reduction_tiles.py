"""Forward time of a reduction op under each of its candidate configs (explore: rows per program
and warps varied), beside the config the heuristic picks: whether a row of 32768 elements is
better held whole or looped over in blocks, and the warps for rows of 4096.

    PYTHONPATH=. python3 bench/probes/reduction_tiles.py softmax rms_norm   # on a GPU
"""

import sys

import torch
import triton.testing

import generated
import tilegen.runtime as rt

SHAPES = [(512, 32768), (4096, 32768), (32768, 4096)]
DTYPES = [torch.float16, torch.float32]


def main(ops):
    facts = rt.device_facts(torch.device("cuda"))
    for name in ops:
        op = getattr(generated, name)
        chooser = rt.op_of(f"generated.{name}").configs
        for dtype in DTYPES:
            for rows, n in SHAPES:
                x = torch.randn(rows, n, device="cuda", dtype=dtype)
                weights = {"rms_norm": 1, "layer_norm": 2}.get(name, 0)
                extra = [torch.randn(n, device="cuda", dtype=dtype) for _ in range(weights)]
                key = (rt.bucket(n), rt.bucket(rows), x.element_size())
                with chooser.recording() as picked:
                    op(x, *extra)
                times = []
                for config in chooser.candidates(facts, key, explore=True):
                    with chooser.forcing(config):
                        ms = triton.testing.do_bench(lambda: op(x, *extra), return_mode="median")
                    times.append((ms, config))
                best = min(times, key=lambda t: t[0])
                chosen = next((ms for ms, c in times if c == picked[0][1]), float("nan"))
                print(f"{name} {str(dtype)[6:]} {rows}x{n}: heuristic {picked[0][1]} {chosen * 1e3:.1f} us; "
                      f"best {best[1]} {best[0] * 1e3:.1f} us")
                for ms, config in sorted(times, key=lambda t: t[0]):
                    print(f"    {ms * 1e3:8.1f} us  {config}")


if __name__ == "__main__":
    main(sys.argv[1:] or ["softmax", "rms_norm"])
