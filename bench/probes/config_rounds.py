"""Configs of one op at one shape, forced through its generated wrapper, in interleaved rounds.

    PYTHONPATH=. python3 bench/probes/config_rounds.py OP MxNxK CONFIG [CONFIG ...] [--rounds N]

Each CONFIG is a config as the op's table writes it, in short form: `BM128 BN256 BK64 w8 s3 TMA`
or `BLOCK2048 w8` (`tune`'s finalist lines use the same form; SPLIT_K2, PERSISTENT likewise). The
shape is written as `tilegen bench` takes it (`4096x4096x4096`, `1048576`). Every config is
checked against the op's eager equivalent (from its bench module) first, in every dtype of the
op; then each round times the eager equivalent and every config (do_bench medians, L2 emptied
first, as `tilegen bench` times), in alternating order, so drift within a round spreads evenly.
A config that wins every round is ahead by more than the drift between rounds.
"""
import argparse
import importlib
import statistics

import torch
from triton.testing import do_bench

from tilegen.bench import check_agreement

NAMES = {"w": "num_warps", "s": "num_stages"}


def parse_config(text):
    """`BM128 BN256 BK64 w8 s3 TMA` -> dict(BM=128, BN=256, BK=64, num_warps=8, num_stages=3, TMA=1);
    `BLOCK2048 w8` -> dict(BLOCK=2048, num_warps=8). Fields left out take the wrapper's defaults."""
    config = {}
    for part in text.split():
        if part in ("TMA", "PERSISTENT"):
            config[part] = 1
            continue
        name = part.rstrip("0123456789")
        config[NAMES.get(name, name)] = int(part[len(name):])
    return config


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("op")
    parser.add_argument("shape")
    parser.add_argument("configs", nargs="+")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    bench = importlib.import_module(f"generated.bench.bench_{args.op}")
    chooser = importlib.import_module(f"generated.{args.op}")._CONFIGS
    shape = tuple(int(part) for part in args.shape.split("x"))
    configs = {text: parse_config(text) for text in args.configs}
    inputs = {}
    for dtype in bench.DTYPES:
        inputs[dtype] = bench.make_inputs(shape, dtype)
        want = bench.run_torch(inputs[dtype])
        for text, config in configs.items():
            with chooser.forcing(config):
                check_agreement(bench.run_tilegen(inputs[dtype]), want, f"{args.op} {args.shape} {text}")
    print(f"{args.op} {args.shape}, torch {torch.__version__}, {torch.cuda.get_device_name()}, {args.rounds} rounds")
    samples = {}
    for round_ in range(args.rounds):
        order = list(configs) if round_ % 2 == 0 else list(configs)[::-1]
        for dtype, operands in inputs.items():
            name = str(dtype).removeprefix("torch.")
            samples.setdefault((name, "eager"), []).append(
                do_bench(lambda: bench.run_torch(operands), return_mode="median") * 1e3)
            for text in order:
                with chooser.forcing(configs[text]):
                    samples.setdefault((name, text), []).append(
                        do_bench(lambda: bench.run_tilegen(operands), return_mode="median") * 1e3)
    for (dtype, text), values in sorted(samples.items(), key=lambda item: item[0][0]):
        print(f"{dtype:9} {text:40} median {statistics.median(values):8.1f} us  "
              f"(rounds: {', '.join(f'{v:.1f}' for v in values)})")


if __name__ == "__main__":
    main()
