#!/usr/bin/env bash
# The README's main job (`make demo`): plan DeepSeek-V3 on a built-in GPU cluster, show the prediction
# for a published layout and the accuracy table, then (when the engine is built) close the loop on this
# host: plan a small MoE for the local cluster, train it under mpirun and compare predicted vs measured.
set -euo pipefail
build=${1:-build}
bin="$build/bin"
moefold="$bin/moefold"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=${DEMO_OUT:-$build/demo}
mkdir -p "$out"

section() { printf '\n==== %s ====\n\n' "$*"; }

section "1. DeepSeek-V3 on 1024 H100s, the layout of the published Megatron-Bridge run (B5)"
"$moefold" predict --model deepseek-v3 --cluster dgx-h100 --gpus 1024 \
    --tensor-model-parallel-size 2 --pipeline-model-parallel-size 8 \
    --pipeline-model-parallel-layout 'Et|(tt|)*30mL' --expert-model-parallel-size 64 \
    --expert-tensor-parallel-size 1 --sequence-parallel --micro-batch-size 1 \
    --global-batch-size 8192 --fp8-format e4m3 --fp8-recipe tensorwise \
    --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --moe-grouped-gemm \
    --moe-router-force-load-balancing --moe-token-dispatcher-type flex \
    --moe-flex-dispatcher-backend hybridep --recompute-granularity selective \
    --recompute-modules mla_up_proj mlp --trace "$out/dsv3-b5.trace.json"
echo
echo "# the simulated step: $out/dsv3-b5.trace.json -- open it in https://ui.perfetto.dev (Open trace"
echo "# file) or chrome://tracing (Load): a process per pipeline stage, compute and stream tracks"

if "$moefold" --help | grep -q '^  plan '; then
    section "2. Search: DeepSeek-V3 on 256 GB200 (NVL72), GBS 2048, seq 4096"
    "$moefold" plan --model deepseek-v3 --cluster gb200-nvl72 --gpus 256 \
        --global-batch-size 2048 --seq-length 4096 --top 5 --pareto-window 0 --emit "$out/dsv3-gb200-plan.json"
fi

section "3. Predictions vs published training runs"
"$moefold" accuracy

if [ -x "$bin/moefold-train" ] && "$moefold" --help | grep -q '^  calibrate '; then
    section "4. Closed loop on this host"
    scripts/closed-loop.sh "$build" "$out"
fi
