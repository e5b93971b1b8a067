#!/usr/bin/env bash
# Where one training step of the single-GPU MoE goes on the GPU: every kernel of one
# `moefold-train --backend cuda` step timed by Nsight Compute (gpu__time_duration only: no replay,
# caches and clocks left alone), summed per kernel name, against the same step's wall time
# without the profiler. The sum over kernels is the GPU's busy time; the rest of the step is the
# GPU waiting for the host (launches, synchronisations).
#
# Usage: scripts/gpu-profile.sh BUILD_DIR [MODEL_JSON] [-- TRAINING FLAGS]
#   (after scripts/gpu-check.sh BUILD_DIR has built moefold-train; defaults: gpu-moe, one
#   micro-batch of 2 x 2048 tokens, BF16 GEMM math). Output: a table on stdout; the per-kernel CSV
#   in $GPU_PROFILE_DIR (default BUILD_DIR/gpu-profile).
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
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ -x "$train" ] || { echo "gpu-profile: $train missing (run scripts/gpu-check.sh $build first)"; exit 1; }
[ -n "$ncu" ] || { echo "gpu-profile: ncu (Nsight Compute) not found"; exit 1; }

# The step without the profiler (median of steps 2..4).
"$train" --model "$model" --backend cuda --gemm-math bf16 --steps 4 --synthetic \
    --out "$out/run.json" -- "${flags[@]}" >"$out/train.log" 2>&1 || { tail -5 "$out/train.log"; exit 1; }
# One step under the profiler: every kernel's duration.
timeout "${GPU_PROFILE_TIMEOUT_S:-240}" "$ncu" --metrics gpu__time_duration.sum --csv \
    --cache-control none --clock-control none \
    "$train" --model "$model" --backend cuda --gemm-math bf16 --steps 1 --synthetic \
    --out "$out/run-ncu.json" -- "${flags[@]}" >"$out/ncu.csv" 2>"$out/ncu.log"
echo "gpu-profile: ncu exit $? ($(grep -c gpu__time_duration "$out/ncu.csv") kernels)"
python3 - "$out/ncu.csv" "$out/run.json" <<'EOF'
import csv, json, sys, collections
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
head, data = rows[0], rows[1:]
ki, mi, vi, ui = head.index("Kernel Name"), head.index("Metric Name"), head.index("Metric Value"), head.index("Metric Unit")
scale = {"nsecond": 1e-9, "usecond": 1e-6, "msecond": 1e-3, "second": 1.0}
tot, cnt = collections.Counter(), collections.Counter()
for r in data:
    if r[mi] != "gpu__time_duration.sum":
        continue
    name = r[ki].split("(")[0][:70]
    tot[name] += float(r[vi].replace(",", "")) * scale.get(r[ui], 1e-9)
    cnt[name] += 1
run = json.load(open(sys.argv[2]))
step = run["step_time_s"]
busy = sum(tot.values())
print("# one step: %d kernels, GPU busy %.1f ms (profiled step: all kernels incl. the first step's"
      " set-up); unprofiled step %.1f ms" % (sum(cnt.values()), busy * 1e3, step * 1e3))
print("# phases (unprofiled, ms): " + ", ".join("%s %.1f" % (k, v * 1e3) for k, v in run["time_s"].items() if v > 0))
print("%-70s %7s %10s %7s" % ("kernel", "calls", "total_ms", "share"))
for name, t in tot.most_common(30):
    print("%-70s %7d %10.3f %6.1f%%" % (name, cnt[name], t * 1e3, 100 * t / busy))
EOF
