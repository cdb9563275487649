"""Compare two `tilegen bench` runs (their results.json): tilegen's time at each point, new
against old, beside PyTorch's in each run, so that a change of machine speed between the runs
shows as PyTorch moving too.

    python3 bench/compare_runs.py OLD/results.json NEW/results.json [--over 1.05]

Prints one line per point whose tilegen time moved by more than --over (either way), then per op
and dtype the geomean of new/old tilegen time and of new/old PyTorch time.
"""
import argparse
import json
import math
from collections import defaultdict


def times(path):
    rows = json.load(open(path))["rows"]
    return {(r["op"], r["dtype"], r["shape"], r["provider"]): r["ms"] for r in rows}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--over", type=float, default=1.05, help="report points whose time moved past this ratio")
    args = parser.parse_args()
    old, new = times(args.old), times(args.new)
    ratios = defaultdict(lambda: defaultdict(list))
    print(f"{'op':<24} {'dtype':<9} {'shape':<18} {'old us':>9} {'new us':>9} {'new/old':>8}   torch new/old")
    for key in sorted(k for k in new if k[3] == "tilegen" and k in old):
        op, dtype, shape, _ = key
        ratio = new[key] / old[key]
        torch_key = (op, dtype, shape, "torch")
        torch_ratio = new[torch_key] / old[torch_key] if torch_key in old and torch_key in new else float("nan")
        ratios[(op, dtype)]["tilegen"].append(ratio)
        ratios[(op, dtype)]["torch"].append(torch_ratio)
        if ratio > args.over or ratio < 1 / args.over:
            print(f"{op:<24} {dtype:<9} {shape:<18} {old[key] * 1e3:9.2f} {new[key] * 1e3:9.2f} {ratio:8.2f}   "
                  f"{torch_ratio:.2f}")
    print()
    print(f"{'op':<24} {'dtype':<9} {'tilegen new/old (geomean)':>26} {'torch new/old':>14}")
    for (op, dtype), parts in sorted(ratios.items()):
        geo = {name: math.exp(sum(map(math.log, values)) / len(values)) for name, values in parts.items()}
        print(f"{op:<24} {dtype:<9} {geo['tilegen']:26.3f} {geo['torch']:14.3f}")


if __name__ == "__main__":
    main()
