"""Per-shape tables of the matmul ops from committed results: tilegen and its eager equivalent
(cuBLAS for matmul) from the full bench run, and torch.compile from the compile run where it was
fastest at each shape, with the ratio within that run and the one against the full run's tilegen.

    python3 bench/per_shape_table.py > bench/results/h200/per_shape.md
"""
import json
import re
from pathlib import Path

RESULTS = Path(__file__).parent / "results" / "h200"
FINAL = RESULTS  # the full bench at the top of the results folder
COMPILE_RUNS = ["matmul_relu_e27f09f", "matmul_bias_gelu_e27f09f", "matmul_relu_190e731", "matmul_bias_gelu_190e731",
                "128x4096x4096_final", "matmul_residual_scaled_efff554", "matmul_residual_scaled_c6937aa",
                "matmul_residual_scaled_b4f4e92", "matmul_bias_gelu_b4f4e92", "matmul_bias_gelu_final",
                "matmul_residual_scaled_fe082b0", "matmul_bias_gelu_5e2a168", "matmul_residual_scaled_062ae59",
                "matmul_residual_scaled_f27d498", "matmul_bias_gelu_f27d498", "matmul_relu_f27d498"]
ROUNDS = RESULTS / "rounds" / "matmul_062ae59"  # matmul, medians of five interleaved turns, final tree
RUN_NAMES = {"128x4096x4096_final": "df7ecb4", "matmul_bias_gelu_final": "b4f4e92 final"}
SHORT = {"float16": "fp16", "bfloat16": "bf16"}


def points(folder):
    """{(op, dtype, shape): {provider: us}} from a run's results.json."""
    out = {}
    for row in json.loads((folder / "results.json").read_text())["rows"]:
        out.setdefault((row["op"], row["dtype"], row["shape"]), {})[row["provider"]] = row["ms"] * 1e3
    return out


def compile_times():
    """{(op, dtype, shape): (torch.compile us, tilegen us in the same run, run)} from the compile
    run of each shape where torch.compile was fastest: max-autotune's choice varies from run to
    run (at 128x4096x4096 one run picked a kernel four times slower than another's), and the
    fastest is the one to beat."""
    times = {}
    for folder in COMPILE_RUNS:
        run = RUN_NAMES.get(folder, folder.rsplit("_", 1)[-1])
        path = RESULTS / "compile" / folder
        if (path / "results.json").exists():
            for point, providers in points(path).items():
                if "torch.compile" in providers:
                    found = (providers["torch.compile"], providers.get("tilegen"), run)
                    times[point] = min(times.get(point, found), found)
        else:  # a run stopped at its time limit left only its progress lines
            pattern = r"\] (\w+) (\w+) (\S+): tilegen ([\d.]+) us, .*?torch.compile ([\d.]+) us"
            for m in re.finditer(pattern, (path / "README.md").read_text()):
                found = (float(m[5]), float(m[4]), run)
                times[m[1], m[2], m[3]] = min(times.get((m[1], m[2], m[3]), found), found)
    return times


def main():
    final, rounds, compiled = points(FINAL), points(ROUNDS), compile_times()
    print("# Per shape: tilegen, eager PyTorch, torch.compile (H200)\n")
    print("Made by `python3 bench/per_shape_table.py`. tilegen and eager (cuBLAS for matmul) come from the full")
    print("bench in this folder, side by side in one run; for matmul, also the medians of five interleaved")
    print("turns on the final tree (rounds/). torch.compile comes from the compile/ run where it")
    print("was fastest at that shape (its autotuning picks differently from run to run); the folder names")
    print("the commit. That run timed tilegen beside it ('its tilegen'), and")
    print("'vs compile' is the ratio within that run. 'vs compile here' divides the compile time by this")
    print("bench's tilegen time instead: a ratio across runs, where single timings differ by up to about 5%.")
    print("Times in us.")
    for op in ["matmul", "matmul_relu", "matmul_bias_gelu", "matmul_residual_scaled"]:
        print(f"\n## {op}\n")
        if op == "matmul":
            print(f"| shape | dtype | tilegen | cuBLAS | ratio | ratio, 5 rounds ({ROUNDS.name}) |")
            print("| --- | --- | --- | --- | --- | --- |")
        else:
            print("| shape | dtype | tilegen | eager | vs eager | torch.compile | its tilegen | vs compile | "
                  "vs compile here | compile run |")
            print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for (row_op, dtype, shape), times in final.items():
            if row_op != op:
                continue
            ours, eager = times["tilegen"], times["torch"]
            cells = [shape, SHORT[dtype], f"{ours:.1f}", f"{eager:.1f}", f"{eager / ours:.2f}"]
            if op == "matmul":
                medians = rounds.get((op, dtype, shape))
                cells.append(f"{medians['torch'] / medians['tilegen']:.2f}" if medians else "")
            else:
                compile_us, theirs, run = compiled.get((op, dtype, shape), (None, None, ""))
                if compile_us is None:
                    cells += ["not run", "", "", "", ""]
                else:
                    cells += [f"{compile_us:.1f}", f"{theirs:.1f}" if theirs else "",
                              f"{compile_us / theirs:.2f}" if theirs else "", f"{compile_us / ours:.2f}", run]
            print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
