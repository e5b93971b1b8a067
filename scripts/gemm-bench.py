#!/usr/bin/env python3
"""GEMM efficiency by shape on a GPU, in the cost model's terms (model/cluster.h, moe_gemm_eff).

Run on a GPU machine with PyTorch (the lent H200: `python3 scripts/gemm-bench.py --json`). It times,
with CUDA events, random BF16 (and FP8) operands rotated through enough copies to keep them out of
the L2 cache (as a training step's weights are), the median of the repeats after a warm-up:
  - square BF16 GEMMs n^3, 1024-16384: the curve eff(F) = max_eff (1 - exp(-F / half_flops));
  - narrow GEMMs m x n x k with m (a token count) from 16 to 16384 against wide n, k, in the three
    directions a linear runs (forward m x n x k, backward-data m x k x n, backward-weight n x k
    reducing over m): the narrow-dimension term d / (d + half_dim) on top of the curve;
  - grouped expert GEMMs: G experts of m rows each in one call (torch._grouped_mm, the CUTLASS
    grouped kernel) and as G cuBLAS calls over 4 streams (Transformer Engine's multi-stream
    grouped GEMM), against one GEMM of the same G m rows: gemm.grouped_eff and grouped_half_dim
    at the expert shapes of Qwen3-235B, DeepSeek-V3 and Qwen3-30B;
  - FP8 (torch._scaled_mm, per-tensor scales) narrow GEMMs: whether the term is the same there;
  - the grouped GEMM's backward: backward-data (G experts' dy x W, torch._grouped_mm) and
    backward-weight (each expert's x^T dy over its own m rows: a grouped GEMM split along its
    reduction), against the forward of the same shape: gemm.grouped_{dgrad,wgrad}_{eff,half_dim};
  - kernel-only times of the narrow and grouped GEMMs at few rows (--only graph): the calls of a
    window captured in a CUDA graph and replayed, so that Python's ~20 us per call does not hide
    kernels of a few microseconds.
--only SECTIONS picks sections (square,narrow,grouped,fp8,grouped-bwd,graph; default all).
It prints one table; --json adds one JSON line per measurement (m, n, k, groups, direction,
kernel, ms, TFLOPS, fraction of the dense peak).
"""
import argparse
import sys

import torch

from cuda_events import print_json, window_ms

L2_BYTES = 50 << 20  # H100 / H200 L2 (50 MiB): each timed call reads operands not left in it


def timed(fn_of_set, sets, warmup, reps):
    """Median, min, max milliseconds per call of fn_of_set(i) over rotating operand sets; calls are
    batched between two events so each window is at least ~0.5 ms."""
    for i in range(warmup):
        fn_of_set(i % sets)
    torch.cuda.synchronize()
    once, _, _ = window_ms(lambda: fn_of_set(0), 1)
    inner = max(1, min(200, int(0.5 / max(once, 1e-3))))
    calls = iter(range(1 << 30))

    def window():
        for _ in range(inner):
            fn_of_set(next(calls) % sets)

    med, lo, hi = window_ms(window, reps)
    return med / inner, lo / inner, hi / inner


def num_sets(bytes_per_set):
    return max(1, min(16, -(-2 * L2_BYTES // max(1, bytes_per_set))))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bf16-peak-tflops", type=float, default=989.4, help="H100/H200 SXM dense")
    ap.add_argument("--fp8-peak-tflops", type=float, default=1978.9)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--only", default="square,narrow,grouped,fp8,grouped-bwd,graph")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("gemm-bench: no CUDA device", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    rows = []
    print("# %s, torch %s, CUDA %s; BF16 peak %.1f, FP8 %.1f TFLOPS; median of %d after %d "
          "warm-up, operands rotated past the %d MiB L2" %
          (torch.cuda.get_device_name(), torch.__version__, torch.version.cuda,
           a.bf16_peak_tflops, a.fp8_peak_tflops, a.reps, a.warmup, L2_BYTES >> 20))
    print("%-10s %-8s %6s %6s %6s %4s %10s %8s %7s %7s" %
          ("kernel", "dir", "m", "n", "k", "G", "ms", "TFLOPS", "of_peak", "spread"))

    def report(kernel, direction, m, n, k, g, ms, lo, hi, peak):
        tf = 2.0 * m * n * k * g / (ms * 1e-3) / 1e12
        print("%-10s %-8s %6d %6d %6d %4d %10.4f %8.1f %7.3f %6.1f%%" %
              (kernel, direction, m, n, k, g, ms, tf, tf / peak, 100.0 * (hi - lo) / ms))
        rows.append({"kernel": kernel, "dir": direction, "m": m, "n": n, "k": k, "groups": g,
                     "ms": round(ms, 5), "tflops": round(tf, 2), "fraction": round(tf / peak, 4)})
        sys.stdout.flush()

    bf = torch.bfloat16
    only = set(a.only.split(","))

    def dense(m, n, k, direction="fwd", kernel="cublas"):
        # y[m, n] = x[m, k] w[n, k]^T (forward); backward-data dx[m, k] = dy[m, n] w[n, k];
        # backward-weight dw[n, k] = dy[m, n]^T x[m, k] (reduces over m).
        s = num_sets(2 * (m * k + n * k + m * n))
        xs = [torch.randn(m, k, device=dev, dtype=bf) for _ in range(s)]
        ws = [torch.randn(n, k, device=dev, dtype=bf) for _ in range(s)]
        dys = [torch.randn(m, n, device=dev, dtype=bf) for _ in range(s)]
        if direction == "fwd":
            f = lambda i: torch.mm(xs[i], ws[i].t())
        elif direction == "dgrad":
            f = lambda i: torch.mm(dys[i], ws[i])
        else:
            f = lambda i: torch.mm(dys[i].t(), xs[i])
        ms, lo, hi = timed(f, s, a.warmup, a.reps)
        report(kernel, direction, m, n, k, 1, ms, lo, hi, a.bf16_peak_tflops)
        del xs, ws, dys

    # 1. Square BF16.
    for d in ([1024, 2048, 4096, 8192, 16384] if "square" in only else []):
        dense(d, d, d, "fwd", "square")

    # 2. Narrow BF16: m tokens against wide n, k; three directions.
    ms_list = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
    for (n, k) in ([(4096, 4096), (3072, 4096), (4096, 1536)] if "narrow" in only else []):
        for direction in ["fwd", "dgrad", "wgrad"]:
            for m in ms_list:
                dense(m, n, k, direction)
    torch.cuda.empty_cache()

    # 3. Grouped expert GEMMs (forward): G experts of m rows, fc1 (2 F x H) and fc2 (H x F).
    shapes = [("qwen3-235b", 4096, 1536), ("deepseek-v3", 7168, 2048), ("qwen3-30b", 2048, 768)]
    streams = [torch.cuda.Stream() for _ in range(4)]
    have_grouped = hasattr(torch, "_grouped_mm")
    for (name, h, f) in (shapes if "grouped" in only else []):
        for (n, k, what) in [(2 * f, h, "fc1"), (h, f, "fc2")]:
            for g in [4, 8, 16, 32]:
                for m in [128, 256, 512, 1024, 2048, 4096]:
                    if g * m > 65536:
                        continue
                    s = num_sets(2 * (g * m * k + g * n * k + g * m * n))
                    xs = [torch.randn(g * m, k, device=dev, dtype=bf) for _ in range(s)]
                    ws = [torch.randn(g, n, k, device=dev, dtype=bf) for _ in range(s)]
                    offs = torch.arange(1, g + 1, device=dev, dtype=torch.int32) * m
                    if have_grouped:
                        try:
                            fn = lambda i: torch._grouped_mm(xs[i], ws[i].transpose(-2, -1),
                                                             offs=offs, out_dtype=bf)
                            ms, lo, hi = timed(fn, s, a.warmup, a.reps)
                            report("grouped", "%s-%s" % (name, what), m, n, k, g, ms, lo, hi,
                                   a.bf16_peak_tflops)
                        except (RuntimeError, TypeError) as exc:
                            print("grouped %s %s: unsupported (%s)" %
                                  (name, what, str(exc).split("\n")[0][:100]))
                            have_grouped = False

                    def multi(i):
                        cur = torch.cuda.current_stream()
                        for e in range(g):
                            st = streams[e % 4]
                            st.wait_stream(cur)
                            with torch.cuda.stream(st):
                                torch.mm(xs[i][e * m:(e + 1) * m], ws[i][e].t())
                        for st in streams:
                            cur.wait_stream(st)

                    ms, lo, hi = timed(multi, s, a.warmup, a.reps)
                    report("multistrm", "%s-%s" % (name, what), m, n, k, g, ms, lo, hi,
                           a.bf16_peak_tflops)
                    fn = lambda i: torch.mm(xs[i], ws[i][0].t())
                    ms, lo, hi = timed(fn, s, a.warmup, a.reps)
                    report("dense", "%s-%s" % (name, what), g * m, n, k, 1, ms, lo, hi,
                           a.bf16_peak_tflops)
                    del xs, ws
            torch.cuda.empty_cache()

    # 4. FP8 narrow forward (per-tensor scales, cuBLASLt).
    one = torch.tensor(1.0, device=dev)
    for m in (ms_list if "fp8" in only else []):
        n = k = 4096
        try:
            s = num_sets(m * k + n * k + 2 * m * n)
            xs = [torch.randn(m, k, device=dev).to(torch.float8_e4m3fn) for _ in range(s)]
            ws = [torch.randn(n, k, device=dev).to(torch.float8_e4m3fn) for _ in range(s)]
            fn = lambda i: torch._scaled_mm(xs[i], ws[i].t(), scale_a=one, scale_b=one,
                                            out_dtype=bf)
            ms, lo, hi = timed(fn, s, a.warmup, a.reps)
            report("fp8", "fwd", m, n, k, 1, ms, lo, hi, a.fp8_peak_tflops)
        except (RuntimeError, AttributeError) as exc:
            print("fp8 %d: unsupported (%s)" % (m, str(exc).split("\n")[0][:100]))
            break
    # 5. The grouped GEMM's backward against its forward, at the forward's shapes.
    for (name, h, f) in (shapes if "grouped-bwd" in only else []):
        for (n, k, what) in [(2 * f, h, "fc1"), (h, f, "fc2")]:
            for g in [4, 16]:
                for m in [128, 256, 512, 1024, 2048, 4096]:
                    s = num_sets(2 * (2 * g * m * k + g * n * k + g * m * n))
                    xs = [torch.randn(g * m, k, device=dev, dtype=bf) for _ in range(s)]
                    ws = [torch.randn(g, n, k, device=dev, dtype=bf) for _ in range(s)]
                    dys = [torch.randn(g * m, n, device=dev, dtype=bf) for _ in range(s)]
                    dyts = [d.t().contiguous().t() for d in dys]  # column-major copies
                    offs = torch.arange(1, g + 1, device=dev, dtype=torch.int32) * m
                    cases = [
                        ("fwd", lambda i: torch._grouped_mm(xs[i], ws[i].transpose(-2, -1),
                                                            offs=offs, out_dtype=bf)),
                        ("dgrad", lambda i: torch._grouped_mm(dys[i], ws[i], offs=offs,
                                                              out_dtype=bf)),
                        ("wgrad", lambda i: torch._grouped_mm(dyts[i].t(), xs[i], offs=offs,
                                                              out_dtype=bf)),
                    ]
                    xcms = [x.t().contiguous().t() for x in xs]  # column-major copies
                    cases.append(("wgrad", lambda i: torch._grouped_mm(dyts[i].t(), xcms[i],
                                                                       offs=offs, out_dtype=bf)))
                    done = set()
                    for (direction, fn) in cases:
                        if direction in done:
                            continue
                        try:
                            ms, lo, hi = timed(fn, s, a.warmup, a.reps)
                            report("grouped-" + direction, "%s-%s" % (name, what), m, n, k, g, ms,
                                   lo, hi, a.bf16_peak_tflops)
                            done.add(direction)
                        except (RuntimeError, TypeError) as exc:
                            print("grouped %s %s %s: unsupported (%s)" %
                                  (direction, name, what, str(exc).split("\n")[0][:100]))
                    del xs, ws, dys, dyts, xcms
            torch.cuda.empty_cache()

    # 6. Kernel-only: the window's calls captured in one CUDA graph, replayed.
    def graphed(fn, sets, calls):
        for i in range(3):
            fn(i % sets)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for j in range(calls):
                fn(j % sets)
        for _ in range(a.warmup):
            graph.replay()
        torch.cuda.synchronize()
        med, lo, hi = window_ms(graph.replay, a.reps)
        return med / calls, lo / calls, hi / calls

    if "graph" in only:
        for (n, k) in [(4096, 4096), (3072, 4096), (4096, 1536)]:
            for m in [16, 32, 64, 128, 256, 512, 1024, 2048]:
                s = num_sets(2 * (m * k + n * k + m * n))
                xs = [torch.randn(m, k, device=dev, dtype=bf) for _ in range(s)]
                ws = [torch.randn(n, k, device=dev, dtype=bf) for _ in range(s)]
                dys = [torch.randn(m, n, device=dev, dtype=bf) for _ in range(s)]
                for (direction, fn) in [("fwd", lambda i: torch.mm(xs[i], ws[i].t())),
                                        ("dgrad", lambda i: torch.mm(dys[i], ws[i])),
                                        ("wgrad", lambda i: torch.mm(dys[i].t(), xs[i]))]:
                    ms, lo, hi = graphed(fn, s, 64)
                    report("graph", direction, m, n, k, 1, ms, lo, hi, a.bf16_peak_tflops)
                del xs, ws, dys
        for (name, h, f) in shapes[:1]:
            for (n, k, what) in [(2 * f, h, "fc1"), (h, f, "fc2")]:
                for g in [4, 16]:
                    for m in [128, 256, 512]:
                        s = num_sets(2 * (g * m * k + g * n * k + g * m * n))
                        xs = [torch.randn(g * m, k, device=dev, dtype=bf) for _ in range(s)]
                        ws = [torch.randn(g, n, k, device=dev, dtype=bf) for _ in range(s)]
                        offs = torch.arange(1, g + 1, device=dev, dtype=torch.int32) * m
                        try:
                            fn = lambda i: torch._grouped_mm(xs[i], ws[i].transpose(-2, -1),
                                                             offs=offs, out_dtype=bf)
                            ms, lo, hi = graphed(fn, s, 32)
                            report("graph-grp", "%s-%s" % (name, what), m, n, k, g, ms, lo, hi,
                                   a.bf16_peak_tflops)
                        except (RuntimeError, TypeError) as exc:
                            print("graphed grouped: unsupported (%s)" %
                                  str(exc).split("\n")[0][:100])
                        del xs, ws
        torch.cuda.empty_cache()

    if a.json:
        print_json(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
