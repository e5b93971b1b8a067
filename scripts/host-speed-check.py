#!/usr/bin/env python3
"""Does the host probe follow the steps? Judge `compare --host-speed` on `make validate` runs.

For every plan of every validate output directory given, it reads the host speed compare derived
from the run's probe GEMM (the `host speed: ... priced at F x the profile's` line of
<plan>.compare.txt or <plan>.compare-host.txt) and the step's speed relative to the profile's
price (predicted over measured at the profile's speed, <plan>.compare-profile.txt or
<plan>.compare.txt without --host-speed). Were the probe a faithful measure of what the steps felt
of the host, the two would move together (slope 1): the script prints their correlation and slope,
and the step's |error| priced either way, per plan and for plans below / above a footprint (the
measured peak memory per rank), since a step whose working set stays in cache does not feel the
memory the probe's evicted operands come from.

usage: scripts/host-speed-check.py DIR [DIR...] [--split-mib 32]
Standard library only; reads the text compare already wrote, runs nothing.
"""
import argparse
import os
import re
import statistics
import sys

HOST = re.compile(r"priced at ([0-9.]+) x the profile's \(--host-speed\)")
STEP = re.compile(r"^step\s+([0-9.]+)\s+([0-9.]+)", re.M)
TOTAL = re.compile(r"^total\s+[0-9.]+\s+([0-9.]+)", re.M)


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def plan_row(d, name):
    """(factor, speed, mib) for one plan of one validate run, or None."""
    host = read(os.path.join(d, name + ".compare-host.txt"))
    main = read(os.path.join(d, name + ".compare.txt"))
    prof = read(os.path.join(d, name + ".compare-profile.txt"))
    if host is None:  # validate at the host's speed: the table's file has it
        host, prof = main, prof
    else:  # validate at the profile's speed: the table's file is the profile's
        prof = main
    if host is None or prof is None:
        return None
    m, s, t = HOST.search(host), STEP.search(prof), TOTAL.search(prof)
    if m is None or s is None or float(s.group(2)) <= 0.0:
        return None
    mib = float(t.group(1)) if t else float("nan")
    return float(m.group(1)), float(s.group(1)) / float(s.group(2)), mib


def summary(label, rows):
    if len(rows) < 3:
        print(f"{label:<24} {len(rows):>4}  (too few)")
        return
    f = [r[0] for r in rows]
    v = [r[1] for r in rows]
    mf, mv = statistics.fmean(f), statistics.fmean(v)
    cov = sum((a - mf) * (b - mv) for a, b in zip(f, v))
    vf = sum((a - mf) ** 2 for a in f)
    vv = sum((b - mv) ** 2 for b in v)
    corr = cov / (vf * vv) ** 0.5 if vf > 0 and vv > 0 else float("nan")
    slope = cov / vf if vf > 0 else float("nan")
    e_prof = [100 * abs(b - 1) for b in v]
    e_host = [100 * abs(b / a - 1) for a, b in zip(f, v)]
    print(f"{label:<24} {len(rows):>4} {corr:7.2f} {slope:6.2f} {statistics.pstdev(f):6.3f} "
          f"{statistics.pstdev(v):6.3f}   {statistics.median(e_prof):5.1f} / {max(e_prof):5.1f}"
          f"   {statistics.median(e_host):5.1f} / {max(e_host):5.1f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dirs", nargs="+", help="make validate output directories (VALIDATE_OUT)")
    ap.add_argument("--split-mib", type=float, default=32.0,
                    help="footprint (measured peak MiB per rank) splitting the two groups")
    a = ap.parse_args()
    if not a.split_mib > 0:
        sys.exit(f"host-speed-check: --split-mib {a.split_mib}: expected > 0")
    rows = {}
    for d in a.dirs:
        if not os.path.isdir(d):
            sys.exit(f"host-speed-check: {d}: not a directory")
        for fn in sorted(os.listdir(d)):
            if fn.endswith(".plan.json"):
                name = fn[: -len(".plan.json")]
                r = plan_row(d, name)
                if r is not None:
                    rows.setdefault(name, []).append(r)
    if not rows:
        sys.exit("host-speed-check: no plan compared at the host's speed in "
                 + " ".join(a.dirs))
    print("# speed = predicted / measured step at the profile's speed; factor = the probe's")
    print("# host speed; |error| of the step priced at the profile's speed and at the probe's")
    print(f"{'plan':<24} {'runs':>4} {'corr':>7} {'slope':>6} {'sd f':>6} {'sd v':>6}"
          f"   profile med/max   host med/max")
    for name in sorted(rows):
        summary(name, rows[name])
    small = [r for v in rows.values() for r in v if r[2] < a.split_mib]
    large = [r for v in rows.values() for r in v if not r[2] < a.split_mib]
    print()
    summary(f"< {a.split_mib:g} MiB per rank", small)
    summary(f">= {a.split_mib:g} MiB per rank", large)
    summary("all", small + large)


if __name__ == "__main__":
    main()
