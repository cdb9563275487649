"""Where an AOTInductor package of generated ops fails to load (torch 2.11 crashed in
`aoti_load_package`, bench/results/h200/reductions/reduced_axis/tests_527d6cb.log).

Each case runs in its own process (a crash takes only it): a one-op model exported, compiled by
`torch._inductor.aoti_compile_and_package`, loaded back and run against the eager call. The
status line per case says which stage it reached and the exit status (-11: SIGSEGV).

    PYTHONPATH=. python3 bench/probes/aoti_load.py [CASE ...]     # every case, or those named
    PYTHONPATH=. python3 bench/probes/aoti_load.py --one CASE DIR # one case in this process
"""

from __future__ import annotations

import subprocess
import sys
import tempfile

import torch


def randn(*shape, dtype=torch.float16, seed=0):
    return torch.randn(shape, dtype=dtype, device="cuda", generator=torch.Generator("cuda").manual_seed(seed))


def cases():
    import generated as g

    def torch_add(x, y):  # no generated op: AOTInductor's own kernel, the control
        return torch.relu(x + y)

    return {
        "torch": (torch_add, (randn(64, 64), randn(64, 64, seed=1))),
        "add": (lambda x, y: g.add(x, y), (randn(64, 64), randn(64, 64, seed=1))),
        "add_then_relu": (lambda x, y: torch.relu(g.add(x, y)), (randn(64, 64), randn(64, 64, seed=1))),
        "bias_gelu": (lambda x, b: g.bias_gelu(x, b), (randn(64, 128), randn(128, seed=1))),
        "matmul_relu": (lambda a, b: g.matmul_relu(a, b), (randn(128, 64), randn(64, 96, seed=1))),
        "softmax": (lambda x: g.softmax(x), (randn(32, 256),)),
        "layer_norm": (lambda x, w, b: g.layer_norm(x, w, b)[0], (randn(32, 256), randn(256, seed=1), randn(256, seed=2))),
    }


class Wrap(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def one(name, folder):
    fn, args = cases()[name]
    model = Wrap(fn)
    want = model(*args)
    print("stage export", flush=True)
    exported = torch.export.export(model, args)
    print("stage compile", flush=True)
    path = torch._inductor.aoti_compile_and_package(exported, package_path=f"{folder}/{name}.pt2")
    print("stage load", flush=True)
    loaded = torch._inductor.aoti_load_package(path)
    print("stage run", flush=True)
    got = loaded(*args)
    got = got[0] if isinstance(got, (list, tuple)) else got
    torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2)
    print("stage ok", flush=True)


def main(argv):
    if argv[:1] == ["--one"]:
        one(argv[1], argv[2])
        return
    names = argv or list(cases())
    with tempfile.TemporaryDirectory() as folder:
        for name in names:
            run = subprocess.run([sys.executable, __file__, "--one", name, folder], capture_output=True, text=True,
                                 timeout=300)
            stages = [line.split()[1] for line in run.stdout.splitlines() if line.startswith("stage ")]
            print(f"{name}: exit {run.returncode}, last stage {stages[-1] if stages else 'none'}", flush=True)
            if run.returncode:
                print("  " + "\n  ".join((run.stdout + run.stderr).strip().splitlines()[-15:]), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
