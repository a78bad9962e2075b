"""Gather `model.preflight.PreflightFacts` with boto3 (read-only calls only).

Each lookup that fails (access denied, still throttled after botocore's retries)
becomes a problem at the config path it was for, so one missing permission does not
hide the other checks.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

from clitools import exits
from model.config import ClusterConfig
from model.controller_move import LiveGroup, move_lookup, move_problem
from model.preflight import (
    BlockFacts,
    Finding,
    NameFacts,
    PreflightFacts,
    QuotaFacts,
    SubnetFacts,
    fixed_names,
    path,
    quota_for,
)
from model.schedule import cluster_schedule
from model.tags import BLOCK as BLOCK_TAG
from model.tags import CLUSTER as CLUSTER_TAG
from ops.aws import ACCESS_DENIED, OpsError, Session, describe_error, error_code


class _Lookup:
    def __init__(self) -> None:
        self.errors: list[tuple[str, str]] = []

    def run(self, where: str, action: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except NoCredentialsError as err:
            # Nothing can be checked: one fatal line, not one per lookup.
            raise OpsError(describe_error(err, "reading AWS"), exits.UNREACHABLE) from err
        except (ClientError, BotoCoreError) as err:
            self.errors.append((where, f"could not check: {describe_error(err, action)}"))
            return None


def _tags(items: list[dict[str, Any]] | None) -> dict[str, str]:
    return {t["Key"]: t.get("Value", "") for t in items or []}


def block_facts(record: dict[str, Any]) -> BlockFacts:
    return BlockFacts(
        reservation_id=record["CapacityReservationId"],
        found=True,
        state=record.get("State", ""),
        reservation_type=record.get("ReservationType", ""),
        instance_type=record.get("InstanceType", ""),
        availability_zone=record.get("AvailabilityZone", ""),
        total_instance_count=record.get("TotalInstanceCount", 0),
        start=record.get("StartDate"),
        end=record.get("EndDate"),
    )


def describe_blocks(ec2: Any, ids: list[str]) -> dict[str, BlockFacts]:
    """Facts per id; an id EC2 does not know comes back as found=False.

    EC2 fails the whole call when one id is unknown, so on NotFound ask id by id.
    """
    if not ids:
        return {}
    try:
        records = ec2.describe_capacity_reservations(CapacityReservationIds=ids)["CapacityReservations"]
        return {r["CapacityReservationId"]: block_facts(r) for r in records}
    except ClientError as err:
        if not error_code(err).endswith(".NotFound") or len(ids) == 1:
            if error_code(err).endswith(".NotFound"):
                return {ids[0]: BlockFacts(ids[0], found=False)}
            raise
    out = {}
    for rid in ids:
        out.update(describe_blocks(ec2, [rid]))
    return out


def default_route_target(route_table: dict[str, Any] | None) -> str | None:
    for r in (route_table or {}).get("Routes", []):
        if r.get("DestinationCidrBlock") != "0.0.0.0/0" or r.get("State") == "blackhole":
            continue
        for key in (
            "NatGatewayId",
            "GatewayId",
            "TransitGatewayId",
            "NetworkInterfaceId",
            "InstanceId",
            "VpcPeeringConnectionId",
            "CarrierGatewayId",
            "LocalGatewayId",
        ):
            if r.get(key):
                found: str = r[key]
                return found
    return None


def subnet_facts(ec2: Any, subnet_id: str) -> SubnetFacts:
    try:
        subnets = ec2.describe_subnets(SubnetIds=[subnet_id])["Subnets"]
    except ClientError as err:
        if error_code(err).endswith(".NotFound"):
            return SubnetFacts(subnet_id, found=False)
        raise
    if not subnets:
        return SubnetFacts(subnet_id, found=False)
    s = subnets[0]
    vpc = s["VpcId"]
    # A subnet without its own association uses the VPC's main route table.
    tables = ec2.describe_route_tables(Filters=[{"Name": "association.subnet-id", "Values": [subnet_id]}])[
        "RouteTables"
    ]
    if not tables:
        tables = ec2.describe_route_tables(
            Filters=[{"Name": "vpc-id", "Values": [vpc]}, {"Name": "association.main", "Values": ["true"]}]
        )["RouteTables"]
    dns = ec2.describe_vpc_attribute(VpcId=vpc, Attribute="enableDnsSupport")["EnableDnsSupport"]["Value"]
    return SubnetFacts(
        subnet_id,
        True,
        availability_zone=s["AvailabilityZone"],
        vpc_id=vpc,
        default_route_target=default_route_target(tables[0] if tables else None),
        vpc_dns_support=dns,
    )


def name_facts(ec2: Any, autoscaling: Any, cfg: ClusterConfig) -> tuple[NameFacts, ...]:
    out = []
    for kind, name in fixed_names(cfg):
        if kind == "launch template":
            try:
                lts = ec2.describe_launch_templates(LaunchTemplateNames=[name])["LaunchTemplates"]
            except ClientError as err:
                # EC2 answers an unknown name with an error, not an empty list.
                if "NotFound" not in error_code(err):
                    raise
                lts = []
            tag = _tags(lts[0].get("Tags")).get(CLUSTER_TAG) if lts else None
            out.append(NameFacts(kind, name, bool(lts), tag))
        else:
            groups = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"]
            tag = _tags(groups[0].get("Tags")).get(CLUSTER_TAG) if groups else None
            out.append(NameFacts(kind, name, bool(groups), tag))
    return tuple(out)


def quota_facts(quotas: Any, instance_type: str) -> QuotaFacts | None:
    code = quota_for(instance_type)
    if code is None:
        return None
    try:
        value = quotas.get_service_quota(ServiceCode="ec2", QuotaCode=code[0])["Quota"]["Value"]
        return QuotaFacts(code[0], code[1], float(value))
    except ClientError as err:
        # Service Quotas is often not granted to deploy roles: a warning, not a refusal.
        c = error_code(err)
        reason = "access denied" if c in ACCESS_DENIED else f"{c}: {err.response['Error'].get('Message', '')}"
        return QuotaFacts(code[0], code[1], None, reason)
    except BotoCoreError as err:
        return QuotaFacts(code[0], code[1], None, str(err))


def gather(session: Session, cfg: ClusterConfig, now: datetime) -> PreflightFacts:
    if session.region is None:  # the stack's region: load_stack refuses a stack without one
        raise OpsError("preflight: no AWS region to check in", exits.USAGE)
    ec2, autoscaling = session.client("ec2"), session.client("autoscaling")
    lookup = _Lookup()
    blocks = cfg.capacity.capacity_blocks
    ids = [b.reservation_id for b in blocks]
    block_map = (
        lookup.run(
            path("capacity", "capacity_blocks", 0, "reservation_id") if ids else path("capacity"),
            "reading the Capacity Blocks",
            lambda: describe_blocks(ec2, ids),
        )
        or {}
    )
    zones = lookup.run(
        path("network", "availability_zone"),
        "reading the availability zones",
        lambda: tuple(
            z["ZoneName"]
            for z in ec2.describe_availability_zones(Filters=[{"Name": "state", "Values": ["available"]}])[
                "AvailabilityZones"
            ]
        ),
    )
    subnet = None
    subnet_id = cfg.network.subnet_id
    if subnet_id:
        subnet = lookup.run(path("network", "subnet_id"), "reading the subnet", lambda: subnet_facts(ec2, subnet_id))
    names = (
        lookup.run(
            path("name"),
            "looking for existing launch template and Auto Scaling groups",
            lambda: name_facts(ec2, autoscaling, cfg),
        )
        or ()
    )
    quota = quota_facts(session.client("service-quotas"), cfg.instance_type)
    return PreflightFacts(
        region=session.region,
        now=now,
        region_zones=zones,
        blocks=block_map,
        subnet=subnet,
        names=names,
        quota=quota,
        lookup_errors=tuple(lookup.errors),
    )


def controller_move_findings(autoscaling: Any, cfg: ClusterConfig, now: datetime) -> list[Finding]:
    """The program's live controller-move check (infra/preflight.py controller_move_problems):
    the controller group and the host block's group in one DescribeAutoScalingGroups call,
    judged by the same rule (model/controller_move.py), so preflight refuses the move
    `pulumi up` would refuse, in the same words."""
    lookup = move_lookup(cfg)
    if lookup is None or any(b.start is None or b.end is None for b in cfg.capacity.capacity_blocks):
        return []  # no block to move into, or no schedule yet (deploy_problems says so first)
    try:
        groups = autoscaling.describe_auto_scaling_groups(
            AutoScalingGroupNames=[lookup.controller_asg, lookup.host_asg]
        )["AutoScalingGroups"]
    except NoCredentialsError as err:
        raise OpsError(describe_error(err, "reading AWS")) from err
    except (ClientError, BotoCoreError) as err:
        action = "reading where the live controller runs"
        return [Finding(path("controller", "block"), f"could not check: {describe_error(err, action)}")]
    live = {
        g["AutoScalingGroupName"]: LiveGroup(_tags(g.get("Tags")).get(BLOCK_TAG), int(g.get("DesiredCapacity", 0)))
        for g in groups
    }
    problem = move_problem(
        cfg, lookup, cluster_schedule(cfg, now), live.get(lookup.controller_asg), live.get(lookup.host_asg)
    )
    return [Finding(*problem)] if problem else []
