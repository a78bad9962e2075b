"""`network`: the one subnet in one AZ the nodes live in (created, or an existing one)."""

from __future__ import annotations

from pydantic import Field, field_validator

from model import aws_rules
from model.base import Strict, aws_id
from model.capacity import CapacityConfig
from model.paths import loc_to_path

MAX_VPC_PREFIX = 24


class NetworkConfig(Strict):
    availability_zone: str = Field(description="AZ of the cluster subnet; EFA peers must share it.")
    subnet_id: str | None = Field(None, description="Existing private subnet; omit to create a VPC.")
    vpc_cidr: str = Field("10.0.0.0/16", description="CIDR of the created VPC (only without subnet_id).")

    @field_validator("availability_zone")
    @classmethod
    def _az(cls, v: str) -> str:
        if not aws_rules.AZ_NAME.match(v):
            raise ValueError(f"'{v}' is not an availability zone name; use e.g. 'us-east-2b'")
        return v

    @field_validator("subnet_id")
    @classmethod
    def _subnet(cls, v: str | None) -> str | None:
        return (
            v
            if v is None
            else aws_id(
                "subnet",
                v,
                "a subnet id",
                "use the 'subnet-0123abcd...' id of an existing subnet, or omit it to create a VPC",
            )
        )

    @field_validator("vpc_cidr")
    @classmethod
    def _cidr(cls, v: str) -> str:
        # The program cuts the block into quarters (infra/network.py); a /24 gives /26
        # subnets of 59 usable addresses, enough for a node each plus FSx.
        problem = aws_rules.cidr_problem(v, max_prefix=MAX_VPC_PREFIX)
        if problem:
            raise ValueError(problem)
        return v


def network_problems(net: NetworkConfig) -> list[tuple[str, str]]:
    if net.subnet_id and "vpc_cidr" in net.model_fields_set:
        return [
            (
                loc_to_path(("network", "vpc_cidr")),
                "only used when a VPC is created; remove it or remove network.subnet_id",
            )
        ]
    return []


def configured_zones(net: NetworkConfig, capacity: CapacityConfig) -> list[tuple[tuple[str | int, ...], str]]:
    """(key path, AZ) of the network and of every block in another AZ than the network."""
    azs: list[tuple[tuple[str | int, ...], str]] = [(("network", "availability_zone"), net.availability_zone)]
    azs += [
        (("capacity", "capacity_blocks", i, "availability_zone"), b.availability_zone)
        for i, b in enumerate(capacity.capacity_blocks)
        if b.availability_zone != net.availability_zone
    ]
    return azs


def zone_problems(net: NetworkConfig, capacity: CapacityConfig) -> list[tuple[str, str]]:
    """AZ names must name a zone of a region AWS has (whatever aws:region is)."""
    out = []
    for parts, az in configured_zones(net, capacity):
        region = aws_rules.az_region(az)
        if region is not None and region not in aws_rules.REGIONS:
            out.append(
                (
                    loc_to_path(parts),
                    f"'{az}' is not a zone of any AWS region ('{region}' is not a region code); "
                    "use a zone of aws:region, e.g. 'us-east-2b'",
                )
            )
    return out
