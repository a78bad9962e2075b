"""status: per Auto Scaling group its block and instances, and the first-boot gate.

Per instance: what Auto Scaling and EC2 say, its boot marker, its Slurm state and drain
reason, the health program's last run (state, time, failed checks) from the records on
/fsx, and what the repair agent is doing with it (waiting, isolated, its last actions);
for the cluster, the repair policy, the nodes out and the agent's recent history, all
read on the controller by nodeside/cluster_status.py; and what each node booted from:
the image id (EC2), the kernel and the baked image's manifest sha256 (its boot marker,
from step 20), each compared with the pinned image (its tags, DescribeImages): a node
that differs is flagged (DIFFERS: ...).

With the stack's config it also compares each declared block's dates with EC2's record
of the reservation (the same check as preflight, model/preflight.py
block_date_findings): a block extended since the last `pulumi up` is named, with the
one-line stack edit that declares the new end.
"""

from __future__ import annotations

import json
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from clitools import exits
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
from ops.image import baked_record, describe_image
from ops.remote import STATUS_BEGIN, status_script
from ops.ssm import run_shell


def _blocks(ctx: Context, ids: list[str]) -> dict[str, BlockFacts]:
    try:
        return describe_blocks(ctx.session.client("ec2"), ids)
    except (ClientError, BotoCoreError) as err:
        raise OpsError(describe_error(err, "reading the cluster's Capacity Blocks"), exits.UNREACHABLE) from err


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


def _pinned_image(ctx: Context, cfg: ClusterConfig | None) -> dict[str, Any] | None:
    """The stack's pinned image and what its tags say it was baked with (ops bake)."""
    if cfg is None or not cfg.image.ami_id:
        return None
    ami = cfg.image.ami_id
    try:
        img = describe_image(ctx.session.client("ec2"), ami)
    except OpsError as err:
        return {"ami_id": ami, "error": str(err)}
    if img is None:
        return {"ami_id": ami, "error": "EC2 does not know it in this region"}
    rec = baked_record(img)
    return {
        "ami_id": ami,
        "baked": rec is not None,
        "manifest_sha256": rec["manifest_sha256"] if rec else None,
        "kernel": rec["versions"]["kernel"] if rec else None,
    }


def drift(row: dict[str, Any], pinned: dict[str, Any] | None) -> list[str]:
    """How a node differs from the pinned image: the image it was launched from (EC2),
    and the kernel and manifest its step 20 reported (its boot marker)."""
    if pinned is None:
        return []
    out = []
    if row["image_id"] and row["image_id"] != pinned["ami_id"]:
        out.append(f"image {row['image_id']} is not the pinned {pinned['ami_id']} (replace the node to move it)")
    want, got = pinned.get("manifest_sha256"), row["image_manifest"]
    if want and got and got != want:
        out.append(f"image manifest {got[:12]} is not the pinned image's {want[:12]}")
    kernel = pinned.get("kernel")
    if kernel and kernel != "none" and row["kernel"] and row["kernel"] != kernel:
        out.append(f"kernel {row['kernel']} is not the pinned image's {kernel} (its Lustre module is for that one)")
    return out


NODE_REPAIR_ACTIONS = 3  # per node row: its last few repair actions
CLUSTER_REPAIR_ACTIONS = 10  # the cluster's repair timeline: the most recent actions


def _node_repair(node: str | None, repair: dict) -> dict[str, Any]:
    """The repair agent's view of one node: isolated, waiting or out, and its last actions."""
    if not node or not repair:
        return {"state": None, "actions": []}
    state = None
    if node in repair.get("isolated", {}):
        state = f"isolated: {repair['isolated'][node]}"
    elif node in repair.get("out", []):
        state = "out: replaced, its successor not yet in service"
    elif node in repair.get("waiting", {}):
        state = repair["waiting"][node]
    mine = [h for h in repair.get("history", []) if h.get("node") == node]
    return {"state": state, "actions": mine[-NODE_REPAIR_ACTIONS:]}


def _repair(repair: dict | None) -> dict[str, Any] | None:
    if not repair:
        return None
    return {
        "policy": repair.get("policy"),
        "out": repair.get("out", []),
        "isolated": repair.get("isolated", {}),
        "history": repair.get("history", [])[-CLUSTER_REPAIR_ACTIONS:],
    }


def _instance_row(i: dict, ec2: dict, remote: dict) -> dict[str, Any]:
    """One instance of a group: what Auto Scaling, EC2, its boot marker, Slurm and the
    health program say."""
    ip = ec2.get("PrivateIpAddress")
    node = node_name(ip) if ip else None
    marker = remote.get("markers", {}).get(node, {}) if node else {}
    slurm = remote.get("slurm", {})
    health = remote.get("health", {}).get(node, {}) if node else {}
    topo = remote.get("topology", {}).get(node, {}) if node else {}
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
        # EC2 network nodes, top layer first, as the controller's topology refresh recorded them
        "network_nodes": topo.get("network_nodes"),
        "topology_flat_reason": topo.get("flat_reason"),
        "image_id": ec2.get("ImageId"),
        "kernel": marker.get("kernel") or None,
        "image_manifest": marker.get("image_manifest") or None,
        "repair": _node_repair(node, remote.get("repair") or {}),
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
    pinned = _pinned_image(ctx, cfg)
    remote = _remote(ctx, cluster, name_base) if ssm and ids else {}
    out_groups = []
    for g in groups:
        rows = [
            _instance_row(i, instances.get(i["InstanceId"], {}), remote)
            for i in sorted(g.get("Instances", []), key=lambda i: i["InstanceId"])
        ]
        for r in rows:
            r["drift"] = drift(r, pinned)
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
        "repair": _repair(remote.get("repair")),
        "declared_dates": _declared_dates(cfg, facts, stack),
        "pinned_image": pinned,
        **({"ssm_error": remote["error"]} if "error" in remote else {}),
    }


def _health(i: dict[str, Any]) -> str:
    """`healthy (2026-12-01T12:00:00Z)`; `?` before the first run (or without SSM)."""
    if not i["health_state"]:
        return "?"
    return f"{i['health_state']} ({i['health_time']})" if i["health_time"] else i["health_state"]


def _short(digest: str | None) -> str:
    """A manifest's sha256 cut to 12 (`none`: a plain image; `?`: no boot marker read)."""
    return digest[:12] if digest else "?"


def _pinned_line(p: dict[str, Any] | None) -> list[str]:
    if p is None:
        return []
    if "error" in p:
        return [f"pinned image {p['ami_id']}: unknown ({p['error']})"]
    if not p["baked"]:
        return [f"pinned image {p['ami_id']}: plain (not baked by ops bake): nodes install their packages at boot"]
    return [f"pinned image {p['ami_id']}: baked, kernel {p['kernel']}, manifest {_short(p['manifest_sha256'])}"]


def render(report: dict[str, Any]) -> str:
    lines = [f"cluster {report['cluster']} ({report['region']})", *_pinned_line(report.get("pinned_image"))]
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
            lines.append(
                f"    image {i['image_id'] or '?'}  kernel {i['kernel'] or '?'}  manifest {_short(i['image_manifest'])}"
            )
            lines += [f"    DIFFERS: {d}" for d in i["drift"]]
            if i["drain_reason"]:
                lines.append(f"    drain reason: {i['drain_reason']}")
            lines += [f"    health failed: {f}" for f in i["health_failed"]]
            if i["repair"]["state"]:
                lines.append(f"    repair: {i['repair']['state']}")
            lines += [
                f"    repair {h.get('time')}: {h.get('action')}: {h.get('detail')}" for h in i["repair"]["actions"]
            ]
            if i["network_nodes"]:
                lines.append(f"    network nodes: {' > '.join(i['network_nodes'])}")
            elif i["topology_flat_reason"]:
                lines.append(f"    network nodes: none yet ({i['topology_flat_reason']})")
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
    lines += _render_repair(report.get("repair"))
    lines += [f"stack file: {d['path']}: {d['message']}" for d in report.get("declared_dates", [])]
    return "\n".join(lines)


def _render_repair(r: dict[str, Any] | None) -> list[str]:
    if not r:
        return []
    out = ", ".join(r["out"]) or "none"
    isolated = ", ".join(f"{n} ({why})" for n, why in sorted(r["isolated"].items())) or "none"
    lines = [f"repair: policy {r['policy']}; out: {out}; isolated: {isolated}"]
    return lines + [f"  {h.get('time')} {h.get('node')} {h.get('action')}: {h.get('detail')}" for h in r["history"]]


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
    return exit_code(ctx, report)


def failures(report: dict[str, Any]) -> list[str]:
    """What makes the cluster's status a failure: a NO-GO gate, a node whose boot failed."""
    out = []
    gate = report.get("validation") or {}
    if gate.get("verdict") == "NO-GO":
        out.append("the validation gate is NO-GO")
    for g in report["groups"]:
        for i in g["instances"]:
            if i["boot"] == "failed":
                out.append(
                    f"boot failed on {i['node'] or i['instance_id']}"
                    + (f" at {i['boot_step']}" if i["boot_step"] else "")
                )
    return out


def exit_code(ctx: Context, report: dict[str, Any]) -> int:
    """1 for a NO-GO gate or a failed boot (named on stderr), 3 when the controller could
    not be read (the gate and boot markers are unknown), else 0."""
    bad = failures(report)
    if bad:
        ctx.progress(f"status: {'; '.join(bad)}")
        return exits.FAILED
    if "ssm_error" in report:
        ctx.progress("status: node status and the gate are unknown (the controller could not be read)")
        return exits.UNREACHABLE
    return exits.OK
