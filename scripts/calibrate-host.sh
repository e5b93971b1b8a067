#!/usr/bin/env bash
# Calibrate this host as a cluster file (moefold calibrate) or reuse one made on this host within
# the last day. Usage: scripts/calibrate-host.sh BUILD CLUSTER_FILE NP. VALIDATE_RECALIBRATE=1
# measures again. Used by `make validate` and `make demo`.
set -uo pipefail
bin="$1/bin"
cluster=$2
np=$3
host=$(hostname)
if [ -f "$cluster" ] && [ -z "$(find "$cluster" -mmin +1440 2>/dev/null)" ] &&
    grep -q "on $host " "$cluster" 2>/dev/null && [ "${VALIDATE_RECALIBRATE:-0}" != 1 ] &&
    "$bin/moefold" predict --model llama3-8b --cluster "$cluster" --gpus 1 >/dev/null 2>&1; then
    # (a file that no longer loads -- written by an older moefold -- is measured again)
    echo "# reusing $cluster (calibrated on $host within the last day; VALIDATE_RECALIBRATE=1 redoes it)"
    exit 0
fi
echo "# calibrating this host with $np rank(s) (moefold calibrate --np $np --out $cluster)"
exec "$bin/moefold" calibrate --np "$np" --out "$cluster"
