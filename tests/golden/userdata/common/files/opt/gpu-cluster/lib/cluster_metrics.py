#!/usr/bin/env python3
"""The cluster's metrics in CloudWatch, published by the controller's agent loop
(lib/metrics.sh metrics_tick, every METRICS_INTERVAL s; docs/logs.md).

    cluster_metrics.py publish [--now EPOCH]   read Slurm and the gate, one PutMetricData call
    cluster_metrics.py show                    the same values, printed; no AWS call

Metrics, in the namespace METRICS_NAMESPACE (one per cluster; no dimensions), unit Count:
  NodesIdle       idle (also reserved and planned: free, waiting for their reservation or job)
  NodesAllocated  allocated, mixed, completing
  NodesDrained    drained or draining (the gate's, the health program's, an operator's)
  NodesDown       down, failed, not responding (a trailing `*`), or any other state
  JobsPending, JobsRunning (configuring and completing count as running)
  GateGo          1 when the latest first-boot gate run said GO, 0 for NO-GO; absent
                  before the first run
Why PutMetricData from here rather than EMF lines through the CloudWatch agent: the
values come from Slurm on the controller, which already runs boto3 for its agents; the
controller's role may put metrics in its own namespace only (the cloudwatch:namespace
condition, infra/logs.py), where the agent's EMF path needs no extra grant but gives
no such scope; it is one call a minute for seven metrics; and the call is checked
against botocore's model in the tests, where an EMF line is checked by nothing until
CloudWatch drops it.

Exit status: 0 published (or shown), 1 Slurm or AWS failed (one line on stderr), 2 usage.
Runs with the node's boto3 (GPU_CLUSTER_AWS_PYTHON) through lib/aws_client.py.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from typing import Any

IDLE = {"idle", "reserved", "planned"}
ALLOCATED = {"allocated", "mixed", "completing"}
DRAINED = {"drained", "draining", "drain"}
RUNNING = {"RUNNING", "CONFIGURING", "COMPLETING"}
# sinfo's state suffixes: * not responding, ~ powered off, # powering up, ! powering down,
# % powering down, $ maintenance reservation, @ pending reboot, ^ rebooting, - planned.
SUFFIXES = "*~#!%$@^-"


class MetricsError(Exception):
    """Slurm could not be read: one line."""


def _run(argv: list[str]) -> str:
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise MetricsError(f"{argv[0]}: {err}") from None
    if r.returncode != 0:
        raise MetricsError(f"`{' '.join(argv)}` failed with status {r.returncode}: {r.stderr.strip()[-200:]}")
    return r.stdout


def node_class(state: str) -> str:
    """NodesIdle/NodesAllocated/NodesDrained/NodesDown for one `sinfo %T` state."""
    base = state.rstrip(SUFFIXES).lower()
    if state.endswith("*"):
        return "NodesDown"
    if base in DRAINED:
        return "NodesDrained"
    if base in ALLOCATED:
        return "NodesAllocated"
    if base in IDLE:
        return "NodesIdle"
    return "NodesDown"


def node_counts(sinfo_out: str) -> dict[str, int]:
    """From `sinfo -h -N -o '%N|%T'` (a node in several partitions is listed once per
    partition: counted once)."""
    counts = dict.fromkeys(("NodesIdle", "NodesAllocated", "NodesDrained", "NodesDown"), 0)
    seen = set()
    for line in sinfo_out.splitlines():
        name, _, state = line.strip().partition("|")
        if not name or name in seen:
            continue
        seen.add(name)
        counts[node_class(state)] += 1
    return counts


def job_counts(squeue_out: str) -> dict[str, int]:
    """From `squeue -h -r -o %T` (-r: every array element on its own line)."""
    states = [s.strip() for s in squeue_out.splitlines() if s.strip()]
    return {"JobsPending": sum(s == "PENDING" for s in states), "JobsRunning": sum(s in RUNNING for s in states)}


def gate_go(validation_dir: str) -> int | None:
    """1/0 from the latest full gate run's report (nodeside/validation_report.py), None
    before the first run or when the report cannot be read."""
    try:
        with open(os.path.join(validation_dir, "latest"), encoding="utf-8") as f:
            run = f.read().strip()
        with open(os.path.join(validation_dir, run, "report.json"), encoding="utf-8") as f:
            verdict = json.load(f).get("verdict")
    except (OSError, ValueError):
        return None
    return {"GO": 1, "NO-GO": 0}.get(verdict)


def values(validation_dir: str) -> dict[str, int]:
    out = node_counts(_run(["sinfo", "-h", "-N", "-o", "%N|%T"]))
    out.update(job_counts(_run(["squeue", "-h", "-r", "-o", "%T"])))
    go = gate_go(validation_dir)
    if go is not None:
        out["GateGo"] = go
    return out


def metric_data(vals: dict[str, int], now: float) -> list[dict[str, Any]]:
    stamp = datetime.datetime.fromtimestamp(now, tz=datetime.UTC)
    return [{"MetricName": k, "Value": float(v), "Unit": "Count", "Timestamp": stamp} for k, v in vals.items()]


def _aws_client() -> Any:
    try:  # on a node: aws_client.py sits next to this file
        import aws_client  # type: ignore[import-not-found]
    except ImportError:
        from nodeside import aws_client
    return aws_client


def publish(namespace: str, vals: dict[str, int], now: float, cw: Any = None) -> None:
    ac = _aws_client()
    cw = cw or ac.client("cloudwatch")
    ac.call(cw, "PutMetricData", Namespace=namespace, MetricData=metric_data(vals, now))


def main(argv: list[str] | None = None, cw: Any = None) -> int:
    p = argparse.ArgumentParser(prog="cluster_metrics.py")
    p.add_argument("command", choices=("publish", "show"))
    p.add_argument("--now", type=float, default=None, help="epoch seconds (tests)")
    args = p.parse_args(argv)
    fsx_root = os.environ.get("FSX_ROOT", "")
    namespace = os.environ.get("METRICS_NAMESPACE", "")
    if not fsx_root or (args.command == "publish" and not namespace):
        print("cluster_metrics.py: FSX_ROOT and METRICS_NAMESPACE must be set (cluster.env)", file=sys.stderr)
        return 2
    ac = _aws_client()
    try:
        vals = values(os.path.join(fsx_root, "validation"))
        if args.command == "show":
            print(" ".join(f"{k}={v}" for k, v in vals.items()))
            return 0
        publish(namespace, vals, time.time() if args.now is None else args.now, cw)
    except MetricsError as err:
        print(f"metrics: {err}", file=sys.stderr)
        return 1
    except ac.AwsCallError as err:  # one line naming cloudwatch:PutMetricData (and, if refused, the grant)
        print(f"metrics: {namespace}: {err}", file=sys.stderr)
        return 1
    except OSError as err:  # no region: instance metadata did not answer
        print(f"metrics: {namespace}: cannot find this node's region: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
