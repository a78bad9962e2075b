"""A stack file and the stubbed account answers that make `ops preflight` pass."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import yaml

from tests.support import baked_image
from tests.support.ops_stubs import NOW, Aws, reservation

# Real-looking ids, not the shipped stack files' examples: preflight refuses those
# before any AWS call (model/placeholders.py, tests/model/test_placeholders.py).
CR = "cr-0c4f9a1e2b3d5a6f7"
SUBNET = "subnet-0c4f9a1e2b3d5a6f7"
VPC = "vpc-0a1b2c3d4e5f60718"
P = "gpu-cluster:cluster"
START, END = NOW - timedelta(days=1, minutes=30), NOW + timedelta(days=5, hours=23, minutes=30)  # 11:30 UTC
AMI = "ami-0c4f9a1e2b3d5a6f7"


# A deployable stack: block dates as EC2 gives them and a pinned image (`pulumi up`
# refuses anything less, and so does preflight: model/deploy.py).
STACK = {
    "name": "dev",
    "instance_type": "p5.48xlarge",
    "network": {"availability_zone": "us-east-2b", "subnet_id": SUBNET},
    "capacity": {
        "nodes": 2,
        "capacity_blocks": [
            {
                "name": "a",
                "reservation_id": CR,
                "instance_count": 2,
                "availability_zone": "us-east-2b",
                "start": "2026-11-30T11:30:00Z",
                "end": "2026-12-07T11:30:00Z",
            }
        ],
    },
    "image": {"ami_id": AMI},
}


# A baked image (ops bake) for this repository's pins: its manifest tags agree.
IMAGE = {
    "ImageId": AMI,
    "Name": "gpu-cluster-dev-20261120-081500",
    "Architecture": "x86_64",
    "CreationDate": "2026-11-20T08:15:00.000Z",
    "Tags": baked_image.tags(),
}


def block(**kw):
    """The stack's block as EC2 describes it (dates as declared)."""
    return reservation(**{"rid": CR, "start": START, "end": END, **kw})


def write_stack(tmp_path: Path, cluster: dict | None = None, region: str = "us-east-2") -> Path:
    doc = {"config": {"aws:region": region, "gpu-cluster:cluster": cluster or STACK}}
    (tmp_path / "Pulumi.dev.yaml").write_text(yaml.safe_dump(doc))
    return tmp_path


def stub_account(
    aws: Aws,
    *,
    blocks=None,
    zones=("us-east-2a", "us-east-2b", "us-east-2c"),
    subnet_az="us-east-2b",
    routes=None,
    main_table=False,
    dns=True,
    lt=None,
    asgs=None,
    quota=384.0,
    quota_error=None,
    block_error=None,
    subnet_missing=False,
    image=IMAGE,
    live=None,
    live_error=None,
    move_check=True,
):
    """`live`: the groups the controller-move check reads (default: none yet, a first
    deployment); `live_error`: (code, message) that check's call fails with;
    `move_check=False`: the stack makes no such call (a dedicated controller, or a block
    without dates)."""
    ec2, asg, sq = aws.stub("ec2"), aws.stub("autoscaling"), aws.stub("service-quotas")
    if block_error:
        ec2.add_client_error(
            "describe_capacity_reservations",
            block_error[0],
            block_error[1],
            expected_params={"CapacityReservationIds": [CR]},
        )
    else:
        ec2.add_response(
            "describe_capacity_reservations",
            {"CapacityReservations": blocks if blocks is not None else [block()]},
            {"CapacityReservationIds": [CR]},
        )
    ec2.add_response(
        "describe_availability_zones",
        {"AvailabilityZones": [{"ZoneName": z, "State": "available", "RegionName": "us-east-2"} for z in zones]},
        {"Filters": [{"Name": "state", "Values": ["available"]}]},
    )
    if subnet_missing:
        ec2.add_client_error(
            "describe_subnets",
            "InvalidSubnetID.NotFound",
            f"The subnet ID '{SUBNET}' does not exist",
            expected_params={"SubnetIds": [SUBNET]},
        )
    else:
        ec2.add_response(
            "describe_subnets",
            {"Subnets": [{"SubnetId": SUBNET, "VpcId": VPC, "AvailabilityZone": subnet_az}]},
            {"SubnetIds": [SUBNET]},
        )
        table = {
            "RouteTableId": "rtb-0123456789abcdef0",
            "VpcId": VPC,
            "Routes": routes
            if routes is not None
            else [
                {"DestinationCidrBlock": "10.0.0.0/16", "GatewayId": "local", "State": "active"},
                {"DestinationCidrBlock": "0.0.0.0/0", "NatGatewayId": "nat-0123456789abcdef0", "State": "active"},
            ],
        }
        ec2.add_response(
            "describe_route_tables",
            {"RouteTables": [] if main_table else [table]},
            {"Filters": [{"Name": "association.subnet-id", "Values": [SUBNET]}]},
        )
        if main_table:
            ec2.add_response(
                "describe_route_tables",
                {"RouteTables": [table]},
                {"Filters": [{"Name": "vpc-id", "Values": [VPC]}, {"Name": "association.main", "Values": ["true"]}]},
            )
        ec2.add_response(
            "describe_vpc_attribute",
            {"VpcId": VPC, "EnableDnsSupport": {"Value": dns}},
            {"VpcId": VPC, "Attribute": "enableDnsSupport"},
        )
    if lt is None:
        ec2.add_client_error(
            "describe_launch_templates",
            "InvalidLaunchTemplateName.NotFoundException",
            "At least one of the launch templates specified in the request does not exist.",
            expected_params={"LaunchTemplateNames": ["gpu-cluster-dev"]},
        )
    else:
        ec2.add_response(
            "describe_launch_templates", {"LaunchTemplates": [lt]}, {"LaunchTemplateNames": ["gpu-cluster-dev"]}
        )
    # The controller's own template (model/preflight.py fixed_names): not there yet.
    ec2.add_client_error(
        "describe_launch_templates",
        "InvalidLaunchTemplateName.NotFoundException",
        "At least one of the launch templates specified in the request does not exist.",
        expected_params={"LaunchTemplateNames": ["gpu-cluster-dev-controller"]},
    )
    asgs = asgs or {}
    for name in ("gpu-cluster-dev-controller", "gpu-cluster-dev-block-a"):
        asg.add_response(
            "describe_auto_scaling_groups",
            {"AutoScalingGroups": [asgs[name]] if name in asgs else []},
            {"AutoScalingGroupNames": [name]},
        )
    # The controller-move check (ops/facts.py controller_move_findings): both groups, one call.
    both = {"AutoScalingGroupNames": ["gpu-cluster-dev-controller", "gpu-cluster-dev-block-a"]}
    if move_check and live_error:
        asg.add_client_error("describe_auto_scaling_groups", live_error[0], live_error[1], expected_params=both)
    elif move_check:
        asg.add_response("describe_auto_scaling_groups", {"AutoScalingGroups": list((live or {}).values())}, both)
    if quota_error:
        sq.add_client_error(
            "get_service_quota",
            quota_error,
            "denied",
            expected_params={"ServiceCode": "ec2", "QuotaCode": "L-417A185B"},
        )
    else:
        sq.add_response(
            "get_service_quota",
            {
                "Quota": {
                    "QuotaCode": "L-417A185B",
                    "ServiceCode": "ec2",
                    "QuotaName": "Running On-Demand P instances",
                    "Value": quota,
                }
            },
            {"ServiceCode": "ec2", "QuotaCode": "L-417A185B"},
        )
    # The pinned AMI, read after the account facts (the same ec2 client: order matters);
    # image=None: no image pinned, so no call.
    if image is not None:
        ec2.add_response("describe_images", {"Images": [image]}, {"ImageIds": [AMI], "IncludeDeprecated": True})
