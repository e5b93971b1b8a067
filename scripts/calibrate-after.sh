#!/usr/bin/env bash
# Measure this host again after a closed loop's runs and refit its cluster file at the mean of the
# bench before them (CLUSTER.bench.json, saved by scripts/calibrate-host.sh) and this one's
# timings (moefold calibrate --bench-json twice), so compare prices the host as it was around the
# runs, not only in the minute before them: on this project's 2-vCPU VM one calibration priced
# every plan 4-13% fast (attention 0.454 where the day's others read 0.40-0.43) and another
# caught a slow spell (GEMM peak 85.7 GFLOP/s where the one after the runs read 98.4).
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
        --bench-json "$out/after.bench.json" --out "$cluster" >"$out/calibrate-mean.txt" 2>&1; then
    peak() { grep -m1 '^GEMM peak' "$1" | awk '{print $4}'; }
    attn() { grep -m1 '^attention efficiency' "$1" | awk '{print $3}'; }
    echo "# host measured again after the runs; compared at the mean of both benches (GEMM peak" \
        "after $(peak "$out/calibrate-after.txt"), mean $(peak "$out/calibrate-mean.txt")" \
        "GFLOP/s; attention fwd after $(attn "$out/calibrate-after.txt"), mean" \
        "$(attn "$out/calibrate-mean.txt"); $out/calibrate-{after,mean}.txt)"
    exit 0
fi
echo "# measuring the host after the runs failed ($out/calibrate-after.txt, calibrate-mean.txt):" \
    "compared at the calibration before them"
exit 1
