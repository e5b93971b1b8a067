#!/usr/bin/env bash
# The closed loop on this host, as `make demo` shows it: calibrate this host as a cluster (or reuse
# a fresh calibration), let the planner pick the fastest plan for a small MoE on its cores
# (moefold plan --emit), train under that plan with mpirun (moefold-train --plan) and print
# predicted vs measured per phase (moefold compare), with the predicted and the measured last step
# as one Chrome trace (OUT_DIR/local.trace.json) and an ASCII Gantt chart of both.
# Trains DEMO_REPEATS times (default 3) for DEMO_STEPS steps (default 11: 10 measured after the
# warm-up step) and compares the run with the median step time, as `make validate` does (its header
# says why not the fastest): one run of 6 steps on this project's 2-vCPU VM read -24% and then -14%
# against the same calibration a minute later (2026-12-02), its steps 208-271 ms; a slow or fast
# spell of the host costs a repeat, not a false error.
# Usage: scripts/closed-loop.sh BUILD OUT_DIR.
# `make validate` runs a fixed suite of plans the same way and prints the error statistics.
set -euo pipefail
build=${1:-build}
out=${2:-$build/demo}
bin="$build/bin"
model=tests/data/models/validate-moe.json
cluster=topologies/local.json
steps=${DEMO_STEPS:-11}
repeats=${DEMO_REPEATS:-3}
case "$repeats" in
'' | *[!0-9]* | 0) echo "closed-loop: DEMO_REPEATS '$repeats': expected an integer 1-9" >&2; exit 2 ;;
esac
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$out"
cores=$(nproc)
np=$((cores < 2 ? cores : 2))

scripts/calibrate-host.sh "$build" "$cluster" "$np"

echo
echo "# plan: the fastest layout for $(basename "$model") on $np rank(s) of this host"
"$bin/moefold" plan --model-config "$model" --cluster "$cluster" --gpus "$np" \
    --global-batch-size 8 --fp32-training --moe-aux-loss-coeff 1e-2 --top 5 --pareto-window 0 \
    --emit "$out/local.plan.json"

echo
echo "# train: mpirun -np $np moefold-train --plan $out/local.plan.json --steps $steps," \
    "$repeats time(s); the run with the median step time is compared"
steps_of="" # "step_s run" lines
step_of() { # step_time_s of a run.json
    grep -o '"step_time_s":[[:space:]]*[0-9.eE+-]*' "$1" | head -1 | sed 's/.*:[[:space:]]*//'
}
for k in $(seq 1 "$repeats"); do
    if ! mpirun -np "$np" --bind-to core "$bin/moefold-train" --plan "$out/local.plan.json" \
        --steps "$steps" --synthetic --out "$out/local.run$k.json" \
        --trace "$out/local.measured$k.trace.json" >"$out/local.train$k.txt" 2>&1; then
        cat "$out/local.train$k.txt" >&2
        exit 1
    fi
    s=$(step_of "$out/local.run$k.json")
    echo "#   run $k: $(awk -v s="$s" 'BEGIN {printf "%.1f", 1e3 * s}') ms a step (mean of $((steps > 1 ? steps - 1 : 1)))"
    steps_of+="$s $k"$'\n'
done
# The median run (the lower of the middle two for an even count).
kept=$(sort -g <<<"${steps_of%$'\n'}" | awk '{k[NR] = $2} END {print k[int((NR + 1) / 2)]}')
# The host measured again after the runs, compared at each point's faster bench, as make validate
# does (DEMO_CALIBRATE_AFTER=0 skips it).
if [ "${DEMO_CALIBRATE_AFTER:-1}" = 1 ]; then
    scripts/calibrate-after.sh "$build" "$cluster" "$np" "$out"
fi
echo "# the kept run ($kept of $repeats, the median step time):"
cat "$out/local.train$kept.txt"
cp "$out/local.run$kept.json" "$out/local.run.json"
cp "$out/local.measured$kept.trace.json" "$out/local.measured.trace.json"

echo
echo "# compare: predicted vs measured"
# At the profile's speed, as make validate compares (scripts/validate.sh says why); the price at
# the speed the run's probe GEMM measured (--host-speed) follows as one line.
flags=()
if grep -Eq '"ep":[[:space:]]*([2-9]|[1-9][0-9])' "$out/local.plan.json"; then
    flags+=(--observed-load) # price the routing the untrained router produced
fi
"$bin/moefold" compare "$out/local.plan.json" "$out/local.run.json" --cluster "$cluster" \
    "${flags[@]}" --trace "$out/local.trace.json" --gantt 100
if "$bin/moefold" compare "$out/local.plan.json" "$out/local.run.json" --cluster "$cluster" \
    "${flags[@]}" --host-speed >"$out/local.compare-host.txt" 2>&1; then
    read -r _ _ _ _ _ _ h_err _ <<<"$(grep '^summary:' "$out/local.compare-host.txt")"
    h_speed=$(sed -n 's/^host speed:.* priced at \([0-9.]*\) x .*/\1/p' "$out/local.compare-host.txt")
    echo "# at the host's speed during the run (--host-speed, ${h_speed} x the profile's): step ${h_err}%"
fi
echo
echo "# timelines: $out/local.trace.json (predicted and measured side by side) and"
echo "# $out/local.measured.trace.json: open one in https://ui.perfetto.dev (Open trace file) or"
echo "# chrome://tracing (Load); a process per pipeline stage (predicted) or rank (measured)"
