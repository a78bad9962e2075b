"""Local cluster bring-up benchmark: 2, 8 and 32 nodes from the real user data.

Lanes: `bookworm`/`trixie` (whole machines: systemd-nspawn, systemd + cloud-init; the
lane's root is built or found in the cache before the clock starts) or `namespace`.
Images (machine lanes): `baked` (the lane's root, baked as an AMI is: step 20 only
verifies) and `plain` (the same root without the bake: step 20 installs Slurm, munge,
PMIx, Enroot, Pyxis and boto3 at boot, as on a plain DLAMI; localcluster/plain_root.py);
`--image baked,plain` runs both and prints their step times side by side.
For each size: seconds from start until every node is idle in `sinfo`, how long
creating the nodes took, memory used (host MemAvailable drop; on machine lanes also
per machine: PSS of its processes and its IMDS stand-in), per-node step times (median/max over nodes),
and each node's boot split into coordination waits (the boot's bounded polls: for
the controller's key fingerprint, the key through the join path, controller.env,
slurmctld, registration) and work. The controller's hand-off wait for all nodes to
be idle is shown apart (it is the cluster's bring-up, not one node's).
Each cluster is torn down before the next.

Per step: seconds median/max over nodes, and the most work any node did in it (the
step's time less the bounded waits it logged): the goal is under 2 s of work per step
on a baked root.

Usage: python bench/bench_localcluster.py [--lane bookworm|trixie|namespace] [--sizes 2,8,32]
       [--image baked|plain|baked,plain] [--json out.json] [--verbose]
(root; the namespace lane needs Debian's slurmctld, slurmd, slurm-client and munge on the host).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from localcluster.cluster import DEFAULT_LANE, IMAGES, LANES, LocalCluster, summary  # noqa: E402

NAME = "bench"
SUBNET = 2


def mem_available_mib() -> float:
    for line in open("/proc/meminfo"):
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    return 0.0


def run_size(n: int, verbose: bool, lane: str, image: str = "baked") -> dict:
    out = print if verbose else (lambda s="": None)
    LocalCluster(NAME, SUBNET, out=out).c.down()
    lc = LocalCluster(NAME, SUBNET, out=out, lane=lane, image=image)
    if lc.machines:
        lc.base_root()  # a cold root build is not part of the bring-up time
    before = mem_available_mib()
    try:
        t0 = time.monotonic()
        lc.up(n, timeout=900)
        to_idle = time.monotonic() - t0
        used = before - mem_available_mib()
        per_machine = lc.memory()
        rows = summary(list(lc.watches.values()))
        failed = [h for h, w in lc.watches.items() if w.rc != 0]
        launch = lc.launch_seconds
    finally:
        lc.c.down()
    steps: dict[str, list[float]] = {}
    work: dict[str, list[float]] = {}
    kinds: dict[str, list[float]] = {}
    for r in rows.values():
        for step, secs in r["steps"].items():
            steps.setdefault(step, []).append(secs)
        for step, secs in r["step_work"].items():
            work.setdefault(step, []).append(secs)
        for kind, secs in r["wait_kinds"].items():
            kinds.setdefault(kind, []).append(secs)
    med = lambda key: statistics.median(r[key] for r in rows.values())  # noqa: E731
    return {
        "nodes": n,
        "image": image if lc.machines else "namespace",
        "seconds_to_all_idle": round(to_idle, 1),
        "launch_seconds": round(launch, 1),
        "memory_mib": round(used),
        "failed": failed,
        "lane": lane,
        "machine_pss_mib": _median([m["pss_mib"] for m in per_machine.values()]),
        "imds_rss_mib": _median([m["imds_rss_mib"] for m in per_machine.values()]),
        "boot_median": med("boot"),
        "boot_max": max(r["boot"] for r in rows.values()),
        "wait_median": med("waits"),
        "work_median": med("work"),
        "wait_sum": sum(r["waits"] for r in rows.values()),
        "work_sum": sum(r["work"] for r in rows.values()),
        "handoff": max(r["handoff"] for r in rows.values()),
        "steps": {s: (statistics.median(v), max(v), max(work.get(s, [0.0]))) for s, v in sorted(steps.items())},
        "waits": {k: (statistics.median(v), max(v), len(v)) for k, v in sorted(kinds.items())},
    }


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 1) if values else None


def print_table(results: list[dict]) -> None:
    for r in results:
        if r["machine_pss_mib"] is not None:
            print(
                f"{r['nodes']:>5} {r['lane']} machines: median {r['machine_pss_mib']} MiB per machine (PSS) "
                f"+ {r['imds_rss_mib']} MiB IMDS stand-in (RSS)"
            )
    print(
        "\nimage      nodes  all idle  nodes made  memory   node boot med/max  waits med  work med  "
        "  waits/work (all nodes)  hand-off wait"
    )
    for r in results:
        share = r["wait_sum"] / (r["wait_sum"] + r["work_sum"]) if r["wait_sum"] + r["work_sum"] else 0
        print(
            f"{r['image']:<9} {r['nodes']:>5}  {r['seconds_to_all_idle']:>7.1f}s  {r['launch_seconds']:>9.1f}s  "
            f"{r['memory_mib']:>5} MiB  {r['boot_median']:>8.1f}/{r['boot_max']:<6.1f}s  "
            f"{r['wait_median']:>8.1f}s  {r['work_median']:>7.1f}s  "
            f"{r['wait_sum']:>8.0f}s/{r['work_sum']:.0f}s ({share:.0%})".ljust(24)
            + f"{r['handoff']:>11.0f}s"
            + (f"  FAILED: {', '.join(r['failed'])}" if r["failed"] else "")
        )
    cols = [f"{r['image']} {r['nodes']}" for r in results]
    print("\nper-node step seconds: median/max over nodes, and the most work one node did (time less its waits)")
    print(f"{'step':<14}" + "".join(f"{c:>24}" for c in cols))
    for s in sorted({s for r in results for s in r["steps"]}):
        cells = [
            f"{r['steps'][s][0]:>9.1f}/{r['steps'][s][1]:<5.1f} w {r['steps'][s][2]:<5.1f}"
            if s in r["steps"]
            else f"{'-':>24}"
            for r in results
        ]
        print(f"{s:<14}" + "".join(cells))
    print("\ncoordination waits, seconds, median/max over the nodes that waited (count)")
    print(f"{'waited for':<40}" + "".join(f"{c:>20}" for c in cols))
    for k in sorted({k for r in results for k in r["waits"]}):
        cells = []
        for r in results:
            v = r["waits"].get(k)
            cells.append(f"{v[0]:>9.1f}/{v[1]:<5.1f}({v[2]:>2})" if v else f"{'-':>20}")
        print(f"{k:<40}" + "".join(cells))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="2,8,32")
    p.add_argument("--lane", choices=LANES, default=DEFAULT_LANE)
    p.add_argument("--image", default="baked", help="baked, plain or baked,plain (machine lanes)")
    p.add_argument("--json")
    p.add_argument("--verbose", action="store_true", help="print each node's steps as they finish")
    a = p.parse_args()
    images = a.image.split(",")
    bad = [i for i in images if i not in IMAGES]
    if bad:
        p.error(f"--image {a.image}: use {', '.join(IMAGES)} (comma-separated)")
    results = []
    for image in images:
        for n in (int(x) for x in a.sizes.split(",")):
            print(f"bringing up {n} nodes ({a.lane}, {image} root) ...", flush=True)
            results.append(run_size(n, a.verbose, a.lane, image))
            print(f"  {n} nodes: all idle after {results[-1]['seconds_to_all_idle']}s", flush=True)
    print_table(results)
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))
    return 1 if any(r["failed"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
