"""status: per Auto Scaling group its block and instances, and the first-boot gate.

Per instance: what Auto Scaling and EC2 say, its boot marker, its Slurm state and drain
reason, and the health program's last run (state, time, failed checks) from the records
on /fsx, all read on the controller by nodeside/cluster_status.py.

With the stack's config it also compares each declared block's dates with EC2's record
of the reservation (the same check as preflight, model/preflight.py
block_date_findings): a block extended since the last `pulumi up` is named, with the
one-line stack edit that declares the new end.
"""

from __future__ import annotations

import json
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from model.config import ClusterConfig
from model.preflight import BlockFacts, block_date_findings, iso
from ops.aws import OpsError, describe_error
from ops.cluster import (
    cluster_groups,
    controller_instance,
    describe_instances,
    group_block_id,
    group_short_name,
    node_name,
)
from ops.context import Context
from ops.facts import describe_blocks
from ops.remote import STATUS_BEGIN, status_script
from ops.ssm import run_shell


def _blocks(ctx: Context, ids: list[str]) -> dict[str, BlockFacts]:
    try:
        return describe_blocks(ctx.session.client("ec2"), ids)
    except (ClientError, BotoCoreError) as err:
        raise OpsError(describe_error(err, "reading the cluster's Capacity Blocks")) from err


def _block_row(f: BlockFacts) -> dict[str, Any]:
    return {
        "id": f.reservation_id,
        "state": f.state if f.found else "not found",
        "start": iso(f.start),
        "end": iso(f.end),
    }


def _declared_dates(cfg: ClusterConfig | None, facts: dict[str, BlockFacts], stack: str | None) -> list[dict[str, str]]:
    """Each declared block date EC2 disagrees with (an extension, mostly), with the edit."""
    if cfg is None:
        return []
    out = []
    for i, b in enumerate(cfg.capacity.capacity_blocks):
        f = facts.get(b.reservation_id)
        if f is not None and f.found:
            out += [{"path": x.path, "message": x.message} for x in block_date_findings(i, b, f, stack)]
    return out


def _remote(ctx: Context, cluster: str, name_base: str) -> dict[str, Any]:
    """Boot markers, gate report and Slurm states, read on the controller through SSM."""
    try:
        controller = controller_instance(ctx, name_base)
        ctx.progress(f"reading node status and the validation gate on {controller} through SSM ...")
        res = run_shell(ctx, controller, status_script(cluster), "gpu-cluster status", timeout=120)
    except OpsError as err:
        return {"error": str(err)}
    if res.status != "Success" or STATUS_BEGIN not in res.stdout:
        return {
            "error": f"status script on the controller: {res.status} (exit {res.exit_code}): "
            f"{(res.stderr or res.stdout).strip()[-300:]}"
        }
    try:
        remote: dict[str, Any] = json.loads(res.stdout.split(STATUS_BEGIN, 1)[1])
        return remote
    except ValueError as err:
        return {"error": f"status script output is not JSON ({err}); it may have been truncated"}


def _instance_row(i: dict, ec2: dict, remote: dict) -> dict[str, Any]:
    """One instance of a group: what Auto Scaling, EC2, its boot marker, Slurm and the
    health program say."""
    ip = ec2.get("PrivateIpAddress")
    node = node_name(ip) if ip else None
    marker = remote.get("markers", {}).get(node, {}) if node else {}
    slurm = remote.get("slurm", {})
    health = remote.get("health", {}).get(node, {}) if node else {}
    return {
        "instance_id": i["InstanceId"],
        "private_ip": ip,
        "node": node,
        "lifecycle": i.get("LifecycleState"),
        "health": i.get("HealthStatus"),
        "ec2_state": ec2.get("State", {}).get("Name"),
        "launch_template_version": i.get("LaunchTemplate", {}).get("Version"),
        "boot": marker.get("state"),
        "boot_step": marker.get("step"),
        "slurm": slurm.get(node) if node else None,
        "drain_reason": remote.get("reasons", {}).get(node) if node else None,
        "health_state": health.get("state"),
        "health_time": health.get("time"),
        "health_failed": health.get("failed", []),
    }


def _gate(v: dict | None) -> dict[str, Any] | None:
    if v is None:
        return None
    return {
        "verdict": v.get("verdict"),
        "run_id": v.get("run_id"),
        "blamed_nodes": v.get("blamed_nodes", []),
        "reasons": v.get("reasons", []),
    }


def collect(
    ctx: Context,
    cluster: str,
    region: str,
    ssm: bool = True,
    name_base: str | None = None,
    cfg: ClusterConfig | None = None,
    stack: str | None = None,
) -> dict[str, Any]:
    """`cfg` (the stack file's config, `stack` its name): also compare the declared block
    dates with EC2 (`declared_dates`)."""
    name_base = name_base or cluster
    groups = cluster_groups(ctx, cluster, name_base)
    if not groups:
        raise OpsError(
            f"no Auto Scaling group tagged GpuClusterName={cluster} in {region}; "
            "is the stack deployed (pulumi up) in this region?"
        )
    # The declared blocks too: one bought and declared but not yet deployed has no group.
    declared = {b.reservation_id for b in cfg.capacity.capacity_blocks} if cfg is not None else set()
    facts = _blocks(ctx, sorted({b for g in groups if (b := group_block_id(g))} | declared))
    blocks = {rid: _block_row(f) for rid, f in facts.items()}
    ids = [i["InstanceId"] for g in groups for i in g.get("Instances", [])]
    instances = describe_instances(ctx, ids)
    remote = _remote(ctx, cluster, name_base) if ssm and ids else {}
    out_groups = []
    for g in groups:
        rows = [
            _instance_row(i, instances.get(i["InstanceId"], {}), remote)
            for i in sorted(g.get("Instances", []), key=lambda i: i["InstanceId"])
        ]
        bid = group_block_id(g)
        out_groups.append(
            {
                "group": group_short_name(name_base, g["AutoScalingGroupName"]),
                "asg": g["AutoScalingGroupName"],
                "desired": g.get("DesiredCapacity"),
                "launch_template_version": g.get("LaunchTemplate", {}).get("Version"),
                "block": blocks.get(bid, {"id": bid, "state": "unknown"}) if bid else None,
                "instances": rows,
            }
        )
    return {
        "cluster": cluster,
        "region": region,
        "groups": out_groups,
        "validation": _gate(remote.get("validation")),
        "declared_dates": _declared_dates(cfg, facts, stack),
        **({"ssm_error": remote["error"]} if "error" in remote else {}),
    }


def _health(i: dict[str, Any]) -> str:
    """`healthy (2026-12-01T12:00:00Z)`; `?` before the first run (or without SSM)."""
    if not i["health_state"]:
        return "?"
    return f"{i['health_state']} ({i['health_time']})" if i["health_time"] else i["health_state"]


def render(report: dict[str, Any]) -> str:
    lines = [f"cluster {report['cluster']} ({report['region']})"]
    for g in report["groups"]:
        b = g["block"]
        where = f"block {b['id']} {b['state']} {b.get('start', '?')} .. {b.get('end', '?')}" if b else "on-demand"
        lines.append(
            f"group {g['group']} ({g['asg']}): desired {g['desired']}, template v{g['launch_template_version']}, {where}"
        )
        if not g["instances"]:
            lines.append("  (no instances)")
        for i in g["instances"]:
            boot = i["boot"] or "?"
            if i["boot_step"] and boot != "ok":
                boot += f" at {i['boot_step']}"
            lines.append(
                f"  {i['instance_id']}  {i['private_ip'] or '-'}  {i['node'] or '-'}  "
                f"{i['lifecycle']}/{i['health']}  v{i['launch_template_version']}  "
                f"boot {boot}  slurm {i['slurm'] or '?'}  health {_health(i)}"
            )
            if i["drain_reason"]:
                lines.append(f"    drain reason: {i['drain_reason']}")
            lines += [f"    health failed: {f}" for f in i["health_failed"]]
    gate = report["validation"]
    if gate:
        line = f"validation gate: {gate['verdict']}"
        if gate["run_id"]:
            line += f" (run {gate['run_id']})"
        if gate["blamed_nodes"]:
            line += f"; blamed: {', '.join(gate['blamed_nodes'])}"
        lines.append(line)
        lines += [f"  - {r}" for r in gate["reasons"] if r]
    if "ssm_error" in report:
        lines.append(f"validation gate: unknown ({report['ssm_error']})")
    lines += [f"stack file: {d['path']}: {d['message']}" for d in report.get("declared_dates", [])]
    return "\n".join(lines)


def run(
    ctx: Context,
    args: Any,
    cluster: str,
    region: str,
    name_base: str | None = None,
    cfg: ClusterConfig | None = None,
    stack: str | None = None,
) -> int:
    report = collect(ctx, cluster, region, ssm=not args.no_ssm, name_base=name_base, cfg=cfg, stack=stack)
    ctx.print(json.dumps(report, indent=2, sort_keys=True) if args.json else render(report))
    return 0
