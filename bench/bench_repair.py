"""Fault to drain, and drain to replacement idle, on the faithful local lane (issue 18).

Boots a bookworm cluster (a colocated controller and --workers workers of block `a`) as
tests/daemons/test_health_repair_faithful.py does: the health program from slurmd every
HealthCheckInterval (30 s, the shortest the config allows), stand-in GPUs and EFA devices
and a kernel-log copy per node (localcluster/hardware.py), repair.policy auto, the Auto
Scaling stand-in in the controller's namespace. Then, for each worker in turn: an XID 79
line in its kernel log, and the times until
  - drain:      sinfo shows the health program's drain (the interval dominates: 0-30 s),
  - terminate:  the repair agent's TerminateInstanceInAutoScalingGroup reached the stand-in,
  - idle:       the replacement Auto Scaling launches (the lane follows the terminate) booted,
                passed the join gate against a healthy node and is idle in Slurm.
No job runs on the node (a requeued job waits Slurm's credential lifetime, 120 s, before
it starts again; the test shows that path). Needs root and the lock:

    flock /tmp/gpu-cluster-lane.lock python bench/bench_repair.py [--workers 2] [--json out.json]

Agent knobs as in the test: REPAIR_INTERVAL=5, JOIN_SETTLE=15 (controller overrides.env);
the product defaults are 60 s each (docs/health.md says what they add).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from localcluster import hardware  # noqa: E402
from localcluster.cluster import LocalCluster  # noqa: E402

NAME, SUBNET = "hrbench", 10
SWAPS = {"REPAIR_INTERVAL": "5", "JOIN_SETTLE": "15"}


def until(check, timeout: float, what: str, interval: float = 0.5):
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f}s")
        time.sleep(interval)


def terminations(lc: LocalCluster) -> int:
    log = lc.c.root / "autoscaling" / "requests.jsonl"
    text = log.read_text() if log.exists() else ""
    return text.count('"TerminateInstanceInAutoScalingGroup"')


def one_round(lc: LocalCluster, host: str) -> dict[str, float]:
    xid = hardware.faults(hardware.Kit())["xid"]
    before = terminations(lc)
    lc.in_node(host, xid.inject)
    t0 = time.monotonic()
    rx = re.compile(rf"^gpu-cluster health: {xid.evidence}$")
    until(lambda: rx.search(lc.node_reasons().get(host, ("", ""))[1]), 120, f"{host} drained")
    t_drain = time.monotonic()
    until(lambda: terminations(lc) > before, 300, f"{host} terminated", 1)
    t_term = time.monotonic()
    [(_, w)] = lc.follow_terminations()
    lc.watch([w], timeout=600)
    if w.rc != 0:
        raise RuntimeError(f"{w.node.hostname}: boot failed: {lc.log_tail(w.node, 20)}")
    new = w.node.hostname
    history = lc.validation_dir() / "join" / "history"
    until(lambda: f"{new} passed" in (history.read_text() if history.exists() else ""), 600, f"{new} gated", 1)
    until(lambda: lc.node_reasons().get(new) == ("idle", ""), 120, f"{new} idle")
    t_idle = time.monotonic()
    return {
        "fault_to_drain": t_drain - t0,
        "drain_to_terminate": t_term - t_drain,
        "terminate_to_idle": t_idle - t_term,
        "drain_to_idle": t_idle - t_drain,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=2, help="workers besides the controller; one round each")
    p.add_argument("--json", type=Path)
    a = p.parse_args()
    LocalCluster(NAME, SUBNET, out=lambda _: None).c.down()
    lines: list[str] = []
    lc = LocalCluster(
        NAME,
        SUBNET,
        out=lines.append,
        lane="bookworm",
        settings={"repair": {"policy": "auto", "job_grace_minutes": 0}},
        kit=hardware.Kit(),
        swaps={"controller": SWAPS},
        autoscaling=True,
    )
    rounds = []
    try:
        lc.up(a.workers + 1, timeout=600, block="a")
        lc.validation_job(timeout=420)
        for host in sorted(h for h, n in lc.c.nodes.items() if n.role == "worker"):
            r = one_round(lc, host)
            rounds.append(r)
            print(
                f"{host}: fault->drain {r['fault_to_drain']:.1f}s, drain->terminate {r['drain_to_terminate']:.1f}s, "
                f"terminate->replacement idle {r['terminate_to_idle']:.1f}s (drain->idle {r['drain_to_idle']:.1f}s)",
                flush=True,
            )
    except BaseException:
        print("\n".join(lines[-60:]))
        raise
    finally:
        lc.c.down()
    for key in rounds[0]:
        vals = [r[key] for r in rounds]
        print(f"{key:>20}: median {statistics.median(vals):.1f}s (min {min(vals):.1f}, max {max(vals):.1f})")
    if a.json:
        a.json.write_text(json.dumps(rounds, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
