#!/usr/bin/env bash
# Measure this host again after a closed loop's runs and refit its cluster file at the fastest of
# the bench before them (CLUSTER.bench.json, saved by scripts/calibrate-host.sh) and this one
# (moefold calibrate --bench-json twice --bench-merge fastest: each timing's least time or greatest
# rate), so compare prices the host as it ran when undisturbed, as validate keeps each plan's
# fastest run: a slow spell of a shared host can only slow a bench down. On this project's 2-vCPU
# VM one calibration caught a slow spell (GEMM peak 89.4 GFLOP/s where the one after the runs read
# 98.8) and priced every plan 8-15% slow at the mean of the two (2026-12-03 05:23 run).
# Usage: scripts/calibrate-after.sh BUILD CLUSTER_FILE NP OUT_DIR. Prints one line; exit status 1
# when a measurement or the fit failed (the cluster file is then left as it was).
set -uo pipefail
bin="$1/bin"
cluster=$2
np=$3
out=$4
if [ ! -f "$cluster.bench.json" ]; then
    echo "# no bench of the first calibration ($cluster.bench.json): compared at it alone"
    exit 0
fi
if "$bin/moefold" calibrate --np "$np" --out "$out/after.json" \
    --save-bench "$out/after.bench.json" >"$out/calibrate-after.txt" 2>&1 &&
    "$bin/moefold" calibrate --bench-json "$cluster.bench.json" \
        --bench-json "$out/after.bench.json" --bench-merge fastest --out "$cluster" \
        >"$out/calibrate-merged.txt" 2>&1; then
    peak() { grep -m1 '^GEMM peak' "$1" | awk '{print $4}'; }
    attn() { grep -m1 '^attention efficiency' "$1" | awk '{print $3}'; }
    echo "# host measured again after the runs; compared at the fastest of both benches (GEMM" \
        "peak after $(peak "$out/calibrate-after.txt"), merged $(peak "$out/calibrate-merged.txt")" \
        "GFLOP/s; attention fwd after $(attn "$out/calibrate-after.txt"), merged" \
        "$(attn "$out/calibrate-merged.txt"); $out/calibrate-{after,merged}.txt)"
    exit 0
fi
echo "# measuring the host after the runs failed ($out/calibrate-after.txt, calibrate-merged.txt):" \
    "compared at the calibration before them"
exit 1
