"""replace NODE: drain in Slurm, terminate through its group, wait for the new node idle.

Stages, each reported as it ends (and in `--json`): resolve, drain, terminate,
new-instance, slurm-idle. Termination keeps the group's desired capacity
(ShouldDecrementDesiredCapacity=False), so the group launches a replacement from the
same template into the same block. Inside a Capacity Block EC2 needs a few minutes to
clean up the terminated instance before its slot can be reused [CB-LAUNCH], hence the
generous default wait.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from model.tags import CLUSTER as CLUSTER_TAG
from ops.aws import OpsError, call
from ops.cluster import controller_instance, describe_instances, node_ipv4, node_name
from ops.context import Context
from ops.remote import drain_script, node_state_script
from ops.ssm import run_shell
from userdata import layout

DRAIN_REASON = "gpu-cluster replace"


@dataclass
class Stage:
    stage: str
    status: str  # ok | failed | skipped
    detail: str


@dataclass
class Replacement:
    node: str
    stages: list[Stage] = field(default_factory=list)

    def add(self, ctx: Context, stage: str, status: str, detail: str) -> None:
        self.stages.append(Stage(stage, status, detail))
        ctx.progress(f"[{stage}] {status}: {detail}")


def resolve(ctx: Context, cluster: str, node: str) -> tuple[str, str, str]:
    """(instance id, Slurm node name, Auto Scaling group) of `node` (name or instance id)."""
    ec2 = ctx.session.client("ec2")
    filters = [
        {"Name": f"tag:{CLUSTER_TAG}", "Values": [cluster]},
        {"Name": "instance-state-name", "Values": ["pending", "running"]},
    ]
    if node.startswith("i-"):
        page = call(ec2, "describe_instances", f"looking up {node}", InstanceIds=[node])
    else:
        ip = node_ipv4(node)
        if ip is None:
            raise OpsError(f"{node!r} is neither a Slurm node name (ip-10-0-1-5) nor an instance id (i-...)")
        page = call(
            ec2,
            "describe_instances",
            f"looking up {node}",
            Filters=[*filters, {"Name": "private-ip-address", "Values": [ip]}],
        )
    found = [i for r in page["Reservations"] for i in r["Instances"]]
    if not found:
        raise OpsError(f"no running instance of cluster {cluster} is {node}")
    inst = found[0]
    if inst.get("State", {}).get("Name") not in ("pending", "running"):
        raise OpsError(f"{inst['InstanceId']} is {inst.get('State', {}).get('Name')}, not running; nothing to replace")
    tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
    if tags.get(CLUSTER_TAG) != cluster:
        raise OpsError(
            f"{inst['InstanceId']} is not a node of cluster {cluster} (tag {CLUSTER_TAG}="
            f"{tags.get(CLUSTER_TAG, 'missing')})"
        )
    asg = tags.get("aws:autoscaling:groupName")
    if not asg:
        page = call(
            ctx.session.client("autoscaling"),
            "describe_auto_scaling_instances",
            f"finding the group of {inst['InstanceId']}",
            InstanceIds=[inst["InstanceId"]],
        )
        asg = next((i["AutoScalingGroupName"] for i in page["AutoScalingInstances"]), None)
    if not asg:
        raise OpsError(f"{inst['InstanceId']} is in no Auto Scaling group; it cannot be replaced through one")
    ip = inst.get("PrivateIpAddress")
    if not ip:
        raise OpsError(f"{inst['InstanceId']} has no private IPv4 yet; wait until it is running")
    return inst["InstanceId"], node_name(ip), asg


def _in_service(ctx: Context, asg: str) -> tuple[list[str], int]:
    page = call(
        ctx.session.client("autoscaling"),
        "describe_auto_scaling_groups",
        f"reading group {asg}",
        AutoScalingGroupNames=[asg],
    )
    if not page["AutoScalingGroups"]:
        raise OpsError(f"Auto Scaling group {asg} disappeared")
    g = page["AutoScalingGroups"][0]
    return [i["InstanceId"] for i in g.get("Instances", []) if i["LifecycleState"] == "InService"], g["DesiredCapacity"]


def _wait_new_instance(ctx: Context, asg: str, old: set[str], timeout: float, poll: float) -> str:
    start = ctx.clock.monotonic()
    while True:
        ids, desired = _in_service(ctx, asg)
        new = sorted(set(ids) - old)
        if new:
            return new[0]
        elapsed = ctx.clock.monotonic() - start
        if elapsed >= timeout:
            raise OpsError(
                f"no new InService instance in {asg} after {elapsed / 60:.0f} min; check the group's "
                f"activities (aws autoscaling describe-scaling-activities --auto-scaling-group-name {asg})"
            )
        ctx.progress(
            f"  ... waiting for a new instance in {asg}: {len(ids)}/{desired} InService ({elapsed / 60:.1f} min)"
        )
        ctx.clock.sleep(poll)


def _wait_idle(ctx: Context, cluster: str, name_base: str, node: str, timeout: float, poll: float) -> str:
    start = ctx.clock.monotonic()
    state = ""
    while True:
        try:
            # Re-resolved each time: the node being replaced may be the controller.
            controller = controller_instance(ctx, name_base)
            res = run_shell(ctx, controller, node_state_script(node), f"sinfo {node}", timeout=60)
            state = res.stdout.strip() if res.status == "Success" else state
        except OpsError as err:
            ctx.progress(f"  ... {err}")
        if state.rstrip("*") in ("idle", "mixed", "allocated"):
            return state
        elapsed = ctx.clock.monotonic() - start
        if elapsed >= timeout:
            raise OpsError(
                f"{node} is '{state or 'not registered'}' in Slurm after {elapsed / 60:.0f} min, not idle; "
                f"read {layout.BOOT_LOG} on it and its marker under "
                f"{layout.fsx_root(cluster)}/status/"
            )
        ctx.progress(
            f"  ... waiting for {node} to be idle in Slurm: {state or 'not registered yet'} ({elapsed / 60:.1f} min)"
        )
        ctx.clock.sleep(poll)


def replace(
    ctx: Context,
    cluster: str,
    node: str,
    drain: bool = True,
    instance_timeout: float = 1800,
    idle_timeout: float = 2700,
    poll: float = 30,
    name_base: str | None = None,
) -> Replacement:
    """Replace one node; `name_base` (ClusterConfig.aws_name_base) names the groups."""
    name_base = name_base or cluster
    rep = Replacement(node)
    try:
        instance_id, slurm_node, asg = resolve(ctx, cluster, node)
        rep.add(ctx, "resolve", "ok", f"{node} is {instance_id} ({slurm_node}) in {asg}")
        if drain:
            controller = controller_instance(ctx, name_base)
            res = run_shell(ctx, controller, drain_script(slurm_node, DRAIN_REASON), f"drain {slurm_node}")
            if res.status != "Success":
                raise OpsError(
                    f"draining {slurm_node} on {controller}: {res.status} (exit {res.exit_code}): "
                    f"{(res.stderr or res.stdout).strip()[-300:]}; pass --no-drain to replace it anyway"
                )
            rep.add(ctx, "drain", "ok", f'{slurm_node} drained (reason "{DRAIN_REASON}") via {controller}')
        else:
            rep.add(ctx, "drain", "skipped", "--no-drain")
        before, _ = _in_service(ctx, asg)
        act = call(
            ctx.session.client("autoscaling"),
            "terminate_instance_in_auto_scaling_group",
            f"terminating {instance_id}",
            InstanceId=instance_id,
            ShouldDecrementDesiredCapacity=False,
        )
        desc = act["Activity"].get("Description")
        rep.add(ctx, "terminate", "ok", f"{instance_id} terminating" + (f"; {desc}" if desc else ""))
        new_id = _wait_new_instance(ctx, asg, set(before) | {instance_id}, instance_timeout, poll)
        ip = describe_instances(ctx, [new_id]).get(new_id, {}).get("PrivateIpAddress")
        if not ip:
            raise OpsError(f"new instance {new_id} has no private IPv4")
        new_node = node_name(ip)
        rep.add(ctx, "new-instance", "ok", f"{new_id} ({new_node}) InService in {asg}")
        state = _wait_idle(ctx, cluster, name_base, new_node, idle_timeout, poll)
        rep.add(ctx, "slurm-idle", "ok", f"{new_node} is {state} in Slurm")
    except OpsError as err:
        done = {s.stage for s in rep.stages}
        nxt = next(s for s in ("resolve", "drain", "terminate", "new-instance", "slurm-idle", "") if s not in done)
        rep.add(ctx, nxt or "replace", "failed", str(err))
    return rep


def run(ctx: Context, args: Any, cluster: str, name_base: str | None = None) -> int:
    rep = replace(
        ctx,
        cluster,
        args.node,
        drain=not args.no_drain,
        instance_timeout=args.instance_timeout * 60,
        idle_timeout=args.idle_timeout * 60,
        poll=args.poll,
        name_base=name_base,
    )
    ok = all(s.status != "failed" for s in rep.stages)
    if args.json:
        ctx.print(json.dumps({"node": rep.node, "ok": ok, "stages": [asdict(s) for s in rep.stages]}, indent=2))
    else:
        for s in rep.stages:
            ctx.print(f"{s.stage}: {s.status}: {s.detail}")
    return 0 if ok else 1
