"""Lookups shared by `status` and `replace`: the cluster's groups, instances, controller."""

from __future__ import annotations

import re
from typing import Any

from model.preflight import asg_name
from model.tags import CLUSTER as CLUSTER_TAG
from ops.aws import OpsError, call
from ops.context import Context

CONTROLLER_GROUP = "controller"
_NODE = re.compile(r"^ip-(\d{1,3})-(\d{1,3})-(\d{1,3})-(\d{1,3})$")


def node_name(ipv4: str) -> str:
    """Slurm node name of a node: its hostname, which EC2 derives from the IPv4."""
    return "ip-" + ipv4.replace(".", "-")


def node_ipv4(name: str) -> str | None:
    m = _NODE.match(name)
    if not m or any(int(o) > 255 for o in m.groups()):
        return None
    return ".".join(m.groups())


def cluster_groups(ctx: Context, cluster: str, name_base: str | None = None) -> list[dict[str, Any]]:
    """The stack's Auto Scaling groups, sorted by name.

    Tagged GpuClusterName=<cluster> and named from the stack (`name_base`:
    ClusterConfig.aws_name_base): a stack file copied without renaming `name` yields a
    second cluster with the same tag, told apart only by its group names.
    """
    prefix = asg_name(name_base or cluster, "")
    autoscaling = ctx.session.client("autoscaling")
    groups, token = [], None
    while True:
        params: dict[str, Any] = {"Filters": [{"Name": f"tag:{CLUSTER_TAG}", "Values": [cluster]}]}
        if token:
            params["NextToken"] = token
        page = call(autoscaling, "describe_auto_scaling_groups", "listing the cluster's Auto Scaling groups", **params)
        groups += [g for g in page["AutoScalingGroups"] if g["AutoScalingGroupName"].startswith(prefix)]
        token = page.get("NextToken")
        if not token:
            return sorted(groups, key=lambda g: g["AutoScalingGroupName"])


def group_short_name(name_base: str, asg: str) -> str:
    return asg.removeprefix(asg_name(name_base, ""))


def group_block_id(group: dict[str, Any]) -> str | None:
    ids = (
        group.get("CapacityReservationSpecification", {})
        .get("CapacityReservationTarget", {})
        .get("CapacityReservationIds", [])
    )
    return ids[0] if ids else None


def describe_instances(ctx: Context, ids: list[str]) -> dict[str, dict[str, Any]]:
    if not ids:
        return {}
    ec2 = ctx.session.client("ec2")
    out, token = {}, None
    while True:
        params: dict[str, Any] = {"InstanceIds": ids}
        if token:
            params["NextToken"] = token
        page = call(ec2, "describe_instances", "reading the cluster's instances", **params)
        for r in page["Reservations"]:
            for i in r["Instances"]:
                out[i["InstanceId"]] = i
        token = page.get("NextToken")
        if not token:
            return out


def controller_instance(ctx: Context, name_base: str) -> str:
    """Instance id of the InService controller (its group's name is fixed from the stack)."""
    name = asg_name(name_base, CONTROLLER_GROUP)
    page = call(
        ctx.session.client("autoscaling"),
        "describe_auto_scaling_groups",
        "finding the controller",
        AutoScalingGroupNames=[name],
    )
    for g in page["AutoScalingGroups"]:
        for i in g.get("Instances", []):
            if i["LifecycleState"] == "InService":
                instance: str = i["InstanceId"]
                return instance
    raise OpsError(
        f"no InService controller in Auto Scaling group {name}; is the cluster up "
        "(`status`), and has its block started?"
    )
