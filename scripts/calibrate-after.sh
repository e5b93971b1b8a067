#!/usr/bin/env bash
# Measure this host again after a closed loop's runs and refit its cluster file from the bench
# before them (CLUSTER.bench.json, saved by scripts/calibrate-host.sh) and this one, each point at
# the faster of the two (moefold calibrate --bench-json twice --merge least), so compare prices the
# host as it was around the runs, not only in the minute before them: on this project's 2-vCPU VM
# one calibration priced every plan 4-13% fast (attention 0.454 where the day's others read
# 0.40-0.43) and another caught a slow spell (GEMM peak 85.7 GFLOP/s where the one after the runs
# read 98.4). The faster, not the mean: a neighbour slows this host for minutes and never speeds
# it up, and the runs compared are the fastest of their repeats; validate 2026-12-03 14:00, whose
# first bench caught such a spell (its 512^3 GEMM 4292 us, after the runs 2997), read step
# median 15.8% / max 33.6% at the mean and 7.0% / 27.3% at the faster; 14:30, calm: 5.2% / 15.1%
# and 3.7% / 17.1%; phases median 13.6% -> 5.0% and 6.0% -> 5.1% (scripts/recompare.py).
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
        --bench-json "$out/after.bench.json" --merge least --out "$cluster" \
        >"$out/calibrate-mean.txt" 2>&1; then
    peak() { grep -m1 '^GEMM peak' "$1" | awk '{print $4}'; }
    attn() { grep -m1 '^attention efficiency' "$1" | awk '{print $3}'; }
    echo "# host measured again after the runs; compared at each point's faster bench (GEMM peak" \
        "after $(peak "$out/calibrate-after.txt"), both $(peak "$out/calibrate-mean.txt")" \
        "GFLOP/s; attention fwd after $(attn "$out/calibrate-after.txt"), both" \
        "$(attn "$out/calibrate-mean.txt"); $out/calibrate-{after,mean}.txt)"
    exit 0
fi
echo "# measuring the host after the runs failed ($out/calibrate-after.txt, calibrate-mean.txt):" \
    "compared at the calibration before them"
exit 1
