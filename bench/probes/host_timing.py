"""Host time per call, as the probes take it: calls issued back to back without waiting on the
GPU, as `tilegen bench` times host overhead (tilegen.bench.issue_ms), and interleaved rounds of
several callers, so that a slow moment of the host hits every caller alike."""
import statistics

import torch

from tilegen.measure import issue_ms


def per_call_us(fn, calls, warmup=0):
    """Microseconds of host work per call of fn(), after `warmup` calls and an emptied queue."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    return issue_ms(fn, calls) * 1e3


def interleaved_medians(callers, rounds=9, calls=1000):
    """{name: (median, minimum)} of per-call microseconds over `rounds` batches of `calls` calls
    per caller: every caller once first (a warm-up), then rounds in turn, in reverse order every
    other round."""
    for fn in callers.values():
        per_call_us(fn, calls)
    samples = {name: [] for name in callers}
    for turn in range(rounds):
        for name in (list(callers) if turn % 2 == 0 else list(reversed(callers))):
            samples[name].append(per_call_us(callers[name], calls))
    return {name: (statistics.median(values), min(values)) for name, values in samples.items()}
