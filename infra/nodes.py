"""Node groups: one Auto Scaling group per `ClusterConfig.node_groups()` entry.

Why Auto Scaling groups rather than one `aws.ec2.Instance` per node:
  - the number of resources is independent of the node count (1024 nodes in
    16 blocks are 17 groups and one launch template), so evaluation does not grow with nodes;
  - a terminated or EC2-unhealthy instance is replaced automatically from the same
    launch template, and needs no edit to join (identity comes from IMDS tags);
  - ASGs are the documented way to launch into a Capacity Block (FACTS 3.1, [ASG-CB]);
    one group per block, because a group targets one block.

The group pins the template's latest version number (Capacity Block groups must pin one,
[ASG-CB]). A new template version therefore changes only the version the group launches
*new* instances with; running instances keep running until someone replaces them on
purpose (no `instance_refresh` block: Pulumi never starts a refresh).

Replacing a node (same template version, joins with no edit; drain it in Slurm first):
    aws autoscaling terminate-instance-in-auto-scaling-group --instance-id i-... \
        --no-should-decrement-desired-capacity
  (a node that fails EC2 status checks or is terminated is replaced without this).
Rolling out a template change on purpose, one group at a time, workers first, the
controller group last (its state is on /fsx, so the new controller resumes the queue):
    aws autoscaling start-instance-refresh --auto-scaling-group-name gpu-cluster-<cluster>-<group> \
        --preferences '{"MinHealthyPercentage": 90, "SkipMatching": true, "InstanceWarmup": 900}'
  SkipMatching leaves nodes already on the pinned version alone. A Capacity Block has no
  spare capacity, so the refresh terminates before it launches (MinHealthyPercentage
  below 100) and EC2 needs a few minutes to free a terminated slot (FACTS 3.2).

Scale-in protection stays off: the group's size is always min = max = desired, so the
group never scales in on its own, and Capacity Block groups must be able to go to zero
before the block ends ([ASG-CB]); protection would block exactly that.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from model import tags as node_tags
from model.config import NodeGroup
from model.tags import ON_DEMAND


def asg_name(cluster_name: str, group_name: str) -> str:
    return f"gpu-cluster-{cluster_name}-{group_name}"


def instance_tags(cluster_name: str, group: NodeGroup, total_nodes: int,
                  extra: dict[str, str]) -> dict[str, str]:
    """Tags each instance carries; the node contract reads the GpuCluster* ones from IMDS."""
    block = group.block.name if group.block is not None else ON_DEMAND
    return {
        **extra,
        "Name": f"{cluster_name}-{group.role}",
        **node_tags.identity_tags(cluster_name, group.role, total_nodes, block),
    }


@dataclass
class NodeGroupsArgs:
    cluster_name: str
    groups: list[NodeGroup]
    total_nodes: int
    subnet_id: pulumi.Input[str]
    launch_template_id: pulumi.Input[str]
    launch_template_version: pulumi.Input[int]
    tags: dict[str, str] = field(default_factory=dict)


def _pinned(version) -> str:
    return str(int(version))


class NodeGroups(pulumi.ComponentResource):
    """One Auto Scaling group per node group. Outputs: asg_names (group name -> ASG name).

    Groups of size 0 (a first block that only holds the controller) get no ASG.
    """

    asg_names: dict[str, pulumi.Output[str]]

    def __init__(self, name: str, args: NodeGroupsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-cluster:index:NodeGroups", name, None, opts)
        version = pulumi.Output.from_input(args.launch_template_version).apply(_pinned)
        self.asg_names = {}
        for g in args.groups:
            if g.size > 0:
                self.asg_names[g.name] = self._group(name, args, g, version).name
        self.register_outputs({"asg_names": self.asg_names})

    def _group(self, name: str, args: NodeGroupsArgs, g: NodeGroup, version: pulumi.Output[str]):
        capacity = None
        if g.block is not None:
            # The launch template says "capacity-block"; the group names the block.
            capacity = aws.autoscaling.GroupCapacityReservationSpecificationArgs(
                capacity_reservation_preference="capacity-reservations-only",
                capacity_reservation_target=aws.autoscaling.GroupCapacityReservationSpecificationCapacityReservationTargetArgs(
                    capacity_reservation_ids=[g.block.reservation_id]))
        tags = instance_tags(args.cluster_name, g, args.total_nodes, args.tags)
        return aws.autoscaling.Group(
            f"{name}-{g.name}",
            name=asg_name(args.cluster_name, g.name),
            min_size=g.size, max_size=g.size, desired_capacity=g.size,
            vpc_zone_identifiers=[args.subnet_id],
            launch_template=aws.autoscaling.GroupLaunchTemplateArgs(id=args.launch_template_id, version=version),
            capacity_reservation_specification=capacity,
            # EC2 status checks: a stopped, impaired or reclaimed instance is replaced.
            health_check_type="EC2",
            health_check_grace_period=900,
            # A block may start days after `pulumi up`; don't wait for instances.
            wait_for_capacity_timeout="0",
            protect_from_scale_in=False,
            tags=[aws.autoscaling.GroupTagArgs(key=k, value=v, propagate_at_launch=True)
                  for k, v in sorted(tags.items())],
            opts=pulumi.ResourceOptions(parent=self),
        )
