"""Build time and output size of hostile specs of at most 64 KB (each is built alone, in a fresh
process, as `tilegen build` runs): the expression limits are meant to keep every one under 2 s.

    python3 bench/probes/hostile_build_time.py      # on the CPU machine; prints a table
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

HEADER = "op: {op}\nkind: elementwise\ninputs:\n{inputs}outputs:\n{outputs}{scalars}compute:\n{compute}" \
         "tiles:\n  N: {{block: BLOCK, sizes: [1024]}}\n"


def nest(wrap: str, depth: int, inner: str = "a + b") -> str:
    for _ in range(depth):
        inner = wrap.format(inner)
    return inner


def elementwise(op: str, expressions: list[str], inputs: int = 2, scalars: int = 0) -> str:
    names = ["a", "b"] + [f"x{i}" for i in range(inputs - 2)]
    return HEADER.format(
        op=op,
        inputs="".join(f"  {n}: {{dtype: {'[float32]' if i == 0 else 'a'}}}\n" for i, n in enumerate(names)),
        outputs="".join(f"  y{i}: {{dtype: a}}\n" for i in range(len(expressions))),
        scalars=("scalars:\n" + "".join(f"  s{i}: {{type: float, default: 1.0}}\n" for i in range(scalars)))
        if scalars else "",
        compute="".join(f"  y{i}: {e}\n" for i, e in enumerate(expressions)))


def cases() -> dict[str, str]:
    out = {}
    for label, wrap in [("relu", "relu({})"), ("pow8", "({}) ** 8"), ("gelu", "gelu({})"),
                        ("where", "where({0} > b, {0}, -{0})"), ("maxmin", "maximum({0}, minimum({0}, b))")]:
        depth, one = 0, "a + b"
        while depth < 38 and len(wrap.format(one)) <= 1900:  # as deep as the expression limits allow
            depth, one = depth + 1, wrap.format(one)
        count = max(1, min(30, 60_000 // (len(one) + 16)))
        out[f"{label} x{depth}, {count} outputs"] = elementwise(f"h_{label}", [one] * count)
    sums = " + ".join(f"x{i}" for i in range(300))
    out["300 inputs summed"] = elementwise("h_inputs", [f"a + b + {sums}"[:1990].rsplit(" + ", 1)[0]], inputs=302)
    out["400 scalars"] = elementwise("h_scalars", [" + ".join(["a"] + [f"s{i}" for i in range(300)])[:1990]
                                                   .rsplit(" + ", 1)[0]], scalars=400)
    return out


def main() -> None:
    print(f"{'case':32s} {'bytes':>7s} {'exit':>4s} {'seconds':>8s} {'output KB':>9s}")
    for name, text in cases().items():
        assert len(text.encode()) <= 64 * 1024, (name, len(text))
        with tempfile.TemporaryDirectory() as tmp:
            specs = Path(tmp) / "specs"
            specs.mkdir()
            (specs / "hostile.yaml").write_text(text)
            start = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "tilegen", "build", str(specs), "-o", str(Path(tmp) / "pkg")],
                                  capture_output=True, text=True)
            seconds = time.perf_counter() - start
            size = sum(p.stat().st_size for p in (Path(tmp) / "pkg").rglob("*") if p.is_file()) / 1024
            first = (done.stdout + done.stderr).strip().splitlines()[:1]
            print(f"{name:32s} {len(text.encode()):7d} {done.returncode:4d} {seconds:8.2f} {size:9.0f}  {first[0][:70] if first else ''}")


if __name__ == "__main__":
    main()
