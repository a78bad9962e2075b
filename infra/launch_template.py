"""Launch template: the one definition every node of a placement (block) boots from.

One template per Capacity Block, because a Capacity Block launch names its reservation
in the template (market type `capacity-block` + reservation target, FACTS 3.1); one
template for on-demand nodes, placed in the cluster placement group. All templates
carry the same image and the same user data, so the controller and the workers only
differ by the `GpuClusterRole` tag their Auto Scaling group propagates.

Subnets: the interfaces carry no `subnet_id`. The Auto Scaling group places each
instance in a subnet from its `vpc_zone_identifiers` and every interface of the
instance is created there; a subnet in the template would compete with the group's
(AWS rejects launch templates with an interface subnet for managed node groups for the
same reason). Security groups are set per interface, never as
`vpc_security_group_ids`: EC2 rejects instance-level groups together with network
interfaces (FACTS 2.4).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from infra.catalog import InstanceSpec
from infra.config import CapacityBlock, ClusterConfig, RootVolumeConfig
from infra.efa import interface_layout

# Ubuntu DLAMI root device.
ROOT_DEVICE = "/dev/sda1"
# Hop limit 2: containers (enroot, docker bridge) are one extra network hop away from
# the instance and must still reach IMDSv2 (the default 1 drops their responses).
METADATA_HOP_LIMIT = 2
TAGGED_RESOURCE_TYPES = ("instance", "volume", "network-interface")


def image_id(cfg: ClusterConfig) -> str:
    """Explicit AMI, or EC2's `resolve:ssm:` indirection to the DLAMI public parameter.

    With `resolve:ssm:` EC2 reads the parameter at each launch: a replaced node gets
    the AMI current at that moment, without a template change. Pin `image.ami_id` to
    keep every node on one AMI.
    """
    return cfg.image.ami_id or f"resolve:ssm:{cfg.image.ssm_parameter}"


def render_user_data(cfg: ClusterConfig, spec: InstanceSpec,
                     dns_name: pulumi.Input[str], mount_name: pulumi.Input[str]) -> pulumi.Output:
    """Output[NodeFiles]: the pure renderer called once the FSx endpoint is known.

    Only a function call happens inside apply; no resource is declared there.
    """
    from userdata.render import FsxEndpoint, render_userdata

    def render(values):
        dns, mount = values
        return render_userdata(cfg, spec, FsxEndpoint(dns_name=dns, mount_name=mount))

    return pulumi.Output.all(dns_name, mount_name).apply(render)


def encode_user_data(node_files) -> str:
    """Base64 of the exact bytes: LaunchTemplate.user_data is not encoded by the provider."""
    if node_files.s3_payload is not None:
        raise RuntimeError(
            "the rendered node files need an S3 payload, which this program does not create yet; "
            "shrink the rendered files below the inline user-data budget")
    return base64.b64encode(node_files.user_data).decode("ascii")


@dataclass
class NodeLaunchTemplateArgs:
    cluster_name: str
    template_name: str  # e.g. "block-a" or "on-demand": part of the AWS name
    spec: InstanceSpec
    image_id: str
    security_group_id: pulumi.Input[str]
    instance_profile_arn: pulumi.Input[str]
    user_data_base64: pulumi.Input[str]
    root_volume: RootVolumeConfig
    capacity_block: CapacityBlock | None = None
    placement_group: bool = False
    tags: dict[str, str] = field(default_factory=dict)


def network_interfaces(spec: InstanceSpec, security_group_id: pulumi.Input[str]) -> list:
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


class NodeLaunchTemplate(pulumi.ComponentResource):
    """Outputs: launch_template_id, latest_version, placement_group_name (or None)."""

    launch_template_id: pulumi.Output[str]
    latest_version: pulumi.Output[int]

    def __init__(self, name: str, args: NodeLaunchTemplateArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-cluster:index:NodeLaunchTemplate", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        block = args.capacity_block
        if block is not None and args.placement_group:
            # Capacity Blocks are co-located already and do not take one (FACTS 3.2).
            raise ValueError("a Capacity Block launch template takes no placement group")

        market = capacity = placement = None
        self.placement_group_name: pulumi.Output[str] | None = None
        if block is not None:
            market = aws.ec2.LaunchTemplateInstanceMarketOptionsArgs(market_type="capacity-block")
            capacity = aws.ec2.LaunchTemplateCapacityReservationSpecificationArgs(
                capacity_reservation_target=aws.ec2.LaunchTemplateCapacityReservationSpecificationCapacityReservationTargetArgs(
                    capacity_reservation_id=block.reservation_id))
        elif args.placement_group:
            pg = aws.ec2.PlacementGroup(f"{name}-pg", strategy="cluster",
                                        tags={**args.tags, "Name": f"{args.cluster_name}-nodes"}, opts=child)
            placement = aws.ec2.LaunchTemplatePlacementArgs(group_name=pg.name)
            self.placement_group_name = pg.name

        lt = aws.ec2.LaunchTemplate(
            f"{name}-lt",
            name=f"gpu-cluster-{args.cluster_name}-{args.template_name}",
            description=f"gpu-cluster {args.cluster_name} {args.spec.name} nodes ({args.template_name})",
            image_id=args.image_id,
            instance_type=args.spec.name,
            iam_instance_profile=aws.ec2.LaunchTemplateIamInstanceProfileArgs(arn=args.instance_profile_arn),
            network_interfaces=network_interfaces(args.spec, args.security_group_id),
            metadata_options=aws.ec2.LaunchTemplateMetadataOptionsArgs(
                http_endpoint="enabled", http_tokens="required",
                http_put_response_hop_limit=METADATA_HOP_LIMIT,
                instance_metadata_tags="enabled"),  # nodes read GpuCluster* tags from IMDS
            block_device_mappings=[aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
                device_name=ROOT_DEVICE,
                ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
                    volume_type="gp3", volume_size=args.root_volume.size_gib,
                    iops=args.root_volume.iops, throughput=args.root_volume.throughput_mibps,
                    encrypted="true", delete_on_termination="true"))],
            instance_market_options=market,
            capacity_reservation_specification=capacity,
            placement=placement,
            user_data=args.user_data_base64,
            tag_specifications=[aws.ec2.LaunchTemplateTagSpecificationArgs(resource_type=t, tags=args.tags)
                                for t in TAGGED_RESOURCE_TYPES],
            tags=args.tags,
            # $Default follows the newest version; the groups still pin a number.
            update_default_version=True,
            opts=child,
        )
        self.launch_template_id = lt.id
        self.launch_template_name = lt.name
        self.latest_version = lt.latest_version
        self.register_outputs({"launch_template_id": lt.id, "latest_version": lt.latest_version})
