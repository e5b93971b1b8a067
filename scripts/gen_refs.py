#!/usr/bin/env python3
"""Generate the PyTorch reference files that tests/kernels/test_refs.c compares against.

Usage: python3 scripts/gen_refs.py tests/data/refs      (or `make refs`)

Needs PyTorch on CPU (pip install torch --index-url https://download.pytorch.org/whl/cpu). CI never
runs this script: the generated files are committed, and the C test reads them. Inputs are drawn in
fp32 from a fixed seed; references are computed by PyTorch in float64 from those fp32 inputs (so
they are the exact answer the fp32 kernels approximate), except the casts, which are PyTorch's own
fp32 -> float8/bfloat16 conversions, and AdamW, which is torch.optim.AdamW in fp32.

File format (little-endian), shared with tests/kernels/test_refs.c:
  header: magic b"MOEFREF\\0" (8 bytes), u32 version (REF_VERSION), u32 number of tensors
  tensor: name (32 bytes, NUL padded), u32 dtype (0 f32, 1 i32, 2 u8, 3 u16), u32 ndim (<= 4),
          u32 dims[4] (unused = 1), then prod(dims) elements.
Files: moe_block.bin, attention.bin, attention_sinks.bin, xent.bin, casts.bin, adamw.bin (total
well under 1 MB).
"""
import os
import struct
import sys

import torch
import torch.nn.functional as F

MAGIC = b"MOEFREF\0"
REF_VERSION = 1
DTYPES = {torch.float32: 0, torch.int32: 1, torch.uint8: 2, torch.int16: 3}


def write_refs(path, tensors):
    """tensors: list of (name, tensor); floats are stored as fp32, ints as i32."""
    with open(path, "wb") as f:
        f.write(MAGIC)
        f.write(struct.pack("<II", REF_VERSION, len(tensors)))
        for name, t in tensors:
            t = t.detach().contiguous()
            if t.dtype in (torch.float64, torch.float32):
                t = t.to(torch.float32)
            elif t.dtype == torch.int64:
                t = t.to(torch.int32)
            assert t.dtype in DTYPES, (name, t.dtype)
            assert sys.byteorder == "little"
            assert len(name) < 32 and t.dim() <= 4, name
            dims = list(t.shape) + [1] * (4 - t.dim())
            f.write(name.encode().ljust(32, b"\0"))
            f.write(struct.pack("<II4I", DTYPES[t.dtype], t.dim(), *dims))
            f.write(bytes(t.reshape(-1).view(torch.uint8).tolist()))  # no numpy needed
    print(f"wrote {path} ({os.path.getsize(path)} bytes, {len(tensors)} tensors)")


def rand(gen, *shape, lo=-1.0, hi=1.0):
    return (torch.rand(*shape, generator=gen, dtype=torch.float32) * (hi - lo) + lo)


def swiglu(a):
    gate, up = a.chunk(2, dim=-1)
    return F.silu(gate) * up


def rmsnorm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def moe_block(out_dir):
    """x -> RMSNorm -> softmax router top-2 (normalised) -> expert SwiGLU FFNs -> combine, plus a
    shared expert and the residual; objective sum(dy * y) + switch aux loss (Megatron formula)."""
    gen = torch.Generator().manual_seed(1234)
    M, C, E, K, Fe, Fs = 16, 32, 4, 2, 16, 32
    eps, coeff = 1e-5, 0.01
    inputs = {
        "x": rand(gen, M, C),
        "norm_w": rand(gen, C, lo=0.5, hi=1.5),
        "router_w": rand(gen, E, C, lo=-0.5, hi=0.5),
        "fc1_w": rand(gen, E, 2 * Fe, C, lo=-0.3, hi=0.3),
        "fc2_w": rand(gen, E, C, Fe, lo=-0.3, hi=0.3),
        "sh_fc1_w": rand(gen, 2 * Fs, C, lo=-0.3, hi=0.3),
        "sh_fc2_w": rand(gen, C, Fs, lo=-0.3, hi=0.3),
        "dy": rand(gen, M, C),
    }
    p = {k: v.double().requires_grad_(k != "dy") for k, v in inputs.items()}
    h = rmsnorm(p["x"], p["norm_w"], eps)
    probs = torch.softmax(h @ p["router_w"].T, dim=-1)
    top_v, top_i = torch.topk(probs, K, dim=-1)
    weights = top_v / top_v.sum(-1, keepdim=True)
    counts = torch.bincount(top_i.flatten(), minlength=E).double()
    aux = coeff * E / (K * M * M) * (probs.sum(0) * counts).sum()
    routed = torch.zeros_like(p["x"])
    for t in range(M):
        for k in range(K):
            e = top_i[t, k]
            out = swiglu(h[t] @ p["fc1_w"][e].T) @ p["fc2_w"][e].T
            routed[t] = routed[t] + weights[t, k] * out
    shared = swiglu(h @ p["sh_fc1_w"].T) @ p["sh_fc2_w"].T
    y = p["x"] + routed + shared
    ((p["dy"] * y).sum() + aux).backward()
    tensors = [(k, v) for k, v in inputs.items()]
    tensors += [("y", y), ("aux_loss", aux.reshape(1)), ("topk_idx", top_i),
                ("topk_weight", weights)]
    tensors += [("d_" + k, p[k].grad) for k in inputs if k != "dy"]
    write_refs(os.path.join(out_dir, "moe_block.bin"), tensors)


def rope_half(x, pos, theta):
    """GPT-NeoX / Llama rotate-half rope on the whole head dim; x [T, H, D]."""
    d = x.shape[-1]
    inv = theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = pos.double()[:, None] * inv[None, :]
    cos = torch.cat([ang.cos(), ang.cos()], -1)[:, None, :]
    sin = torch.cat([ang.sin(), ang.sin()], -1)[:, None, :]
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def attention(out_dir):
    """Causal GQA attention (SDPA), its backward, the row log-sum-exp, and rope on q."""
    gen = torch.Generator().manual_seed(99)
    B, T, Hq, Hkv, D = 2, 8, 4, 2, 8
    scale = 1.0 / D ** 0.5
    inputs = {"q": rand(gen, B, T, Hq, D), "k": rand(gen, B, T, Hkv, D),
              "v": rand(gen, B, T, Hkv, D), "dout": rand(gen, B, T, Hq, D)}
    p = {k: v.double().requires_grad_(k != "dout") for k, v in inputs.items()}
    q, k, v = (p[n].transpose(1, 2) for n in ("q", "k", "v"))  # [B, H, T, D]
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=True)
    out = out.transpose(1, 2)  # [B, T, Hq, D]
    (p["dout"] * out).sum().backward()
    kr = k.repeat_interleave(Hq // Hkv, dim=1)
    s = (q @ kr.transpose(-1, -2)) * scale
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    lse = torch.logsumexp(s.masked_fill(~mask, float("-inf")), dim=-1)  # [B, Hq, T]
    pos = torch.arange(T) + 3  # a nonzero start position
    q_rope = torch.stack([rope_half(inputs["q"][b].double(), pos, 10000.0) for b in range(B)])
    tensors = list(inputs.items())
    tensors += [("out", out), ("lse", lse), ("dq", p["q"].grad), ("dk", p["k"].grad),
                ("dv", p["v"].grad), ("rope_pos", pos.to(torch.int32)), ("q_rope", q_rope)]
    write_refs(os.path.join(out_dir, "attention.bin"), tensors)


def attention_window_sinks(out_dir):
    """GPT-OSS attention: causal with a sliding window of W keys and a learned sink logit per head
    that joins the softmax denominator (Hugging Face's eager GptOssAttention: scores concatenated
    with the sinks, softmax, the sink column dropped); forward, log-sum-exp and backward,
    including the sinks' gradient."""
    gen = torch.Generator().manual_seed(17)
    B, T, Hq, Hkv, D, W = 2, 10, 4, 2, 8, 4
    scale = 1.0 / D ** 0.5
    inputs = {"q": rand(gen, B, T, Hq, D), "k": rand(gen, B, T, Hkv, D),
              "v": rand(gen, B, T, Hkv, D), "sinks": rand(gen, Hq, lo=-1.0, hi=2.0),
              "dout": rand(gen, B, T, Hq, D)}
    p = {k: v.double().requires_grad_(k != "dout") for k, v in inputs.items()}
    q, k, v = (p[n].transpose(1, 2) for n in ("q", "k", "v"))  # [B, H, T, D]
    kr = k.repeat_interleave(Hq // Hkv, dim=1)
    vr = v.repeat_interleave(Hq // Hkv, dim=1)
    s = (q @ kr.transpose(-1, -2)) * scale
    i = torch.arange(T).view(T, 1)
    j = torch.arange(T).view(1, T)
    visible = (j <= i) & (j > i - W)
    s = s.masked_fill(~visible, float("-inf"))
    combined = torch.cat([s, p["sinks"].view(1, Hq, 1, 1).expand(B, Hq, T, 1)], dim=-1)
    probs = torch.softmax(combined, dim=-1)[..., :-1]
    out = (probs @ vr).transpose(1, 2)  # [B, T, Hq, D]
    lse = torch.logsumexp(combined, dim=-1)  # [B, Hq, T]
    (p["dout"] * out).sum().backward()
    tensors = list(inputs.items())
    tensors += [("window", torch.tensor([W], dtype=torch.int32)), ("out", out), ("lse", lse),
                ("dq", p["q"].grad), ("dk", p["k"].grad), ("dv", p["v"].grad),
                ("d_sinks", p["sinks"].grad)]
    write_refs(os.path.join(out_dir, "attention_sinks.bin"), tensors)


def xent(out_dir):
    """Token cross-entropy with ignored targets (-100): per-token losses and the gradient of
    their mean over valid tokens."""
    gen = torch.Generator().manual_seed(7)
    M, V = 6, 20
    logits = rand(gen, M, V, lo=-5.0, hi=5.0)
    targets = torch.tensor([3, 19, -100, 0, 10, 9], dtype=torch.int64)
    ld = logits.double().requires_grad_(True)
    losses = F.cross_entropy(ld, targets, reduction="none", ignore_index=-100)
    F.cross_entropy(ld, targets, reduction="mean", ignore_index=-100).backward()
    write_refs(os.path.join(out_dir, "xent.bin"),
               [("logits", logits), ("targets", targets), ("loss", losses),
                ("d_logits", ld.grad)])


def casts(out_dir):
    """PyTorch's fp32 -> float8_e4m3fn / float8_e5m2 / bfloat16 casts on special values, every
    midpoint between neighbouring FP8 values, and log-uniform random values. (PyTorch 2.15's
    e4m3fn cast saturates overflow and Inf to +-448; its e5m2 cast does not. The torch version is
    stored in the file.)"""
    gen = torch.Generator().manual_seed(5)
    vals = [0.0, -0.0, float("inf"), float("-inf"), float("nan"), 448.0, 464.0, 464.5, 480.0,
            500.0, -1e9, 57344.0, 61439.0, 61440.0, 65536.0, 1e-30, -1e-40, 2.0 ** -9, 2.0 ** -10,
            2.0 ** -16, 2.0 ** -17, 3 * 2.0 ** -17, 1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8,
            3.4028234663852886e38]
    for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        codes = torch.arange(256, dtype=torch.uint8).view(dtype).to(torch.float32)
        finite = codes[torch.isfinite(codes) & (codes >= 0)].sort().values.unique()
        vals += ((finite[1:] + finite[:-1]) / 2).tolist()
    mag = torch.pow(2.0, rand(gen, 2000, lo=-20.0, hi=20.0))
    sign = torch.where(rand(gen, 2000) < 0, -1.0, 1.0)
    x = torch.cat([torch.tensor(vals, dtype=torch.float32), (mag * sign).to(torch.float32)])
    write_refs(os.path.join(out_dir, "casts.bin"),
               [("x", x),
                ("e4m3", x.to(torch.float8_e4m3fn).view(torch.uint8)),
                ("e5m2", x.to(torch.float8_e5m2).view(torch.uint8)),
                ("bf16", x.to(torch.bfloat16).view(torch.int16)),
                ("torch_version", torch.tensor(list(torch.__version__.encode()), dtype=torch.uint8))])


def adamw(out_dir):
    """torch.optim.AdamW (single-tensor, fp32) for three steps with given gradients."""
    gen = torch.Generator().manual_seed(3)
    N = 32
    p0 = rand(gen, N)
    grads = rand(gen, 3, N)
    param = torch.nn.Parameter(p0.clone())
    opt = torch.optim.AdamW([param], lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1,
                            foreach=False)
    after = []
    for s in range(3):
        param.grad = grads[s].clone()
        opt.step()
        after.append(param.detach().clone())
    write_refs(os.path.join(out_dir, "adamw.bin"),
               [("p0", p0), ("grads", grads), ("params", torch.stack(after))])


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: gen_refs.py OUT_DIR")
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(0)
    moe_block(out_dir)
    attention(out_dir)
    attention_window_sinks(out_dir)
    xent(out_dir)
    casts(out_dir)
    adamw(out_dir)


if __name__ == "__main__":
    main()
