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

from datetime import datetime

import pulumi
import pulumi_aws as aws

from model.config import ROOT, ClusterConfig, ConfigError
from model.deploy import deploy_problems
from model.placeholders import example_value_problems
from model.preflight import BlockFacts, PreflightFacts, SubnetFacts, check_blocks, check_network, image_refusal

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


def _why(err: Exception) -> str:
    text = " ".join(str(err).split())
    return text[:300] + ("..." if len(text) > 300 else "")


def _datetime(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


def block_facts(reservation_id: str) -> BlockFacts:
    found = aws.ec2.get_capacity_block_reservation(id=reservation_id)
    return BlockFacts(
        reservation_id=reservation_id,
        found=True,
        state=found.state or "",
        reservation_type=found.reservation_type or "",
        instance_type=found.instance_type or "",
        availability_zone=found.availability_zone or "",
        total_instance_count=int(found.instance_count or 0),
        start=_datetime(found.start_date),
        end=_datetime(found.end_date),
    )


def default_route_target(routes) -> str | None:
    for route in routes or ():
        if route.cidr_block == DEFAULT_ROUTE:
            for attr in _ROUTE_TARGETS:
                target = getattr(route, attr, None)
                if target:
                    return target
    return None


def subnet_facts(subnet_id: str) -> SubnetFacts:
    subnet = aws.ec2.get_subnet(id=subnet_id)
    try:
        table = aws.ec2.get_route_table(subnet_id=subnet_id)
    except Exception:  # noqa: BLE001 - no explicit association: the VPC's main table applies
        table = aws.ec2.get_route_table(
            vpc_id=subnet.vpc_id, filters=[aws.ec2.GetRouteTableFilterArgs(name="association.main", values=["true"])]
        )
    vpc = aws.ec2.get_vpc(id=subnet.vpc_id)
    return SubnetFacts(
        subnet_id=subnet_id,
        found=True,
        availability_zone=subnet.availability_zone,
        vpc_id=subnet.vpc_id,
        default_route_target=default_route_target(table.routes),
        vpc_dns_support=bool(vpc.enable_dns_support),
    )


def image_problems(ami_id: str, region: str) -> list[tuple[str, str]]:
    """The pinned AMI exists here and is not an Ubuntu 22.04 image (Slurm 21.08: no
    dynamic nodes). Deprecated AMIs still launch by id, so they are looked up too."""
    path = f"{ROOT}.image.ami_id"
    try:
        ami = aws.ec2.get_ami(
            filters=[aws.ec2.GetAmiFilterArgs(name="image-id", values=[ami_id])], include_deprecated=True
        )
    except Exception as err:  # noqa: BLE001
        return [
            (
                path,
                f"could not find {ami_id} in {region}: {_why(err)}; AMI ids are per region: pin the id "
                "the DLAMI parameter gives in this region",
            )
        ]
    why = image_refusal(ami_id, ami.name or "", ami.description or "", ami.architecture or "")
    return [(path, why)] if why else []


def gather(cfg: ClusterConfig, region: str, now: datetime) -> PreflightFacts:
    errors: list[tuple[str, str]] = []
    zones = None
    try:
        zones = tuple(aws.get_availability_zones(state="available").names)
    except Exception as err:  # noqa: BLE001 - reported at the path it was for
        errors.append((f"{ROOT}.network.availability_zone", f"could not list the zones of {region}: {_why(err)}"))
    blocks: dict[str, BlockFacts] = {}
    for i, b in enumerate(cfg.capacity.capacity_blocks):
        try:
            blocks[b.reservation_id] = block_facts(b.reservation_id)
        except Exception as err:  # noqa: BLE001
            errors.append(
                (
                    f"{ROOT}.capacity.capacity_blocks[{i}].reservation_id",
                    f"could not read Capacity Block {b.reservation_id} in {region}: {_why(err)}; check the "
                    "id and aws:region (`python3 -m ops find-blocks` lists and buys blocks)",
                )
            )
    subnet = None
    if cfg.network.subnet_id:
        try:
            subnet = subnet_facts(cfg.network.subnet_id)
        except Exception as err:  # noqa: BLE001
            errors.append(
                (
                    f"{ROOT}.network.subnet_id",
                    f"could not read subnet {cfg.network.subnet_id} in {region}, "
                    f"its route table or its VPC: {_why(err)}; check the id and "
                    "aws:region, or omit subnet_id to create a VPC",
                )
            )
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
