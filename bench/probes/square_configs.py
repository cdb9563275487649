"""matmul at 2048^3 and 4096^3, the squares furthest below cuBLAS in the bench (0.93-0.97x): the
table's entries against nearby tiles, BK and stage counts (BK64 s3 won at 4096^3 for
matmul_bias_gelu, bench/probes/gelu_epilogue.txt), each forced through the generated wrapper and
checked against torch.mm first. Five interleaved rounds of do_bench medians (L2 emptied before
each run, as `tilegen bench` times), torch.mm in every round; configs alternate their order
from round to round, so drift spreads evenly.
"""
import statistics
import sys

import torch
from triton.testing import do_bench

import generated  # noqa: F401  (the package exports the functions; the modules are below)

mod = sys.modules["generated.matmul"]


def cfg(bm, bn, bk, w, s, tma, persistent=0):
    return dict(BM=bm, BN=bn, BK=bk, SPLIT_K=1, num_warps=w, num_stages=s, TMA=tma, PERSISTENT=persistent)


CONFIGS = {
    2048: [cfg(128, 256, 32, 8, 5, 0), cfg(128, 256, 32, 8, 5, 1), cfg(128, 256, 64, 8, 3, 0), cfg(128, 256, 64, 8, 3, 1),
           cfg(128, 256, 64, 8, 4, 1), cfg(256, 128, 64, 8, 4, 1), cfg(256, 128, 64, 8, 3, 0), cfg(128, 128, 64, 8, 4, 1),
           cfg(128, 128, 64, 4, 4, 1)],
    4096: [cfg(128, 256, 32, 8, 4, 1), cfg(128, 256, 64, 8, 3, 1), cfg(128, 256, 64, 8, 4, 1), cfg(256, 128, 64, 8, 4, 1),
           cfg(256, 128, 64, 8, 3, 1), cfg(128, 256, 64, 8, 3, 1, 1), cfg(128, 256, 64, 8, 4, 1, 1),
           cfg(128, 256, 32, 8, 5, 1), cfg(128, 256, 64, 8, 3, 0)],
}


def label(config):
    return (f"BM{config['BM']} BN{config['BN']} BK{config['BK']} w{config['num_warps']} s{config['num_stages']}"
            + " TMA" * config["TMA"] + " persistent" * config["PERSISTENT"])


samples = {}
inputs = {}
for size, configs in CONFIGS.items():
    for dtype in (torch.float16, torch.bfloat16):
        torch.manual_seed(0)
        a = torch.randn(size, size, device="cuda", dtype=dtype)
        b = torch.randn(size, size, device="cuda", dtype=dtype)
        want = (a.float() @ b.float())
        for config in configs:  # compile and check each config once, before any timing
            with mod._CONFIGS.forcing(config):
                torch.testing.assert_close(generated.matmul(a, b).float(), want, atol=0.5, rtol=2e-2)
        inputs[size, dtype] = a, b
print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
for rnd in range(5):
    for (size, dtype), (a, b) in inputs.items():
        configs = CONFIGS[size] if rnd % 2 == 0 else CONFIGS[size][::-1]
        key = (size, str(dtype)[6:])
        samples.setdefault(key + ("torch.mm",), []).append(do_bench(lambda: a @ b, return_mode="median") * 1e3)
        for config in configs:
            with mod._CONFIGS.forcing(config):
                samples.setdefault(key + (label(config),), []).append(
                    do_bench(lambda: generated.matmul(a, b), return_mode="median") * 1e3)
for (size, dtype, name), values in samples.items():
    print(f"{size}^3 {dtype:9} {name:40} median {statistics.median(values):7.1f} us  "
          f"(rounds: {', '.join(f'{v:.1f}' for v in values)})")
