#!/usr/bin/env python3
"""Nested cross-validation of the fit's one tuning knob, --constrain (how much the runs must
shrink a figure's prior sd before the fit frees it).

`moefold accuracy`'s cross-validated column is leave-one-out at the shipped --constrain. When that
value is chosen by looking at those same leave-one-out errors, the column flatters the choice. This
script measures what the choice is worth on a run it has not seen: for each complete run, the
threshold is chosen by leave-one-out on the *other* runs of its cluster (inner loop), and the run
is then predicted by the fit at that threshold without it (outer loop).

usage: scripts/nested-cv.py [--bin build/bin/moefold] [--runs FILE] [--grid 0.7,0.8,0.85,0.9,0.95]
Standard library only; runs `moefold fit --from-priors --json` (len(grid) x (runs + 1) fits per
cluster: a few minutes on two cores).
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile


def fit(binary, cluster, runs_file, constrain):
    out = subprocess.run(
        [binary, "fit", "--from-priors", "--constrain", str(constrain), "--json",
         "--cluster", cluster, "--runs", runs_file],
        check=True, capture_output=True, text=True).stdout
    res = json.loads(out)
    return {r["id"]: r for r in res["runs"] if r.get("used") and "predicted_loo" in r}


def loo_loss(fitted):
    """rms of log(predicted / measured) over the fit's runs, each left out in turn."""
    e = [math.log(r["predicted_loo"] / r["measured"]) for r in fitted.values()]
    return math.sqrt(sum(x * x for x in e) / len(e)) if e else float("inf")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="build/bin/moefold")
    ap.add_argument("--runs", default="tests/data/published_runs.json")
    ap.add_argument("--grid", default="0.7,0.8,0.85,0.9,0.95")
    a = ap.parse_args()
    grid = [float(x) for x in a.grid.split(",")]
    with open(a.runs) as f:
        doc = json.load(f)
    runs = doc["runs"]
    clusters = sorted({r["cluster"] for r in runs if r.get("complete") and not r.get("known_miss")})
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for cl in clusters:
            path = os.path.join("topologies", cl + ".json")
            full = {c: fit(a.bin, path, a.runs, c) for c in grid}
            for r in runs:
                if r["cluster"] != cl or not r.get("complete") or r["id"] not in full[grid[0]]:
                    continue
                rest = dict(doc, runs=[x for x in runs if x["id"] != r["id"]])
                rf = os.path.join(tmp, "rest.json")
                with open(rf, "w") as f:
                    json.dump(rest, f)
                inner = {c: loo_loss(fit(a.bin, path, rf, c)) for c in grid}
                best = min(grid, key=lambda c: (inner[c], c))
                outer = {c: full[c][r["id"]]["predicted_loo"] / r["published"] - 1 for c in grid}
                rows.append((r["id"], cl, best, outer))
                print("%-4s %-12s inner choice %.2f  nested %+6.1f%%   at each: %s" % (
                    r["id"], cl, best, 100 * outer[best],
                    "  ".join("%.2f %+5.1f%%" % (c, 100 * outer[c]) for c in grid)), flush=True)
    if not rows:
        sys.exit("nested-cv: no complete run to cross-validate")
    nested = [abs(o[b]) for _, _, b, o in rows]
    print("# nested (threshold chosen without the run): median |error| %.1f%%, max %.1f%% (n %d)" %
          (100 * statistics.median(nested), 100 * max(nested), len(nested)))
    for c in grid:
        e = [abs(o[c]) for _, _, _, o in rows]
        print("# fixed --constrain %.2f: median |error| %.1f%%, max %.1f%%" %
              (c, 100 * statistics.median(e), 100 * max(e)))


if __name__ == "__main__":
    main()
