#!/usr/bin/env python3
"""Fused causal attention on one GPU: achieved TFLOPS and efficiency per head shape and backend.

Run on a GPU machine with PyTorch (the lent H200: `python3 scripts/attn-bench.py`). For each shape
(batch B, query heads Hq, key/value heads Hkv, sequence S, query-key dim Dqk, value dim Dv) and each
of PyTorch's fused SDPA backends (cuDNN, which Transformer Engine's fused attention also runs on
Hopper, and PyTorch's FlashAttention-2), it times the forward and the forward + backward with CUDA
events (random bf16 inputs, warm-up first, the median of the repeats) and prints the efficiency in
moefold's convention (model/compute.c): forward FLOPs 2 * B * S * (S / 2) * Hq * (Dqk + Dv) for a
causal mask, backward 2.5 times that, over the dense BF16 peak given by --peak-tflops (989.4: H100
and H200 SXM). One JSON line per measurement follows the table when --json is given.
"""
import argparse
import sys

import torch

from cuda_events import print_json, time_ms
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SHAPES = [
    # name, B, Hq, Hkv, S, Dqk, Dv
    ("mha-d128 (FA3 prior's shape)", 4, 48, 48, 4096, 128, 128),
    ("qwen3 gqa 32/2 d128 (TP2)", 2, 32, 2, 4096, 128, 128),
    ("mla dsv3 d192/128 h64 (TP2)", 2, 64, 64, 4096, 192, 128),
    ("mla dsv3 d192/128 h128 (TP1)", 1, 128, 128, 4096, 192, 128),
    ("mha-d64 h64", 2, 64, 64, 4096, 64, 64),
    ("mha-d256 h16", 4, 16, 16, 4096, 256, 256),
]
BACKENDS = [("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash2", SDPBackend.FLASH_ATTENTION)]


def measure(shape, backend, warmup, reps):
    _, b, hq, hkv, s, dqk, dv = shape
    dev = torch.device("cuda")
    q = torch.randn(b, hq, s, dqk, device=dev, dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(b, hkv, s, dqk, device=dev, dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(b, hkv, s, dv, device=dev, dtype=torch.bfloat16, requires_grad=True)
    gqa = hq != hkv
    with sdpa_kernel([backend]):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        dout = torch.randn_like(out)

        def fwd():
            with torch.no_grad():
                F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)

        def fwd_bwd():
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
            torch.autograd.grad(o, (q, k, v), dout)

        f = time_ms(fwd, warmup, reps)
        fb = time_ms(fwd_bwd, warmup, reps)
    return f, fb


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--peak-tflops", type=float, default=989.4)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("attn-bench: no CUDA device", file=sys.stderr)
        return 2
    name = torch.cuda.get_device_name()
    print("# %s, torch %s, cuDNN %s; peak %.1f TFLOPS (bf16 dense); median of %d after %d warm-up"
          % (name, torch.__version__, torch.backends.cudnn.version(), a.peak_tflops, a.reps,
             a.warmup))
    print("%-30s %-7s %9s %9s %8s %8s %9s %9s %8s %8s" % (
        "shape", "backend", "fwd_ms", "bwd_ms", "fwd_TF", "bwd_TF", "fwd_eff", "bwd_eff",
        "fwd_rng", "bwd_rng"))
    # The machine's dense BF16 GEMM rate, for scale (8192^3, random inputs).
    x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    g, _, _ = time_ms(lambda: x @ y, a.warmup, a.reps)
    gemm_tf = 2.0 * 8192 ** 3 / (g * 1e-3) / 1e12
    print("# dense bf16 GEMM 8192^3: %.1f TFLOPS = %.3f of the peak" % (gemm_tf, gemm_tf / a.peak_tflops))
    del x, y
    rows = []
    for shape in SHAPES:
        _, b, hq, hkv, s, dqk, dv = shape
        flops_f = 2.0 * b * s * (s / 2.0) * hq * (dqk + dv)
        for bname, backend in BACKENDS:
            try:
                (f, fmin, fmax), (fb, fbmin, fbmax) = measure(shape, backend, a.warmup, a.reps)
            except RuntimeError as exc:  # a backend that does not take the shape
                print("%-30s %-7s unsupported: %s" % (shape[0], bname, str(exc).split("\n")[0][:80]))
                continue
            bwd = fb - f
            tf_f = flops_f / (f * 1e-3) / 1e12
            tf_b = 2.5 * flops_f / (bwd * 1e-3) / 1e12
            print("%-30s %-7s %9.3f %9.3f %8.1f %8.1f %9.3f %9.3f %7.1f%% %7.1f%%" % (
                shape[0], bname, f, bwd, tf_f, tf_b, tf_f / a.peak_tflops, tf_b / a.peak_tflops,
                100.0 * (fmax - fmin) / f, 100.0 * (fbmax - fbmin) / fb))
            rows.append({"shape": shape[0], "backend": bname, "B": b, "Hq": hq, "Hkv": hkv, "S": s,
                         "Dqk": dqk, "Dv": dv, "fwd_ms": f, "bwd_ms": bwd, "fwd_tflops": tf_f,
                         "bwd_tflops": tf_b, "fwd_eff": tf_f / a.peak_tflops,
                         "bwd_eff": tf_b / a.peak_tflops, "device": name})
            torch.cuda.empty_cache()
    if a.json:
        print_json(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
