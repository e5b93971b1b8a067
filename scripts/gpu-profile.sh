#!/usr/bin/env bash
# Where one training step of the single-GPU MoE goes on the GPU: every kernel, memcpy and memset
# of `moefold-train --backend cuda` recorded through CUPTI activity tracing (scripts/cupti_profile.c,
# loaded as a CUDA injection library: about a microsecond per activity, so the step keeps its
# shape), summed per name. Two runs, of 2 and of 6 steps; their difference over 4 is one steady
# step, set-up and the first step excluded. The union of busy intervals is the GPU's busy time;
# the rest of the step is the GPU waiting for the host (launches, synchronisations).
# (Nsight Compute was tried first: one gpu-moe step did not finish in 150 s under it.)
#
# Usage: scripts/gpu-profile.sh BUILD_DIR [MODEL_JSON] [-- TRAINING FLAGS]
#   after scripts/gpu-check.sh BUILD_DIR has built moefold-train (run it in the same environment:
#   gpu-check's carried libraries need its LD_LIBRARY_PATH/OPAL_PREFIX). Defaults: gpu-moe, one
#   micro-batch of 2 x 2048 tokens, BF16 GEMM math. Output: a table on stdout; the traces in
#   $GPU_PROFILE_DIR (default BUILD_DIR/gpu-profile). Needs CUPTI's headers (the toolkit's include/
#   or extras/CUPTI/include) to build the library, else MOE_CUPTI_LIB naming a built one.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
build=${1:?usage: scripts/gpu-profile.sh BUILD_DIR [MODEL_JSON] [-- FLAGS]}
shift
model=tests/data/models/gpu-moe.json
if [ $# -gt 0 ] && [ "$1" != "--" ]; then
    model=$1
    shift
fi
[ "${1:-}" = "--" ] && shift
flags=("$@")
[ ${#flags[@]} -eq 0 ] && flags=(--micro-batch-size 2 --global-batch-size 2 --seq-length 2048
    --moe-grouped-gemm)
out=${GPU_PROFILE_DIR:-$build/gpu-profile}
mkdir -p "$out"
train=$build/bin/moefold-train
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ -x "$train" ] || {
    echo "gpu-profile: $train missing (run scripts/gpu-check.sh $build first)"
    exit 1
}
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
cuda_home=$(dirname "$(dirname "$nvcc")")
lib=
for inc in "$cuda_home/include" "$cuda_home/extras/CUPTI/include"; do
    [ -f "$inc/cupti.h" ] || continue
    lib=$out/libmoe_cupti_profile.so
    ${CC:-cc} -std=c11 -D_GNU_SOURCE -O2 -shared -fPIC -I"$inc" -I"$cuda_home/include" \
        -o "$lib" scripts/cupti_profile.c -L"$cuda_home/lib64" \
        -L"$cuda_home/extras/CUPTI/lib64" -lcupti || lib=
    break
done
[ -z "$lib" ] && lib=${MOE_CUPTI_LIB:-}
if [ -z "$lib" ] || [ ! -f "$lib" ]; then
    echo "gpu-profile: no CUPTI headers under $cuda_home and MOE_CUPTI_LIB unset"
    exit 1
fi
for d in "$cuda_home/lib64" "$cuda_home/extras/CUPTI/lib64"; do
    if ls "$d"/libcupti.so* >/dev/null 2>&1; then
        export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
done

for steps in 2 6; do
    CUDA_INJECTION64_PATH=$(readlink -f "$lib") MOE_CUPTI_OUT=$out/trace-$steps.tsv \
        "$train" --model "$model" --backend cuda --gemm-math bf16 --steps $steps --synthetic \
        --out "$out/run-$steps.json" -- "${flags[@]}" >"$out/train-$steps.log" 2>&1 || {
        tail -5 "$out/train-$steps.log"
        exit 1
    }
done

python3 - "$out" <<'EOF'
import json, sys, collections
out = sys.argv[1]
def load(steps):
    """Per-name totals and calls, and (activities, span, busy union) of one trace."""
    tot, cnt, iv = collections.Counter(), collections.Counter(), []
    for line in open("%s/trace-%d.tsv" % (out, steps)):
        f = line.rstrip("\n").split("\t")
        if len(f) < 4:
            continue
        s, e = int(f[1]), int(f[2])
        key = f[0] + " " + f[3][:90]
        tot[key] += (e - s) * 1e-9
        cnt[key] += 1
        iv.append((s, e))
    iv.sort()
    busy, cur_s, cur_e = 0, None, None
    for s, e in iv:
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                busy += cur_e - cur_s
            cur_s, cur_e = s, e
        elif e > cur_e:
            cur_e = e
    if cur_e is not None:
        busy += cur_e - cur_s
    span = (iv[-1][1] - iv[0][0]) if iv else 0
    return tot, cnt, (len(iv), span * 1e-9, busy * 1e-9, 0)
t2, c2, h2 = load(2)
t6, c6, h6 = load(6)
run = json.load(open("%s/run-6.json" % out))
per = {k: (t6[k] - t2.get(k, 0.0)) / 4 for k in t6}
calls = {k: (c6[k] - c2.get(k, 0)) / 4 for k in c6}
busy, span, acts = (h6[2] - h2[2]) / 4, (h6[1] - h2[1]) / 4, (h6[0] - h2[0]) / 4
print("# one steady step (runs of 6 and 2 steps, difference / 4): %.0f activities, GPU busy %.1f ms"
      " of a %.1f ms span; moefold-train's median step %.1f ms"
      % (acts, busy * 1e3, span * 1e3, run["step_time_s"] * 1e3))
print("# phases (ms): " + ", ".join("%s %.1f" % (k, v * 1e3) for k, v in run["time_s"].items() if v > 0))
print("%-92s %8s %9s %6s %8s" % ("kind name", "calls", "ms", "share", "us/call"))
for k, v in sorted(per.items(), key=lambda kv: -kv[1])[:40]:
    n = calls.get(k, 0)
    print("%-92s %8.0f %9.3f %5.1f%% %8.1f" % (k, n, v * 1e3, 100 * v / busy if busy else 0,
                                              v / n * 1e6 if n else 0))
EOF
