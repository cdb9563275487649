"""Per-shape tables of the matmul ops from committed results: tilegen and its eager equivalent
(cuBLAS for matmul) from one bench run, and torch.compile from the latest compile run that timed
each shape. torch.compile's time does not depend on tilegen's code, so a compile run from an
earlier commit still times the same thing; the ratio divides it by the final run's tilegen time.

    python3 bench/per_shape_table.py > bench/results/h200/per_shape.md
"""
import json
import re
from pathlib import Path

RESULTS = Path(__file__).parent / "results" / "h200"
FINAL = RESULTS / "matmul_ops_888116b"
# Oldest first: a later run of a shape replaces an earlier one.
COMPILE_RUNS = ["matmul_relu_e27f09f", "matmul_bias_gelu_e27f09f", "matmul_relu_190e731", "matmul_bias_gelu_190e731",
                "128x4096x4096_final", "matmul_residual_scaled_efff554", "matmul_residual_scaled_c6937aa",
                "matmul_residual_scaled_b4f4e92", "matmul_bias_gelu_b4f4e92", "matmul_bias_gelu_final"]
RUN_NAMES = {"128x4096x4096_final": "df7ecb4"}
SHORT = {"float16": "fp16", "bfloat16": "bf16"}


def compile_times():
    """{(op, dtype, shape): (ms, run)} from the compile runs, the latest run of each shape."""
    times = {}
    for folder in COMPILE_RUNS:
        run = RUN_NAMES.get(folder, folder.rsplit("_", 1)[-1])
        path = RESULTS / "compile" / folder
        if (path / "results.json").exists():
            for row in json.loads((path / "results.json").read_text())["rows"]:
                if row["provider"] == "torch.compile":
                    times[row["op"], row["dtype"], row["shape"]] = (row["ms"], run)
        else:  # a run stopped at its time limit left only its progress lines
            pattern = r"\] (\w+) (\w+) (\S+): tilegen .*?torch.compile ([\d.]+) us"
            for m in re.finditer(pattern, (path / "README.md").read_text()):
                times[m[1], m[2], m[3]] = (float(m[4]) / 1e3, run)
    return times


def main():
    final = {}
    for row in json.loads((FINAL / "results.json").read_text())["rows"]:
        final.setdefault((row["op"], row["dtype"], row["shape"]), {})[row["provider"]] = row["ms"] * 1e3
    compiled = compile_times()
    print("# Per shape: tilegen, eager PyTorch, torch.compile (H200)\n")
    print(f"Made by `python3 bench/per_shape_table.py`: tilegen and eager from {FINAL.name}/, torch.compile from the")
    print("latest compile/ run of each shape (its folder names the commit; 'vs compile' divides that run's")
    print("torch.compile time by the tilegen time here). Times in us.")
    for op in ["matmul", "matmul_relu", "matmul_bias_gelu", "matmul_residual_scaled"]:
        print(f"\n## {op}\n")
        if op == "matmul":
            print("| shape | dtype | tilegen | cuBLAS | ratio |\n| --- | --- | --- | --- | --- |")
        else:
            print("| shape | dtype | tilegen | eager | vs eager | torch.compile | vs compile | compile run |")
            print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for (row_op, dtype, shape), times in final.items():
            if row_op != op:
                continue
            ours, eager = times["tilegen"], times["torch"]
            cells = [shape, SHORT[dtype], f"{ours:.1f}", f"{eager:.1f}", f"{eager / ours:.2f}"]
            if op != "matmul":
                ms, run = compiled.get((op, dtype, shape), (None, ""))
                cells += [f"{ms * 1e3:.1f}", f"{ms * 1e3 / ours:.2f}", run] if ms else ["not run", "", ""]
            print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
