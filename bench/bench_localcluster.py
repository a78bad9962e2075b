"""Local cluster bring-up benchmark: 2, 8 and 32 namespace nodes from the real user data.

For each size: seconds from start until every node is idle in `sinfo`, per-node step
times (median and max over nodes), and the split between coordination waits (the
boot's bounded polls: for the key, the controller, registration - its "done waiting
after Ns" lines) and the rest of the work. Each cluster is torn down before the next.

Usage: python bench/bench_localcluster.py [--sizes 2,8,32] [--json out.json]
(root; Debian's slurmctld, slurmd, slurm-client and munge installed).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from localcluster.cluster import LocalCluster, summary  # noqa: E402

NAME = "bench"
SUBNET = 2


def run_size(n: int, quiet: bool) -> dict:
    lc = LocalCluster(NAME, SUBNET, out=(lambda s="": None) if quiet else print)
    lc.c.down()
    lc = LocalCluster(NAME, SUBNET, out=(lambda s="": None) if quiet else print)
    try:
        t0 = time.monotonic()
        lc.up(n, timeout=900)
        to_idle = time.monotonic() - t0
        rows = summary(list(lc.watches.values()))
        failed = [h for h, w in lc.watches.items() if w.rc != 0]
    finally:
        lc.c.down()
    steps: dict[str, list[float]] = {}
    for r in rows.values():
        for step, secs in r["steps"].items():
            if secs is not None:
                steps.setdefault(step, []).append(secs)
    waits_by_what: dict[str, list[float]] = {}
    for r in rows.values():
        for _, what, secs in r["wait_detail"]:
            key = what.split(" (")[0]
            waits_by_what.setdefault(key, []).append(secs)
    boot = [r["total"] for r in rows.values()]
    wait = [r["waits"] for r in rows.values()]
    return {"nodes": n, "seconds_to_all_idle": round(to_idle, 1), "failed": failed,
            "boot_median": statistics.median(boot), "boot_max": max(boot),
            "wait_median": statistics.median(wait), "work_median": statistics.median(
                [r["work"] for r in rows.values()]),
            "steps": {s: (statistics.median(v), max(v)) for s, v in sorted(steps.items())},
            "waits": {w: (statistics.median(v), max(v)) for w, v in sorted(waits_by_what.items())}}


def print_table(results: list[dict]) -> None:
    print("\nnodes  to-all-idle  boot med/max   waits med  work med  wait share")
    for r in results:
        share = r["wait_median"] / r["boot_median"] if r["boot_median"] else 0
        print(f"{r['nodes']:>5}  {r['seconds_to_all_idle']:>10.1f}s  {r['boot_median']:>5.1f}/{r['boot_max']:<5.1f}s"
              f"  {r['wait_median']:>8.1f}s  {r['work_median']:>7.1f}s  {share:>9.0%}"
              + (f"  FAILED: {', '.join(r['failed'])}" if r["failed"] else ""))
    sizes = [r["nodes"] for r in results]
    all_steps = sorted({s for r in results for s in r["steps"]})
    print("\nper-node step seconds, median/max over nodes")
    print(f"{'step':<26}" + "".join(f"{n:>14}" for n in sizes))
    for s in all_steps:
        cells = []
        for r in results:
            v = r["steps"].get(s)
            cells.append(f"{v[0]:>7.1f}/{v[1]:<6.1f}" if v else f"{'-':>14}")
        print(f"{s:<26}" + "".join(cells))
    all_waits = sorted({w for r in results for w in r["waits"]})
    if all_waits:
        print("\ncoordination waits, seconds, median/max over nodes that waited")
        print(f"{'waited for':<44}" + "".join(f"{n:>14}" for n in sizes))
        for w in all_waits:
            cells = []
            for r in results:
                v = r["waits"].get(w)
                cells.append(f"{v[0]:>7.1f}/{v[1]:<6.1f}" if v else f"{'-':>14}")
            print(f"{w[:43]:<44}" + "".join(cells))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="2,8,32")
    p.add_argument("--json")
    p.add_argument("--verbose", action="store_true", help="print each node's steps as they finish")
    a = p.parse_args()
    results = []
    for n in (int(x) for x in a.sizes.split(",")):
        print(f"bringing up {n} nodes ...", flush=True)
        results.append(run_size(n, quiet=not a.verbose))
        print(f"  {n} nodes: all idle after {results[-1]['seconds_to_all_idle']}s", flush=True)
    print_table(results)
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))
    return 1 if any(r["failed"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
