"""Launch template: the one definition every node of the cluster boots from.

One template for the whole cluster. With Capacity Blocks it sets market type
`capacity-block`, and each Auto Scaling group names its own block as the Capacity
Reservation target (AWS Auto Scaling user guide, "Target Capacity Reservations from your
Auto Scaling group": to consume Capacity Blocks, combine the group's Capacity
Reservation specification with a market type on the launch template). So adding a block
adds a group, not a template, and one template version describes every node: a
rollout is one version number, whatever the number of blocks. On-demand nodes get the
same template with a cluster placement group instead (Capacity Blocks take none,
FACTS 3.2). The controller and the workers only differ by the `GpuClusterRole` tag
their group propagates.

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
from typing import TYPE_CHECKING

import pulumi
import pulumi_aws as aws

from model.catalog import InstanceSpec
from model.config import ClusterConfig, RootVolumeConfig
from infra.efa import interface_layout

if TYPE_CHECKING:  # the renderer is imported lazily: it pulls in jinja2 and the templates
    from userdata.render import FsxEndpoint

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


def probe_endpoint(region: str) -> "FsxEndpoint":
    """An FSx endpoint shaped like the real one (same lengths), before FSx exists."""
    from userdata.render import FsxEndpoint

    return FsxEndpoint(dns_name=f"fs-{'0' * 17}.fsx.{region}.amazonaws.com", mount_name="x" * 8)


def needs_s3_payload(cfg: ClusterConfig, spec: InstanceSpec, region: str) -> bool:
    """Whether the node files outgrow inline user data, decided before any resource.

    Resources may not be declared inside `apply`, so the bucket and object must be known
    up front: render once with an endpoint of the real one's length (the DNS name and
    mount name are the only values not known yet, and their lengths are fixed).
    """
    from userdata.render import render_userdata

    return render_userdata(cfg, spec, probe_endpoint(region)).s3_payload is not None


def render_user_data(cfg: ClusterConfig, spec: InstanceSpec, dns_name: pulumi.Input[str],
                     mount_name: pulumi.Input[str], payload_bucket: pulumi.Input[str] | None = None) -> pulumi.Output:
    """Output[NodeFiles]: the pure renderer called once the FSx endpoint is known.

    Only a function call happens inside apply; no resource is declared there.
    """
    from infra.storage import payload_uri_template
    from userdata.render import FsxEndpoint, render_userdata

    def render(values):
        dns, mount, bucket = values
        uri = payload_uri_template(bucket) if bucket else None
        return render_userdata(cfg, spec, FsxEndpoint(dns_name=dns, mount_name=mount), uri)

    return pulumi.Output.all(dns_name, mount_name, payload_bucket).apply(render)


_EDGE = ("the rendered user data sits within a few bytes of the inline budget (userdata/render.py "
         "INLINE_BUDGET), so the S3 payload decision made before FSx existed does not hold for the real "
         "FSx endpoint; move the budget or the node files so the render is clearly on one side")


def encode_user_data(node_files) -> str:
    """Base64 of the exact bytes: LaunchTemplate.user_data is not encoded by the provider."""
    return base64.b64encode(node_files.user_data).decode("ascii")


def encode_inline_user_data(node_files) -> str:
    """As encode_user_data, for a render planned without a payload (see needs_s3_payload)."""
    if node_files.s3_payload is not None:
        # The probe and the real endpoint compress a few bytes apart: only at the budget edge.
        raise RuntimeError(_EDGE)
    return encode_user_data(node_files)


def require_payload(node_files):
    if node_files.s3_payload is None:
        raise RuntimeError(_EDGE)
    return node_files.s3_payload


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
        if args.capacity_blocks and args.placement_group:
            # Capacity Blocks are co-located already and do not take one (FACTS 3.2).
            raise ValueError("a Capacity Block launch template takes no placement group")

        market = placement = None
        self.placement_group_name: pulumi.Output[str] | None = None
        if args.capacity_blocks:
            market = aws.ec2.LaunchTemplateInstanceMarketOptionsArgs(market_type="capacity-block")
        elif args.placement_group:
            pg = aws.ec2.PlacementGroup(f"{name}-pg", strategy="cluster",
                                        tags={**args.tags, "Name": f"{args.cluster_name}-nodes"}, opts=child)
            placement = aws.ec2.LaunchTemplatePlacementArgs(group_name=pg.name)
            self.placement_group_name = pg.name

        lt = aws.ec2.LaunchTemplate(
            f"{name}-lt",
            name=f"gpu-cluster-{args.cluster_name}",
            description=f"gpu-cluster {args.cluster_name} {args.spec.name} nodes",
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
