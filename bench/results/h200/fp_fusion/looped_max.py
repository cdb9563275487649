"""stats2 (stats2.yaml, built as package `gen`), looped backward in 64-element blocks: the w-gradient
and x-gradient errors at each row's argmax against the max's routed term, float16 and float32, one
and two warps. Run from the folder holding `gen` (PYTHONPATH=.:REPO); `FUSION_OFF=1` launches every
kernel with Triton's enable_fp_fusion=False (what tilegen.decisions now asks for such ops)."""
import os

import torch
from gen import stats2
from gen.stats2 import _BACKWARD
from gen.tests import test_stats2 as T
from tilegen.runtime import launch

if os.environ.get("FUSION_OFF"):
    _launch = launch.Kernel.launch
    launch.Kernel.launch = lambda self, grid, args, varying, constexprs, num_warps, num_stages=None: _launch(
        self, grid, args, varying, {**constexprs, "enable_fp_fusion": False}, num_warps, num_stages)

g = torch.Generator().manual_seed(0)
for rows, n, seed in ((3, 300, 9), (3, 165, 9), (8, 300, 4)):
    for dtype in (torch.float16, torch.float32):
        inputs = T.make_inputs((rows, n), dtype, seed=seed)
        scalars = {"eps": 0.75, "k": 6}
        x64 = [t.detach().cpu().double().requires_grad_() for t in inputs]
        outs64 = T.reference(*x64, **scalars)
        seeds = [torch.randn(o.shape, dtype=torch.float64, generator=g) for o in outs64]
        want = torch.autograd.grad(outs64, x64, seeds)
        x, w = x64[0].detach(), x64[1].detach()
        d = x * w - (x * w).mean(-1, keepdim=True)
        arg = d.argmax(-1)
        routed = [((seeds[2][r] + seeds[0][r].sum()) * x[r, arg[r]]).item() for r in range(rows)]
        routed_x = [((seeds[2][r] + seeds[0][r].sum()) * w[arg[r]]).item() for r in range(rows)]
        for warps in (1, 2):
            with _BACKWARD.configs.forcing({"BLOCK_N": 64, "ROWS": 1, "num_warps": warps, "UNROLL": 0}):
                leaves = [t.detach().clone().requires_grad_() for t in inputs]
                outs = stats2(*leaves, **scalars)
                got = torch.autograd.grad(outs, leaves, [s.to(o.dtype).to(o.device) for s, o in zip(seeds, outs)])
            errw = want[1] - got[1].double().cpu()
            errx = want[0] - got[0].double().cpu()
            print(f"{rows}x{n} seed {seed} {str(dtype)[6:]} w{warps}: " + "; ".join(
                f"row {r} col {arg[r].item()}: w err {errw[arg[r]].item():+.3f} (routed {routed[r]:+.3f}), "
                f"x err {errx[r, arg[r]].item():+.3f} (routed {routed_x[r]:+.3f})" for r in range(rows)), flush=True)
