#!/usr/bin/env bash
# Regenerate the shipped cluster files' fitted software figures from the shipped runs (`make fit`):
# for every reference cluster in topologies/ (files that extend another inherit its figures),
# `moefold fit --from-priors --cluster C --runs tests/data/published_runs.json --out topologies/C.json`. The fit
# reads each figure's prior, never its current value, and other clusters' host and network
# figures at their priors, so running this twice, or in another order, writes the same files.
set -euo pipefail
build=${1:-build}
runs=${RUNS:-tests/data/published_runs.json}
bin="$build/bin/moefold"
[ -x "$bin" ] || { echo "fit-clusters: $bin not built (make planner)" >&2; exit 1; }
for f in topologies/*.json; do
    c=$(basename "$f" .json)
    grep -q "moefold-cluster" "$f" || continue
    if grep -q '"extends"' "$f"; then
        echo "fit-clusters: $c extends another cluster: its software figures are inherited"
        continue
    fi
    grep -q '"prior"' "$f" || { echo "fit-clusters: $c has no prior: nothing to fit"; continue; }
    "$bin" fit --from-priors --cluster "$f" --runs "$runs" --out "$f" | tail -3
done
