#!/usr/bin/env bash
# Where one training step of the single-GPU MoE goes on the GPU: every kernel, memcpy and memset
# of `moefold-train --backend cuda` recorded through CUPTI activity tracing (scripts/cupti_profile.c,
# loaded as a CUDA injection library: about a microsecond per activity, so the step keeps its
# shape), summed per name over the last of 6 steps (from the end of the previous step's AdamW
# kernels to the end of its own). The union of busy intervals is the GPU's busy time;
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

CUDA_INJECTION64_PATH=$(readlink -f "$lib") MOE_CUPTI_OUT=$out/trace-6.tsv \
    "$train" --model "$model" --backend cuda --gemm-math bf16 --steps 6 --synthetic \
    --out "$out/run-6.json" -- "${flags[@]}" >"$out/train-6.log" 2>&1 || {
    tail -5 "$out/train-6.log"
    exit 1
}

python3 - "$out" <<'EOF'
import json, sys, collections
out = sys.argv[1]
rows = []
for line in open("%s/trace-6.tsv" % out):
    f = line.rstrip("\n").split("\t")
    if len(f) >= 4:
        rows.append((f[0], int(f[1]), int(f[2]), f[3]))
rows.sort(key=lambda r: r[1])
# Steps end with the optimizer's AdamW kernels: the last step runs from the end of the previous
# burst of them to the end of the last one.
ad = [i for i, r in enumerate(rows) if "adamw" in r[3]]
bursts = []
for i in ad:
    if bursts and i - bursts[-1][-1] < 50:
        bursts[-1].append(i)
    else:
        bursts.append([i])
if len(bursts) < 2:
    sys.exit("gpu-profile: fewer than two optimizer bursts in the trace")
w = rows[bursts[-2][-1] + 1:bursts[-1][-1] + 1]
span = (max(r[2] for r in w) - w[0][1]) * 1e-9
busy, cur = 0, None
for _, s, e, _ in sorted(w, key=lambda r: r[1]):
    if cur is None or s > cur[1]:
        if cur is not None:
            busy += cur[1] - cur[0]
        cur = [s, e]
    elif e > cur[1]:
        cur[1] = e
busy = (busy + cur[1] - cur[0]) * 1e-9
tot, cnt = collections.Counter(), collections.Counter()
for k, s, e, n in w:
    tot[k + " " + n[:90]] += (e - s) * 1e-9
    cnt[k + " " + n[:90]] += 1
run = json.load(open("%s/run-6.json" % out))
print("# the last of 6 steps: %d activities, GPU busy %.1f ms of its %.1f ms (idle %.1f ms: waiting"
      " for the host); moefold-train's median step %.1f ms"
      % (len(w), busy * 1e3, span * 1e3, (span - busy) * 1e3, run["step_time_s"] * 1e3))
print("# phases (ms): " + ", ".join("%s %.1f" % (k, v * 1e3) for k, v in run["time_s"].items() if v > 0))
print("%-92s %7s %9s %6s %8s" % ("kind name", "calls", "ms", "share", "us/call"))
for k, v in tot.most_common(40):
    print("%-92s %7d %9.3f %5.1f%% %8.1f" % (k, cnt[k], v * 1e3, 100 * v / busy, v / cnt[k] * 1e6))
EOF
