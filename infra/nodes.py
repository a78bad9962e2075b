"""Node groups: one Auto Scaling group per `ClusterConfig.node_groups()` entry.

Why Auto Scaling groups rather than one `aws.ec2.Instance` per node:
  - the number of resources is independent of the node count (1024 nodes in
    16 blocks are 17 groups and one launch template), so evaluation does not grow with nodes;
  - a terminated or EC2-unhealthy instance is replaced automatically from the same
    launch template, and needs no edit to join (identity comes from IMDS tags);
  - ASGs are the documented way to launch into a Capacity Block [ASG-CB];
    one group per block, because a group targets one block.

The controller group launches from the controller's own template, every other group
from the workers' (infra/launch_template.py). A dedicated controller's group
(controller.placement: dedicated) is on demand, in the same subnet, with no block.

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
    aws autoscaling start-instance-refresh --auto-scaling-group-name gpu-cluster-<stack>-<group> \
        --preferences '{"MinHealthyPercentage": 90, "SkipMatching": true, "InstanceWarmup": 900}'
  SkipMatching leaves nodes already on the pinned version alone. A Capacity Block has no
  spare capacity, so the refresh terminates before it launches (MinHealthyPercentage
  below 100) and EC2 needs a few minutes to free a terminated slot [CB-LAUNCH].

Scale-in protection stays off: the group's size is always min = max = desired, so the
group never scales in on its own, and Capacity Block groups must be able to go to zero
before the block ends ([ASG-CB]); protection would block exactly that.

Capacity Block groups follow their block's dates (model/schedule.py): a group whose block
has not started is declared at zero with a scheduled action to its size at the start;
every block group gets a scheduled action to zero `block_end_margin_minutes` before the
end, and its instances carry the end as the `GpuClusterBlockEnd` tag, which the controller
turns into a Slurm reservation so no job runs into the end. Logical names, ASG names and
action names derive from the block name, never from its position in the list: replacing
block `a` by block `b` touches only those groups and their actions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from infra.component import Component
from model import preflight
from model import tags as node_tags
from model.capacity import NodeGroup, iso_utc
from model.schedule import BlockSchedule, GroupSchedule
from model.tags import ON_DEMAND


def asg_name(name_base: str, group_name: str) -> str:
    """`name_base`: ClusterConfig.aws_name_base (the stack name under Pulumi)."""
    return preflight.asg_name(name_base, group_name)


def instance_tags(cluster_name: str, group: NodeGroup, total_nodes: int, extra: dict[str, str]) -> dict[str, str]:
    """Tags each instance carries; the node contract reads the GpuCluster* ones from IMDS."""
    block = group.block.name if group.block is not None else ON_DEMAND
    block_end = iso_utc(group.block.end) if group.block is not None and group.block.end is not None else None
    return {
        **extra,
        "Name": f"{cluster_name}-{group.role}",
        **node_tags.identity_tags(cluster_name, group.role, total_nodes, block, block_end),
    }


def action_name(group: NodeGroup, what: str) -> str:
    """Scheduled action name: unique within its group, names the block it follows."""
    assert group.block is not None
    return f"gpu-cluster-block-{group.block.name}-{what}"


@dataclass
class NodeGroupsArgs:
    cluster_name: str
    groups: list[NodeGroup]
    total_nodes: int
    subnet_id: pulumi.Input[str]
    launch_template_id: pulumi.Input[str]
    launch_template_version: pulumi.Input[int]
    # The controller group launches from the controller's own template (infra/cluster.py).
    controller_launch_template_id: pulumi.Input[str]
    controller_launch_template_version: pulumi.Input[int]
    # Login nodes (role `login`, model/login.py) launch from their own template; None: none.
    login_launch_template_id: pulumi.Input[str] | None = None
    login_launch_template_version: pulumi.Input[int] | None = None
    # The run's one schedule (model/schedule.py cluster_schedule), also read by the stack
    # outputs; required with Capacity Blocks: it decides started / not started.
    schedule: BlockSchedule | None = None
    tags: dict[str, str] = field(default_factory=dict)
    # What the groups' fixed names derive from (ClusterConfig.aws_name_base); None: the
    # cluster name.
    aws_name_base: str | None = None


def _pinned(version) -> str:
    return str(int(version))


class NodeGroups(Component):
    """One Auto Scaling group per node group. Outputs: asg_names (group name -> ASG name).

    Groups of size 0 (a first block that only holds the controller) get no ASG.
    """

    TYPE = "gpu-cluster:index:NodeGroups"
    asg_names: dict[str, pulumi.Output[str]]

    def __init__(self, name: str, args: NodeGroupsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(name, opts)
        templates = {
            "worker": (args.launch_template_id, pulumi.Output.from_input(args.launch_template_version).apply(_pinned)),
            "controller": (
                args.controller_launch_template_id,
                pulumi.Output.from_input(args.controller_launch_template_version).apply(_pinned),
            ),
        }
        if args.login_launch_template_id is not None:
            templates["login"] = (
                args.login_launch_template_id,
                pulumi.Output.from_input(args.login_launch_template_version).apply(_pinned),
            )
        self.asg_names = {}
        for g in args.groups:
            if g.size > 0:
                self.asg_names[g.name] = self._group(name, args, g, templates[g.role]).name
        self.register_outputs({"asg_names": self.asg_names})

    def _group(
        self, name: str, args: NodeGroupsArgs, g: NodeGroup, template: tuple[pulumi.Input[str], pulumi.Output[str]]
    ):
        capacity = None
        sched = GroupSchedule(g.size, None, None, None)
        if g.block is not None:
            if args.schedule is None:
                raise ValueError("NodeGroupsArgs.schedule is required with Capacity Blocks")
            sched = args.schedule.of(g.name)
            # The launch template says "capacity-block"; the group names the block.
            capacity = aws.autoscaling.GroupCapacityReservationSpecificationArgs(
                capacity_reservation_preference="capacity-reservations-only",
                capacity_reservation_target=aws.autoscaling.GroupCapacityReservationSpecificationCapacityReservationTargetArgs(
                    capacity_reservation_ids=[g.block.reservation_id]
                ),
            )
        tags = instance_tags(args.cluster_name, g, args.total_nodes, args.tags)
        size = sched.size_now
        asg = aws.autoscaling.Group(
            f"{name}-{g.name}",
            name=asg_name(args.aws_name_base or args.cluster_name, g.name),
            min_size=size,
            max_size=size,
            desired_capacity=size,
            vpc_zone_identifiers=[args.subnet_id],
            launch_template=aws.autoscaling.GroupLaunchTemplateArgs(id=template[0], version=template[1]),
            capacity_reservation_specification=capacity,
            # EC2 status checks: a stopped, impaired or reclaimed instance is replaced.
            health_check_type="EC2",
            health_check_grace_period=900,
            # A block may start days after `pulumi up`; don't wait for instances.
            wait_for_capacity_timeout="0",
            protect_from_scale_in=False,
            tags=[
                aws.autoscaling.GroupTagArgs(key=k, value=v, propagate_at_launch=True) for k, v in sorted(tags.items())
            ],
            opts=self.child,
        )
        self._schedule(name, g, asg, sched)
        return asg

    def _schedule(self, name: str, g: NodeGroup, asg: aws.autoscaling.Group, sched: GroupSchedule) -> None:
        """The block's start and end as scaling actions.

        One-time actions (no recurrence), in UTC. Auto Scaling deletes a one-time action
        once it has run; the next `pulumi up` no longer declares a start action for a
        started block, so state and account agree again.
        """
        if sched.scale_out_at is not None:
            aws.autoscaling.Schedule(
                f"{name}-{g.name}-scale-out",
                autoscaling_group_name=asg.name,
                scheduled_action_name=action_name(g, "start"),
                start_time=iso_utc(sched.scale_out_at),
                min_size=g.size,
                max_size=g.size,
                desired_capacity=g.size,
                opts=self.child,
            )
        if sched.scale_in_at is not None:
            aws.autoscaling.Schedule(
                f"{name}-{g.name}-scale-in",
                autoscaling_group_name=asg.name,
                scheduled_action_name=action_name(g, "end"),
                start_time=iso_utc(sched.scale_in_at),
                min_size=0,
                max_size=0,
                desired_capacity=0,
                opts=self.child,
            )
