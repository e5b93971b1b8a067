"""CUDA-event timing shared by the GPU microbenchmarks (scripts/attn-bench.py, hbm-bench.py,
gemm-bench.py; imported from the script's own folder)."""
import json
import statistics

import torch


def window_ms(run, reps):
    """Median, least and greatest milliseconds of run() between two CUDA events, over reps
    windows."""
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times), min(times), max(times)


def time_ms(fn, warmup, reps):
    """fn() warmed up, then timed one call a window: (median, min, max) milliseconds."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    return window_ms(fn, reps)


def print_json(rows):
    """One JSON line per measurement (the scripts' --json)."""
    for r in rows:
        print(json.dumps(r))
