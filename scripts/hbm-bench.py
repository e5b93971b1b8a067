#!/usr/bin/env python3
"""Memory-bound GPU work in the cost model's terms: achieved fraction of the HBM peak.

Run on a GPU machine with PyTorch (the lent H200: `python3 scripts/hbm-bench.py --hbm-tbps 4.8`).
It times, with CUDA events (random inputs, warm-up first, the median of the repeats):
  - a device-to-device copy of 1 GiB (bytes read + written): the streaming ceiling (gpu.hbm_eff);
  - PyTorch's fused multi-tensor AdamW (torch.optim.AdamW(fused=True)) over fp32 parameters in
    tensors of 4-64 M elements, 28 bytes per parameter (parameter, both moments read and written,
    the gradient read): the rate of gpu.optimizer_eff (model/cost.c prices Megatron's optimizer
    streams at it);
  - one bf16 elementwise kernel (x + y into a third tensor) from 4 MiB to 1 GiB per operand: the
    rate of gpu.elem_eff at the sizes a layer's elementwise work has;
  - cuBLASLt FP8 GEMMs (torch._scaled_mm, e4m3 x e4m3 -> bf16, per-tensor scales) of 4096^3 to
    16384^3 against --fp8-peak-tflops: gemm.max_eff.fp8's curve.
It prints one table; --json adds one JSON line per measurement.
"""
import argparse
import sys

import torch

from cuda_events import print_json, time_ms


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hbm-tbps", type=float, default=4.8, help="HBM peak (H200 4.8, H100 3.35)")
    ap.add_argument("--fp8-peak-tflops", type=float, default=1978.9)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("hbm-bench: no CUDA device", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    peak = a.hbm_tbps * 1e12
    rows = []
    print("# %s, torch %s; HBM peak %.2f TB/s, FP8 dense peak %.1f TFLOPS; median of %d after %d "
          "warm-up" % (torch.cuda.get_device_name(), torch.__version__, a.hbm_tbps,
                       a.fp8_peak_tflops, a.reps, a.warmup))
    print("%-44s %10s %10s %8s %8s" % ("what", "ms", "rate", "of_peak", "spread"))

    def report(what, ms, lo, hi, rate, unit, frac):
        print("%-44s %10.3f %8.1f %s %8.3f %7.1f%%" % (what, ms, rate, unit, frac,
                                                       100.0 * (hi - lo) / ms))
        rows.append({"what": what, "ms": ms, "rate": rate, "unit": unit, "fraction": frac})

    # Device copy, 1 GiB.
    n = 1 << 28
    src = torch.rand(n, device=dev)
    dst = torch.empty_like(src)
    ms, lo, hi = time_ms(lambda: dst.copy_(src), a.warmup, a.reps)
    bw = 2 * n * 4 / (ms * 1e-3)
    report("copy 1 GiB (read + write)", ms, lo, hi, bw / 1e9, "GB/s", bw / peak)
    del src, dst

    # Fused AdamW over fp32 parameters.
    for per, count in [(1 << 22, 64), (1 << 24, 16), (1 << 26, 4)]:
        params = [torch.nn.Parameter(torch.rand(per, device=dev)) for _ in range(count)]
        for p in params:
            p.grad = torch.rand_like(p)
        opt = torch.optim.AdamW(params, lr=1e-4, fused=True)
        opt.step()  # creates the moments
        ms, lo, hi = time_ms(opt.step, a.warmup, a.reps)
        total = per * count
        bw = 28.0 * total / (ms * 1e-3)
        report("fused AdamW %d x %dM fp32 params (28 B/param)" % (count, per >> 20), ms, lo, hi,
               bw / 1e9, "GB/s", bw / peak)
        del params, opt
        torch.cuda.empty_cache()

    # One bf16 elementwise kernel: z = x + y.
    for mib in [4, 16, 64, 256, 1024]:
        n = mib * (1 << 20) // 2
        x = torch.rand(n, device=dev, dtype=torch.bfloat16)
        y = torch.rand(n, device=dev, dtype=torch.bfloat16)
        z = torch.empty_like(x)
        ms, lo, hi = time_ms(lambda: torch.add(x, y, out=z), a.warmup, a.reps)
        bw = 3 * n * 2 / (ms * 1e-3)
        report("bf16 add, %d MiB per operand" % mib, ms, lo, hi, bw / 1e9, "GB/s", bw / peak)
        del x, y, z
    torch.cuda.empty_cache()

    # FP8 GEMMs through cuBLASLt.
    for d in [4096, 8192, 16384]:
        try:
            x = torch.randn(d, d, device=dev).to(torch.float8_e4m3fn)
            w = torch.randn(d, d, device=dev).to(torch.float8_e4m3fn).t()
            one = torch.tensor(1.0, device=dev)
            f = lambda: torch._scaled_mm(x, w, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
            ms, lo, hi = time_ms(f, a.warmup, a.reps)
        except (RuntimeError, AttributeError) as exc:
            print("fp8 gemm %d^3: unsupported (%s)" % (d, str(exc).split("\n")[0][:80]))
            continue
        tf = 2.0 * d ** 3 / (ms * 1e-3) / 1e12
        report("fp8 e4m3 GEMM %d^3 (cuBLASLt)" % d, ms, lo, hi, tf, "TF  ", tf / a.fp8_peak_tflops)
        del x, w
    # And BF16 at the same sizes, for the ratio.
    for d in [4096, 8192, 16384]:
        x = torch.randn(d, d, device=dev, dtype=torch.bfloat16)
        w = torch.randn(d, d, device=dev, dtype=torch.bfloat16)
        ms, lo, hi = time_ms(lambda: x @ w, a.warmup, a.reps)
        tf = 2.0 * d ** 3 / (ms * 1e-3) / 1e12
        report("bf16 GEMM %d^3 (cuBLAS)" % d, ms, lo, hi, tf, "TF  ", tf / (a.fp8_peak_tflops / 2))
        del x, w
    if a.json:
        print_json(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
