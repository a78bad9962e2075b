"""Launch template: the one definition every node of the cluster boots from.

One template for the whole cluster. With Capacity Blocks it sets market type
`capacity-block`, and each Auto Scaling group names its own block as the Capacity
Reservation target (AWS Auto Scaling user guide, "Target Capacity Reservations from your
Auto Scaling group": to consume Capacity Blocks, combine the group's Capacity
Reservation specification with a market type on the launch template). So adding a block
adds a group, not a template, and one template version describes every node: a
rollout is one version number, whatever the number of blocks. On-demand nodes get the
same template with a cluster placement group instead (instances in a Capacity Block
are co-located already and take none [CB-USE]).

The controller has its own template, always (model/controller.py): its own instance
profile (permissions only the controller needs go on its role alone), the same image
and the same user data. Colocated (`controller.placement: block`) it has the workers'
settings (type, EFA interfaces, market type or the workers' placement group);
`dedicated` it is a small on-demand CPU type with one plain (ENA) interface, no
capacity-block market type and no placement group.

Subnets: the interfaces carry no `subnet_id`. The Auto Scaling group places each
instance in a subnet from its `vpc_zone_identifiers` and every interface of the
instance is created there; a subnet in the template would compete with the group's
(AWS rejects launch templates with an interface subnet for managed node groups for the
same reason). Security groups are set per interface, never as
`vpc_security_group_ids`: EC2 rejects instance-level groups together with network
interfaces ([PA-SDK] launch template `network_interfaces[*].security_groups`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from infra.component import Component
from infra.efa import interface_layout
from model.catalog import InstanceSpec
from model.config import ClusterConfig
from model.preflight import launch_template_name
from model.root_volume import RootVolumeConfig

# Ubuntu DLAMI root device.
ROOT_DEVICE = "/dev/sda1"
# Hop limit 2: containers (enroot, docker bridge) are one extra network hop away from
# the instance and must still reach IMDSv2 (the default 1 drops their responses).
METADATA_HOP_LIMIT = 2
TAGGED_RESOURCE_TYPES = ("instance", "volume", "network-interface")


def image_id(cfg: ClusterConfig) -> str:
    """The pinned AMI, or (only with `image.allow_unpinned`, model/deploy.py) EC2's
    `resolve:ssm:` indirection to the DLAMI public parameter.

    With `resolve:ssm:` EC2 reads the parameter at each launch: a replaced node gets
    the AMI current at that moment, possibly with a kernel the FSx Lustre client
    repository has no module for yet. A pinned id keeps every node, replacements
    included, on one image; moving to a newer one is a config edit and a rollout.
    """
    return cfg.image.ami_id or f"resolve:ssm:{cfg.image.ssm_parameter}"


@dataclass
class NodeLaunchTemplateArgs:
    cluster_name: str
    spec: InstanceSpec
    image_id: str
    security_group_id: pulumi.Input[str]
    instance_profile_arn: pulumi.Input[str]
    user_data_base64: pulumi.Input[str]
    root_volume: RootVolumeConfig
    capacity_blocks: bool = False  # market type capacity-block; the groups name the blocks
    placement_group: bool = False
    tags: dict[str, str] = field(default_factory=dict)
    # What the template's fixed name derives from (ClusterConfig.aws_name_base: the stack
    # name under Pulumi); None: the cluster name.
    aws_name_base: str | None = None
    # The controller's own template: its fixed name and description say so.
    controller: bool = False
    # The login nodes' template (model/login.py): a CPU type like a dedicated controller's.
    login: bool = False
    # A dedicated controller's CPU type (model/controller.py); None: spec.name with the
    # EFA layout of `spec`. Set, it has one ENA interface and no market options.
    dedicated_instance_type: str | None = None
    # Join an existing placement group (the colocated controller joins the workers').
    placement_group_name: pulumi.Input[str] | None = None


def network_interfaces(spec: InstanceSpec | None, security_group_id: pulumi.Input[str]) -> list:
    """The spec's EFA layout (infra/efa.py); None: one plain (ENA) interface, no EFA."""
    if spec is None:
        return [
            aws.ec2.LaunchTemplateNetworkInterfaceArgs(
                device_index=0, security_groups=[security_group_id], delete_on_termination="true"
            )
        ]
    return [
        aws.ec2.LaunchTemplateNetworkInterfaceArgs(
            network_card_index=slot.network_card_index,
            device_index=slot.device_index,
            interface_type=slot.interface_type,
            security_groups=[security_group_id],
            delete_on_termination="true",
        )
        for slot in interface_layout(spec)
    ]


def metadata_options() -> aws.ec2.LaunchTemplateMetadataOptionsArgs:
    """IMDSv2 only, with instance tags: nodes read their GpuCluster* tags from IMDS."""
    return aws.ec2.LaunchTemplateMetadataOptionsArgs(
        http_endpoint="enabled",
        http_tokens="required",
        http_put_response_hop_limit=METADATA_HOP_LIMIT,
        instance_metadata_tags="enabled",
    )


def root_device_mapping(root_volume: RootVolumeConfig) -> aws.ec2.LaunchTemplateBlockDeviceMappingArgs:
    return aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
        device_name=ROOT_DEVICE,
        ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
            volume_type="gp3",
            volume_size=root_volume.size_gib,
            iops=root_volume.iops,
            throughput=root_volume.throughput_mibps,
            encrypted="true",
            delete_on_termination="true",
        ),
    )


class NodeLaunchTemplate(Component):
    """Outputs: launch_template_id, latest_version, placement_group_name (or None)."""

    TYPE = "gpu-cluster:index:NodeLaunchTemplate"
    launch_template_id: pulumi.Output[str]
    latest_version: pulumi.Output[int]

    def __init__(self, name: str, args: NodeLaunchTemplateArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(name, opts)
        if args.capacity_blocks and args.placement_group:
            # Capacity Blocks are co-located already and do not take one [CB-USE].
            raise ValueError("a Capacity Block launch template takes no placement group")

        dedicated = args.dedicated_instance_type is not None
        if dedicated and (args.capacity_blocks or args.placement_group or args.placement_group_name is not None):
            raise ValueError("a dedicated controller template takes no capacity-block market type or placement group")
        market, placement = self._market_and_placement(name, args)
        base = args.aws_name_base or args.cluster_name
        instance_type = args.dedicated_instance_type or args.spec.name
        what = "login nodes" if args.login else "controller" if args.controller else "nodes"
        lt = aws.ec2.LaunchTemplate(
            f"{name}-lt",
            name=launch_template_name(base, args.controller, args.login),
            description=f"gpu-cluster {args.cluster_name} {instance_type} {what}",
            image_id=args.image_id,
            instance_type=instance_type,
            iam_instance_profile=aws.ec2.LaunchTemplateIamInstanceProfileArgs(arn=args.instance_profile_arn),
            network_interfaces=network_interfaces(None if dedicated else args.spec, args.security_group_id),
            metadata_options=metadata_options(),
            block_device_mappings=[root_device_mapping(args.root_volume)],
            instance_market_options=market,
            placement=placement,
            user_data=args.user_data_base64,
            tag_specifications=[
                aws.ec2.LaunchTemplateTagSpecificationArgs(resource_type=t, tags=args.tags)
                for t in TAGGED_RESOURCE_TYPES
            ],
            tags=args.tags,
            # $Default follows the newest version; the groups still pin a number.
            update_default_version=True,
            opts=self.child,
        )
        self.launch_template_id = lt.id
        self.launch_template_name = lt.name
        self.latest_version = lt.latest_version
        self.register_outputs({"launch_template_id": lt.id, "latest_version": lt.latest_version})

    def _market_and_placement(
        self, name: str, args: NodeLaunchTemplateArgs
    ) -> tuple[aws.ec2.LaunchTemplateInstanceMarketOptionsArgs | None, aws.ec2.LaunchTemplatePlacementArgs | None]:
        """Capacity Blocks: the market type; on demand: a cluster placement group (or neither)."""
        self.placement_group_name: pulumi.Output[str] | None = None
        if args.capacity_blocks:
            return aws.ec2.LaunchTemplateInstanceMarketOptionsArgs(market_type="capacity-block"), None
        if args.placement_group_name is not None:
            return None, aws.ec2.LaunchTemplatePlacementArgs(group_name=args.placement_group_name)
        if not args.placement_group:
            return None, None
        pg = aws.ec2.PlacementGroup(
            f"{name}-pg",
            strategy="cluster",
            tags={**args.tags, "Name": f"{args.cluster_name}-nodes"},
            opts=self.child,
        )
        self.placement_group_name = pg.name
        return None, aws.ec2.LaunchTemplatePlacementArgs(group_name=pg.name)
