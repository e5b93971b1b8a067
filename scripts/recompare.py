#!/usr/bin/env python3
"""Re-compare a `make validate` run's measured runs against another cluster file, without training.

A change to `moefold calibrate` (how a figure is fitted from the bench) or to the cost model can be
judged on runs already measured: each plan's kept run (<plan>.run.json, the one validate compared)
is compared again, with the flags validate uses (--observed-load for plans with expert parallelism,
at the profile's speed unless --host-speed, as validate compares), against CLUSTER, and the step and phase errors are summarised
as validate summarises them (phases holding >= 10% of the measured step). Refit CLUSTER from the
run's two benches first, e.g.

    build/bin/moefold calibrate --bench-json topologies/local.json.bench.json \\
        --bench-json build/validate/after.bench.json --out /tmp/refit.json
    scripts/recompare.py build/validate /tmp/refit.json

The runs were measured once: this re-prices them, it does not measure the host again, so a change
judged here is judged on the same runs before and after (validate's table for the old figures).

usage: scripts/recompare.py DIR CLUSTER [--bin build/bin/moefold] [--host-speed]
Standard library only; one `moefold compare --json` per plan (about a second for the suite).
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", help="a make validate output directory (VALIDATE_OUT)")
    ap.add_argument("cluster", help="the cluster file to price the runs with")
    ap.add_argument("--bin", default="build/bin/moefold")
    ap.add_argument("--host-speed", action="store_true",
                    help="price at the speed the run's host probe measured (compare --host-speed)")
    a = ap.parse_args()
    plans = sorted(glob.glob(os.path.join(a.dir, "*.plan.json")))
    if not plans:
        sys.exit(f"recompare: no <plan>.plan.json in {a.dir}")
    steps, phases = [], []
    for plan in plans:
        name = os.path.basename(plan)[: -len(".plan.json")]
        run = os.path.join(a.dir, name + ".run.json")
        if not os.path.exists(run):
            print(f"{name:<16} no kept run ({run})")
            continue
        with open(plan) as f:
            layout = json.load(f).get("layout", {})
        flags = ["--cluster", a.cluster, "--json"]
        if a.host_speed:
            flags.append("--host-speed")
        if layout.get("ep", 1) > 1:
            flags.append("--observed-load")
        out = subprocess.run([a.bin, "compare", plan, run] + flags, capture_output=True,
                             text=True)
        if out.returncode != 0:
            print(f"{name:<16} compare failed: {(out.stderr or out.stdout).strip()[-200:]}")
            continue
        j = json.loads(out.stdout)
        st = j["step_time_s"]
        steps.append(abs(st["error_pct"]))
        big = []
        for phase, v in j["time_s"].items():
            if isinstance(v, dict) and v.get("measured", 0.0) >= 0.1 * st["measured"]:
                err = 100.0 * (v["predicted"] / v["measured"] - 1.0)
                phases.append(abs(err))
                big.append(f"{phase} {err:+.1f}%")
        print(f"{name:<16} step {st['error_pct']:+6.1f}%  " + "  ".join(big))
    if steps:
        print(f"# step time |error|: median {statistics.median(steps):.2f}%, max {max(steps):.2f}%"
              f" over {len(steps)} plans")
    if phases:
        print(f"# phases |error| (phases holding >= 10% of the measured step): median "
              f"{statistics.median(phases):.2f}%, max {max(phases):.2f}% over {len(phases)} phases")


if __name__ == "__main__":
    main()
