"""In-program preflight: provider lookups feed the same pure checks as `ops preflight`.

Runs in `build()` before any resource is declared, in preview and up alike. Reads only
(data sources, no resource): each Capacity Block (`aws.ec2.get_capacity_block_reservation`),
the existing subnet, its route table's default route and its VPC's DNS support, the
region's zones, and the pinned AMI (its name must not be an Ubuntu 22.04 image). The facts go into `model.preflight` (the checks `python3 -m ops
preflight` runs with boto3), so both say the same thing in the same words. Name
collisions and the instance quota have no provider lookup that answers "not found"
without failing; `ops preflight` checks those.

Every error comes back at once as ConfigError (`path: message`); warnings are logged.
A lookup that fails is a problem at the config path it was for: a preflight that
cannot see a block must not say the block is fine.
"""

from __future__ import annotations

import re
from datetime import datetime

import pulumi
import pulumi_aws as aws

from model.config import ClusterConfig
from model.controller_move import LiveGroup, move_lookup, move_problem
from model.deploy import deploy_problems
from model.errors import ConfigError
from model.paths import ROOT, loc_to_path
from model.placeholders import example_value_problems
from model.preflight import (
    BlockFacts,
    PreflightFacts,
    SubnetFacts,
    check_blocks,
    check_network,
    image_refusal,
)
from model.schedule import BlockSchedule
from model.tags import BLOCK as BLOCK_TAG

DEFAULT_ROUTE = "0.0.0.0/0"
# Route targets in the order a 0.0.0.0/0 route can name them (one is set).
_ROUTE_TARGETS = (
    "nat_gateway_id",
    "gateway_id",
    "transit_gateway_id",
    "network_interface_id",
    "vpc_peering_connection_id",
    "instance_id",
    "vpc_endpoint_id",
    "local_gateway_id",
    "carrier_gateway_id",
    "egress_only_gateway_id",
)


# How the provider words a lookup that failed, as the engine hands it to the program
# (the SDK raises it as an exception the program can catch): EC2 error codes and the
# AWS provider's "not found" phrasings for its data sources.
_DENIED = re.compile(r"UnauthorizedOperation|AccessDenied|not authorized to perform|StatusCode: 403", re.IGNORECASE)
_NOT_FOUND = re.compile(
    r"no matching|\.NotFound\b|couldn't find resource|does not exist|returned no results", re.IGNORECASE
)
# The SDK's and the engine's wrapping around the provider's own message.
_NOISE = re.compile(
    r"invoke of \S+ failed: |invocation of \S+ returned an error: |invoking \S+: |\d+ errors? occurred:\s*\*?\s*"
)


class LookupFailed(Exception):
    """A provider lookup that failed: `kind` is denied, not_found or failed."""

    def __init__(self, kind: str, why: str):
        super().__init__(why)
        self.kind = kind
        self.why = why


def _why(err: Exception) -> str:
    text = " ".join(_NOISE.sub("", str(err)).split()).rstrip(" ;:")
    return text[:300] + ("..." if len(text) > 300 else "")


def _lookup(fn, *args, **kwargs):
    """`fn(...)`; any provider error becomes LookupFailed (the caller knows its path)."""
    try:
        return fn(*args, **kwargs)
    except Exception as err:  # noqa: BLE001 - every provider error is reported at its config path
        why = _why(err)
        kind = "denied" if _DENIED.search(why) else "not_found" if _NOT_FOUND.search(why) else "failed"
        raise LookupFailed(kind, why) from None


def _cannot(what: str, region: str, failure: LookupFailed, actions: str, fix: str) -> str:
    """The message for a lookup that failed for another reason than "no such thing"."""
    if failure.kind == "denied":
        return (
            f"could not read {what} in {region}: access denied ({failure.why}); the identity that runs "
            f"pulumi needs {actions}: grant it, or run with credentials that have it"
        )
    return f"could not read {what} in {region}: {failure.why}; {fix}"


def _datetime(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


def block_facts(reservation_id: str) -> BlockFacts:
    try:
        found = _lookup(aws.ec2.get_capacity_block_reservation, id=reservation_id)
    except LookupFailed as failure:
        if failure.kind == "not_found":
            return BlockFacts(reservation_id=reservation_id, found=False)
        raise
    try:
        start, end = _datetime(found.start_date), _datetime(found.end_date)
    except (TypeError, ValueError) as err:
        raise LookupFailed("failed", f"EC2 gave dates that do not parse ({err})") from None
    return BlockFacts(
        reservation_id=reservation_id,
        found=True,
        state=found.state or "",
        reservation_type=found.reservation_type or "",
        instance_type=found.instance_type or "",
        availability_zone=found.availability_zone or "",
        total_instance_count=int(found.instance_count or 0),
        start=start,
        end=end,
    )


def default_route_target(routes) -> str | None:
    for route in routes or ():
        if route.cidr_block == DEFAULT_ROUTE:
            for attr in _ROUTE_TARGETS:
                target = getattr(route, attr, None)
                if target:
                    return target
    return None


def subnet_facts(subnet_id: str, region: str) -> tuple[SubnetFacts | None, list[str]]:
    """(facts, messages for network.subnet_id). An id EC2 does not know is found=False,
    worded by model.preflight as `ops preflight` words it; a lookup that could not be
    made is a message naming the permission or the fix."""
    retry = "check the id, aws:region and your AWS credentials, then run again"
    try:
        subnet = _lookup(aws.ec2.get_subnet, id=subnet_id)
    except LookupFailed as failure:
        if failure.kind == "not_found":
            return SubnetFacts(subnet_id=subnet_id, found=False), []
        return None, [_cannot(f"subnet {subnet_id}", region, failure, "ec2:DescribeSubnets", retry)]
    try:
        table = _lookup(aws.ec2.get_route_table, subnet_id=subnet_id)
    except LookupFailed as failure:
        if failure.kind != "not_found":
            return None, [_cannot(f"the route table of {subnet_id}", region, failure, "ec2:DescribeRouteTables", retry)]
        # No explicit association: the VPC's main route table applies.
        try:
            table = _lookup(
                aws.ec2.get_route_table,
                vpc_id=subnet.vpc_id,
                filters=[aws.ec2.GetRouteTableFilterArgs(name="association.main", values=["true"])],
            )
        except LookupFailed as main_failure:
            what = f"the main route table of {subnet.vpc_id} (which {subnet_id} uses)"
            return None, [_cannot(what, region, main_failure, "ec2:DescribeRouteTables", retry)]
    try:
        vpc = _lookup(aws.ec2.get_vpc, id=subnet.vpc_id)
    except LookupFailed as failure:
        what = f"{subnet.vpc_id} (the VPC of {subnet_id})"
        return None, [_cannot(what, region, failure, "ec2:DescribeVpcs and ec2:DescribeVpcAttribute", retry)]
    return SubnetFacts(
        subnet_id=subnet_id,
        found=True,
        availability_zone=subnet.availability_zone,
        vpc_id=subnet.vpc_id,
        default_route_target=default_route_target(table.routes),
        vpc_dns_support=bool(vpc.enable_dns_support),
    ), []


def image_problems(ami_id: str, region: str) -> list[tuple[str, str]]:
    """The pinned AMI exists here and is not an Ubuntu 22.04 image (Slurm 21.08: no
    dynamic nodes). Deprecated AMIs still launch by id, so they are looked up too."""
    path = f"{ROOT}.image.ami_id"
    pin = (
        f"AMI ids are per region: pin the id the DLAMI parameter gives in {region} "
        "(`python3 -m ops pin --stack <stack> --image`)"
    )
    try:
        ami = _lookup(
            aws.ec2.get_ami,
            filters=[aws.ec2.GetAmiFilterArgs(name="image-id", values=[ami_id])],
            include_deprecated=True,
        )
    except LookupFailed as failure:
        if failure.kind == "not_found":
            return [(path, f"{ami_id} does not exist in {region} or is not shared with this account; {pin}")]
        return [(path, _cannot(f"image {ami_id}", region, failure, "ec2:DescribeImages", f"check the id; {pin}"))]
    why = image_refusal(ami_id, ami.name or "", ami.description or "", ami.architecture or "")
    return [(path, why)] if why else []


def gather(cfg: ClusterConfig, region: str, now: datetime) -> PreflightFacts:
    errors: list[tuple[str, str]] = []
    zones = None
    try:
        zones = tuple(_lookup(aws.get_availability_zones, state="available").names or ())
    except LookupFailed as failure:
        errors.append(
            (
                f"{ROOT}.network.availability_zone",
                _cannot(
                    "the availability zones",
                    region,
                    failure,
                    "ec2:DescribeAvailabilityZones",
                    "check aws:region (a region name such as us-east-2) and your AWS credentials",
                ),
            )
        )
    blocks: dict[str, BlockFacts] = {}
    for i, b in enumerate(cfg.capacity.capacity_blocks):
        try:
            blocks[b.reservation_id] = block_facts(b.reservation_id)
        except LookupFailed as failure:
            errors.append(
                (
                    f"{ROOT}.capacity.capacity_blocks[{i}].reservation_id",
                    _cannot(
                        f"Capacity Block {b.reservation_id}",
                        region,
                        failure,
                        "ec2:DescribeCapacityReservations",
                        "check the id and aws:region (`python3 -m ops find-blocks` lists and buys blocks)",
                    ),
                )
            )
    subnet = None
    if cfg.network.subnet_id:
        subnet, messages = subnet_facts(cfg.network.subnet_id, region)
        errors += [(f"{ROOT}.network.subnet_id", m) for m in messages]
    return PreflightFacts(
        region=region, now=now, region_zones=zones, blocks=blocks, subnet=subnet, lookup_errors=tuple(errors)
    )


def preflight(cfg: ClusterConfig, region: str, now: datetime, allow_example_values: bool = False) -> None:
    """Raise ConfigError with every problem; log warnings. Declares nothing.

    Example ids from the shipped stack files are refused before any lookup (the lookup
    would only fail less clearly); the offline plan passes allow_example_values."""
    problems = deploy_problems(cfg, now, region)
    examples = [] if allow_example_values else example_value_problems(cfg, region)
    if examples:
        raise ConfigError(problems + examples)
    if cfg.image.ami_id:
        problems += image_problems(cfg.image.ami_id, region)
    facts = gather(cfg, region, now)
    findings = [*((p, m, "error") for p, m in facts.lookup_errors)]
    findings += [(f.path, f.message, f.severity) for f in check_blocks(cfg, facts) + check_network(cfg, facts)]
    for path, message, severity in findings:
        if severity == "warning":
            pulumi.log.warn(f"{path}: {message}")
        elif (path, message) not in problems:
            problems.append((path, message))
    if problems:
        raise ConfigError(problems)


def _live_group(name: str):
    """The live Auto Scaling group `name`, None if there is none.

    The groups data source lists only the names that exist (an empty list is no error),
    so "no such group" never depends on how the single-group lookup words a miss
    [ASG-DESCRIBE]."""
    found = _lookup(aws.autoscaling.get_ami_ids, names=[name])  # the aws_autoscaling_groups data source
    if name not in (found.names or ()):
        return None
    return _lookup(aws.autoscaling.get_group, name=name)


def controller_move_problems(cfg: ClusterConfig, region: str, schedule: BlockSchedule) -> list[tuple[str, str]]:
    """A colocated controller moving into a block whose group runs: read from the live groups
    (which ones, and the verdict: model/controller_move.py, shared with `ops preflight`)."""
    lookup = move_lookup(cfg)
    if lookup is None:
        return []
    try:
        ctl = _live_group(lookup.controller_asg)
        live_block = None if ctl is None else next((t.value for t in ctl.tags or () if t.key == BLOCK_TAG), None)
        # No controller group (a first deployment), or it already follows the host: no second read.
        host = None if ctl is None or live_block == lookup.host.name else _live_group(lookup.host_asg)
    except LookupFailed as failure:
        what = f"the Auto Scaling groups of this stack ({lookup.controller_asg}, {lookup.host_asg})"
        why = _cannot(
            what,
            region,
            failure,
            "autoscaling:DescribeAutoScalingGroups",
            "run again: the program reads where the live controller runs before it can move it",
        )
        return [(loc_to_path(("controller", "block")), why)]
    problem = move_problem(
        cfg,
        lookup,
        schedule,
        None if ctl is None else LiveGroup(live_block, int(ctl.desired_capacity or 0)),
        None if host is None else LiveGroup(None, int(host.desired_capacity or 0)),
    )
    return [problem] if problem else []
