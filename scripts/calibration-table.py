#!/usr/bin/env python3
"""The README's table of software figures, from the cluster files (`python3 scripts/calibration-table.py`).

One row per figure the fit may move (each with a `prior`), plus gpu.optimizer_eff and
gemm.grouped_half_dim (measured, not fitted): the Hopper reference (dgx-h100) and the Blackwell one
(gb200-nvl72). Fitted figures are bold with their standard error and the runs that constrain them;
the rest show their prior. Paste the output over the table under "The current figures".
"""
import json
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
ROWS = ["gpu.attn_fwd_eff", "gpu.attn_bwd_eff", "gpu.hbm_eff", "gpu.elem_eff", "gpu.optimizer_eff",
        "gpu.kernel_launch_us", "gpu.host_cpp_op_us", "gpu.host_param_us", "gemm.max_eff.bf16",
        "gemm.max_eff.fp8", "gemm.recipe_eff.fp8_tensorwise", "gemm.recipe_eff.fp8_delayed",
        "gemm.recipe_eff.fp8_blockwise", "gemm.grouped_eff", "gemm.grouped_half_dim",
        "scaleout.a2a_eff", "dispatch.deepep_intra_eff", "dispatch.deepep_inter_eff",
        "dispatch.hybridep_intra_eff", "dispatch.hybridep_inter_eff", "dispatch.permute_bytes_eff",
        "overheads.moe_host_sync_us", "overheads.step_fixed_ms", "overheads.overlap_eff",
        "overheads.a2a_overlap_loss", "overheads.ep_overlap_eff", "gemm.recipe_eff.mxfp8",
        "gemm.recipe_eff.nvfp4"]


def figure(cluster, path):
    node = cluster
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def num(v):
    return "%.4g" % v


def cell(f, generation):
    if f is None:
        return "\u2014"
    src = f.get("source", "")
    prior = f.get("prior")
    if generation == "hopper" and "unused on Hopper" in src:
        return "\u2014"
    if prior is None:
        if src.startswith("microbenchmark"):
            return "%s (measured; not fitted)" % num(f["value"])
        return "%s (not fitted)" % num(f["value"])
    p = "prior %s \u00b1 %s" % (num(prior["value"]), num(prior["sd"]))
    m = re.match(r"fit: ([^(]*) \(", src)
    if not m:
        return "%s \u00b1 %s (prior)" % (num(prior["value"]), num(prior["sd"]))
    runs = m.group(1).strip()
    bound = ""
    for side in ("min", "max"):
        if side in prior and abs(f["value"] - prior[side]) < 1e-9:
            bound = " at its %s bound" % ("lower" if side == "min" else "upper")
    se = "" if bound else " \u00b1 %s" % num(f.get("se", 0))
    return "**%s**%s%s (fit: %s; %s)" % (num(f["value"]), se, bound, runs, p)


def main():
    files = {}
    for name in ("dgx-h100", "gb200-nvl72"):
        with open(os.path.join(ROOT, "topologies", name + ".json")) as fh:
            files[name] = json.load(fh)
    print("| figure | Hopper (`dgx-h100`) | Blackwell (`gb200-nvl72`) |")
    print("|---|---|---|")
    for row in ROWS:
        print("| `%s` | %s | %s |" % (row, cell(figure(files["dgx-h100"], row), "hopper"),
                                     cell(figure(files["gb200-nvl72"], row), "blackwell")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
