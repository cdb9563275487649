"""fp8_scaled_mm at 128x4096x4096 (per-tensor scales, B column-major) under forced configs: split-K
depth, tile and stages beyond what the tables' candidate rule offers, beside torch._scaled_mm
(fast accumulation) in the same run.

    PYTHONPATH=. python3 bench/probes/fp8_skinny_configs.py [split|narrow] > OUT.txt

`split` (the default): deeper split-K on 64/128 tiles; `narrow`: narrow N tiles (32), no split,
BK 256.
"""

import itertools
import sys

import torch
import triton

from generated import fp8_scaled_mm
from generated.fp8_scaled_mm import _OP


# (BM, BN, BK, SPLIT_K, num_stages) candidates of each space.
SPACES = {
    "split": [(bm, bn, 128, split, stages)
              for bm, bn, split, stages in itertools.product((64, 128), (64, 128), (2, 4, 8), (4, 6))],
    "narrow": list(itertools.product((64, 128), (32, 64), (128, 256), (1, 2), (4, 6))),
}


def main():
    space = SPACES[sys.argv[1] if len(sys.argv) > 1 else "split"]
    m, n, k = 128, 4096, 4096
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = (torch.randn(m, k, device="cuda", generator=gen) * k ** -0.25).to(torch.float8_e4m3fn)
    b = (torch.randn(n, k, device="cuda", generator=gen) * k ** -0.25).to(torch.float8_e4m3fn).t()
    one_a, one_b = torch.tensor(0.75, device="cuda"), torch.tensor(1.5, device="cuda")
    want = torch._scaled_mm(a, b, scale_a=one_a, scale_b=one_b, out_dtype=torch.bfloat16, use_fast_accum=True)
    bench = lambda fn: triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median") * 1e3  # noqa: E731
    theirs = bench(lambda: torch._scaled_mm(a, b, scale_a=one_a, scale_b=one_b, out_dtype=torch.bfloat16,
                                            use_fast_accum=True))
    print(f"torch._scaled_mm fast accumulation: {theirs:.1f} us")
    print(f"table's choice: {bench(lambda: fp8_scaled_mm(a, b, one_a, one_b)):.1f} us")
    rows = []
    for bm, bn, bk, split, stages in space:
        config = dict(BM=bm, BN=bn, BK=bk, SPLIT_K=split, num_warps=4, num_stages=stages, TMA=1)
        with _OP.configs.forcing(config):
            try:
                got = fp8_scaled_mm(a, b, one_a, one_b)
            except Exception as exc:  # out of resources
                print(config, type(exc).__name__)
                continue
            torch.testing.assert_close(got.float(), want.float(), atol=5e-2, rtol=2e-2)
            us = bench(lambda: fp8_scaled_mm(a, b, one_a, one_b))
        rows.append((us, config))
        print(f"{us:7.1f} us  {config}", flush=True)
    print("fastest:")
    for us, config in sorted(rows, key=lambda r: r[0])[:5]:
        print(f"{us:7.1f} us ({theirs / us:.2f}x _scaled_mm)  {config}")


if __name__ == "__main__":
    main()
