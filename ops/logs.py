"""logs NODE [--step S] [--log L] [--since MINUTES]: a node's logs from CloudWatch Logs,
also after the node is gone (docs/logs.md).

Every node ships its boot log, cloud-init's output and its Slurm daemon's log to the
cluster's log group as streams `<node name>/<instance id>/<log>` (model/logs.py, step
25), so a node name finds every instance that carried it and an instance id finds its
own streams. `--step` keeps the boot log's lines of one step (the entry point's start,
end or FAILED line and the step's own lines); `--log` one kind of log.

Exit status (clitools/exits.py): 0 shown; 1 the boot shown ended FAILED (its step, why
and where the log is, as the entry point wrote it); 2 bad input (a node name that is
neither, an unknown step or log); 3 the log group or the node's streams cannot be read
(not deployed, logs.enabled false, nothing shipped under that name, access denied).
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from clitools.errors import CheckFailed, Unreadable, UsageError
from model import logs as logs_model
from ops.aws import call
from ops.context import Context

STEPS_DIR = Path(__file__).resolve().parents[1] / "nodeside" / "steps"
LOGS = (*logs_model.NODE_LOGS, *logs_model.CONTROLLER_LOGS)
# The entry point's verdict lines (nodeside/bin/gpu-cluster-boot).
BOOT_END = re.compile(r"\[boot\] (?:(FAILED) (\S+) after \d+s: .*|all \d+ step\(s\) ok)$")
MAX_EVENTS = 10000  # a bound on one command's output; --since narrows it


def step_names() -> list[str]:
    return sorted(p.stem for p in STEPS_DIR.glob("[0-9][0-9]-*.sh"))


def resolve_step(step: str) -> str:
    """`50-slurm`, `50` or `slurm` -> `50-slurm`, by the entry point's own rule (--only)."""
    for name in step_names():
        if step in (name, f"{name}.sh", name.split("-", 1)[0], name.split("-", 1)[1]):
            return name
    raise UsageError(f"no boot step '{step}'; steps are: {', '.join(step_names())}")


def _streams(ctx: Context, group: str, node: str) -> list[str]:
    """Stream names of `node` (a Slurm node name, or an instance id)."""
    client = ctx.session.client("logs")
    # The command line checked the shape (ops/cli.py _node); an instance id is inside the
    # names, so its streams are found by listing the group's.
    if node.startswith("i-"):
        params: dict[str, Any] = {"logGroupName": group}
        pick = f"/{node}/"
    else:
        params = {"logGroupName": group, "logStreamNamePrefix": logs_model.stream_prefix(node)}
        pick = logs_model.stream_prefix(node)
    names: list[str] = []
    while True:
        page = call(client, "describe_log_streams", f"listing the log streams in {group}", **params)
        names += [s["logStreamName"] for s in page.get("logStreams", []) if pick in s["logStreamName"]]
        if not page.get("nextToken"):
            return sorted(names)
        params["nextToken"] = page["nextToken"]


def read(
    ctx: Context, group: str, node: str, step: str | None, log: str | None, since_minutes: float | None
) -> list[dict[str, Any]]:
    """The events, oldest first: {time, stream, message}."""
    full_step = resolve_step(step) if step else None
    names = _streams(ctx, group, node)
    want = "boot" if full_step else log
    if want:
        names = [n for n in names if n.rsplit("/", 1)[-1] == want]
    if not names:
        what = f"{want} log streams" if want else "log streams"
        raise Unreadable(
            f"no {what} of {node} in {group}: the node never shipped logs under that name "
            "(logs.enabled false, its boot stopped before step 25, or another name)"
        )
    client = ctx.session.client("logs")
    events: list[dict[str, Any]] = []
    for i in range(0, len(names), 100):  # FilterLogEvents takes at most 100 stream names
        params: dict[str, Any] = {"logGroupName": group, "logStreamNames": names[i : i + 100]}
        if full_step:
            params["filterPattern"] = f'"{full_step}"'
        if since_minutes is not None:
            start = ctx.clock.now() - timedelta(minutes=since_minutes)
            params["startTime"] = int(start.timestamp() * 1000)
        while len(events) < MAX_EVENTS:
            page = call(client, "filter_log_events", f"reading the logs of {node} in {group}", **params)
            events += [
                {"time": e["timestamp"], "stream": e["logStreamName"], "message": e["message"].rstrip("\n")}
                for e in page.get("events", [])
            ]
            if not page.get("nextToken"):
                break
            params["nextToken"] = page["nextToken"]
    events.sort(key=lambda e: (e["time"], e["stream"]))
    return events[:MAX_EVENTS]


def boot_failed(events: list[dict[str, Any]]) -> str | None:
    """The last boot verdict shown, when it is a failure: the entry point's FAILED line."""
    verdict = None
    for e in events:
        if e["stream"].endswith("/boot"):
            m = BOOT_END.search(e["message"])
            if m:
                verdict = e["message"] if m.group(1) else None
    return verdict


def render(events: list[dict[str, Any]], node: str) -> str:
    lines = []
    for e in events:
        when = datetime.fromtimestamp(e["time"] / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        lines.append(f"{when} {e['stream'].removeprefix(logs_model.stream_prefix(node))} {e['message']}")
    return "\n".join(lines)


def run(ctx: Context, args: Any, aws_name_base: str) -> int:
    """Exit 0, or raises: UsageError (2), Unreadable/OpsError of a failed call (3),
    CheckFailed when the boot shown ended FAILED (1), after printing the lines."""
    group = logs_model.log_group_name(aws_name_base)
    events = read(ctx, group, args.node, args.step, args.log, args.since)
    if args.json:
        ctx.print(json.dumps(events, indent=2))
    elif events:
        ctx.print(render(events, args.node))
    if len(events) >= MAX_EVENTS:
        print(f"gpu-cluster-ops logs: stopped at {MAX_EVENTS} lines; narrow with --since or --step", file=ctx.err)
    if not events:
        print(f"gpu-cluster-ops logs: no lines in {group} for {args.node} with these filters", file=ctx.err)
    failed = boot_failed(events)
    if failed:
        raise CheckFailed(f"the boot shown failed: {failed.split('[boot] ', 1)[1]}")
    return 0
