#!/usr/bin/env bash
# Calibrate this host as a cluster file (moefold calibrate) or reuse one made on this host within
# the last VALIDATE_CALIBRATION_AGE_MIN minutes (default 60: a shared VM's speed drifts by 5-20%
# over hours -- make validate on a 2.5-hour-old calibration read step errors of median 9.0%, max
# 20.9%, on a fresh one eight minutes later 5.9% and 15.2%). Usage: scripts/calibrate-host.sh
# BUILD CLUSTER_FILE NP. VALIDATE_RECALIBRATE=1 measures again. Used by `make validate` and
# `make demo`.
set -uo pipefail
bin="$1/bin"
cluster=$2
np=$3
host=$(hostname)
age=${VALIDATE_CALIBRATION_AGE_MIN:-60}
case "$age" in
'' | *[!0-9]*)
    echo "calibrate-host: VALIDATE_CALIBRATION_AGE_MIN must be a whole number of minutes, not '$age'" >&2
    exit 2
    ;;
esac
if [ -f "$cluster" ] && [ -z "$(find "$cluster" -mmin +"$age" 2>/dev/null)" ] &&
    grep -q "on $host " "$cluster" 2>/dev/null && [ "${VALIDATE_RECALIBRATE:-0}" != 1 ] &&
    "$bin/moefold" predict --model llama3-8b --cluster "$cluster" --gpus 1 >/dev/null 2>&1; then
    # (a file that no longer loads -- written by an older moefold -- is measured again)
    echo "# reusing $cluster (calibrated on $host within the last $age minutes; VALIDATE_RECALIBRATE=1 redoes it)"
    exit 0
fi
echo "# calibrating this host with $np rank(s) (moefold calibrate --np $np --out $cluster)"
exec "$bin/moefold" calibrate --np "$np" --out "$cluster"
