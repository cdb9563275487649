"""A norm's backward with its weight (and bias) frozen, asked for no column sums, on rows held
whole: launched a program a row block (the grid of a reduction that sums no columns) against one
program a multiprocessor issuing each row block's loads a trip ahead (PER_SM=1: the grid the
column sums run on, which the backward's table was tuned on), each with the config the op chooses
when every gradient is asked for; that backward too, and eager's frozen-weight backward. The
backward op alone, bfloat16, do_bench median in microseconds.

    PYTHONPATH=. python3 bench/probes/frozen_grid.py
"""
import importlib

import torch
import torch.nn.functional as F
import triton.testing

SHAPES = ((131072, 128), (16384, 1024), (4096, 1024), (4096, 4096), (32768, 4096), (1024, 8192), (2048, 16384))


def eager(op, x, w, b):
    return F.rms_norm(x, (x.shape[-1],), w, 1e-6) if op == "rms_norm" else F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)


def main():
    print(torch.cuda.get_device_name(), torch.__version__)
    print("op rows x n: all (table config) | frozen: a program a row block, PER_SM=1, PER_SM=2 | eager frozen  (us)")
    for op in ("rms_norm", "layer_norm"):
        module = importlib.import_module(f"generated.{op}")
        backward, chooser = module.__dict__[f"_{op}_backward"], module._BACKWARD.configs
        for rows, n in SHAPES:
            torch.manual_seed(0)
            x, g = (torch.randn(rows, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
            w, b = (torch.randn(n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
            stats = [torch.zeros(rows, device="cuda") for _ in range(1 if op == "rms_norm" else 2)]
            eps = 1e-6 if op == "rms_norm" else 1e-5
            count = 2 if op == "rms_norm" else 3

            def call(needed):
                return lambda: backward(x, w, g, *stats, eps, needed)
            every, frozen = [True] * count, [True] + [False] * (count - 1)
            with chooser.recording() as chosen:
                call(every)()
            config = chosen[-1][1]
            times = [triton.testing.do_bench(call(every), return_mode="median")]
            want = call(every)()[0]
            for per_sm in (0, 1, 2):
                with chooser.forcing({**config, "PER_SM": per_sm}):
                    got = call(frozen)()
                    torch.testing.assert_close(got[0], want, rtol=1e-2, atol=1e-2)
                    assert all(t.numel() == 0 for t in got[1:])
                    times.append(triton.testing.do_bench(call(frozen), return_mode="median"))
            xs = x.clone().requires_grad_()
            y = eager(op, xs, w, b)
            times.append(triton.testing.do_bench(lambda: torch.autograd.grad(y, [xs], g, retain_graph=True),
                                                 return_mode="median"))
            shown = {k: v for k, v in config.items()}
            print(f"  {op} {rows}x{n}: {times[0] * 1e3:.1f} | {times[1] * 1e3:.1f}  {times[2] * 1e3:.1f}  "
                  f"{times[3] * 1e3:.1f} | {times[4] * 1e3:.1f}   {shown}", flush=True)


if __name__ == "__main__":
    main()
