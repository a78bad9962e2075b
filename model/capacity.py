"""`capacity`: how many nodes, and which Capacity Blocks hold them (the node groups)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import Field, field_validator

from model import aws_rules
from model.base import Strict, aws_id, got
from model.paths import loc_to_path
from model.slurm import SLURM_NAME

# Capacity Blocks hold at most 64 instances each [CB-USE].
MAX_INSTANCES_PER_BLOCK = 64
# Every Capacity Block ends at 11:30 UTC [CB-PURCHASE]. Start times and durations are
# not checked here: an offering that starts today starts before 11:30 and is shorter
# than whole days, and extensions change the end; preflight compares the declared
# dates with EC2's own record of the block instead.
BLOCK_END_UTC = (11, 30)
# EC2 starts terminating a block's instances 30 minutes before its end [CB-USE]; AWS
# asks to scale the group to zero "more than 30 minutes before the Capacity Block
# reservation end time" [ASG-CB]: at exactly 30 the scale-in meets EC2's own
# terminations, so the smallest margin is 31.
EC2_BLOCK_END_LEAD_MINUTES = 30
MIN_BLOCK_END_MARGIN_MINUTES = EC2_BLOCK_END_LEAD_MINUTES + 1
DEFAULT_BLOCK_END_MARGIN_MINUTES = 40


# The years a block date may name: Capacity Blocks exist since 2023 and are sold weeks
# ahead; a date outside is a typo.
BLOCK_YEARS = (2020, 2200)


def iso_utc(value: datetime) -> str:
    """The one spelling of a time in tags, schedules and messages: 2026-12-08T11:30:00Z."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class CapacityBlock(Strict):
    name: str = Field(description="Short block name: node feature `block-<name>` and node group name.")
    reservation_id: str = Field(description="Capacity Block reservation id (cr-...).")
    instance_count: int = Field(gt=0, description="Instances the block holds.")
    availability_zone: str = Field(description="AZ of the block (must equal network.availability_zone).")
    start: datetime | None = Field(
        None, description="Block start, ISO-8601 with zone (e.g. 2026-12-01T11:30:00Z); required to deploy."
    )
    end: datetime | None = Field(
        None, description="Block end, ISO-8601 with zone (blocks end at 11:30 UTC); required to deploy."
    )

    @field_validator("start", "end", mode="before")
    @classmethod
    def _not_a_number(cls, v: Any) -> Any:
        # Pydantic reads a number as seconds since 1970: `end: 0` would become a
        # 1970 date and a message about a date nobody wrote.
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            raise ValueError(
                f"{got(v)} is a number, not a time; write it as ISO-8601 with a zone in quotes, e.g. '2026-12-08T11:30:00Z'"
            )
        return v

    @field_validator("availability_zone")
    @classmethod
    def _az(cls, v: str) -> str:
        if not aws_rules.AZ_NAME.match(v):
            raise ValueError(
                f"'{v}' is not an availability zone name; copy the block's zone from EC2, e.g. 'us-east-2b'"
            )
        return v

    @field_validator("start", "end")
    @classmethod
    def _utc(cls, v: datetime | None) -> datetime | None:
        # A time without a zone would be read in the local zone of whoever runs
        # `pulumi up`: the schedule would move with the operator's laptop.
        if v is not None and (v.tzinfo is None or v.utcoffset() is None):
            raise ValueError(
                f"'{v.isoformat()}' has no time zone; write it in UTC with a Z, e.g. '2026-12-08T11:30:00Z'"
            )
        if v is not None and not BLOCK_YEARS[0] <= v.year <= BLOCK_YEARS[1]:
            # checked before any offset is applied: at the calendar's edge (9999-12-31)
            # the conversion to UTC or the schedule's margins would overflow
            raise ValueError(
                f"'{v.isoformat()}' is outside the years {BLOCK_YEARS[0]}-{BLOCK_YEARS[1]}; copy the date EC2 shows "
                "for the block, e.g. '2026-12-08T11:30:00Z'"
            )
        return v.astimezone(UTC) if v is not None else v

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not SLURM_NAME.match(v):
            raise ValueError(
                f"'{v}' is not a valid block name; use letters, digits, '-' or '_', starting with a letter, at most 32 characters"
            )
        return v

    @field_validator("reservation_id")
    @classmethod
    def _cr(cls, v: str) -> str:
        return aws_id("cr", v, "a capacity reservation id", "copy the 'cr-...' id of the purchased Capacity Block")

    @field_validator("instance_count")
    @classmethod
    def _count(cls, v: int) -> int:
        if v > MAX_INSTANCES_PER_BLOCK:
            raise ValueError(
                f"a Capacity Block holds at most {MAX_INSTANCES_PER_BLOCK} instances; split it into several blocks"
            )
        return v


class CapacityConfig(Strict):
    nodes: int = Field(
        ge=2,
        le=4096,
        description="GPU nodes in the cluster (with controller.placement `block`, one of them is the controller).",
    )
    capacity_blocks: tuple[CapacityBlock, ...] = Field(
        (), description="Capacity Blocks to place nodes in; empty for on-demand."
    )
    placement_group: bool | None = Field(
        None, description="Cluster placement group; on-demand only (default true there)."
    )
    block_end_margin_minutes: int = Field(
        DEFAULT_BLOCK_END_MARGIN_MINUTES,
        description="Minutes before a block's end at which its group scales to zero and Slurm stops starting jobs there (at least 31: AWS asks for more than 30).",
    )

    @field_validator("block_end_margin_minutes")
    @classmethod
    def _margin(cls, v: int) -> int:
        if v < MIN_BLOCK_END_MARGIN_MINUTES:
            raise ValueError(
                f"{v} minutes is not more than the {EC2_BLOCK_END_LEAD_MINUTES} minutes before a block's end at which EC2 starts terminating its instances, and AWS asks to scale a Capacity Block's group to zero more than {EC2_BLOCK_END_LEAD_MINUTES} minutes before the end; use at least {MIN_BLOCK_END_MARGIN_MINUTES} (default {DEFAULT_BLOCK_END_MARGIN_MINUTES})"
            )
        if v > 24 * 60:
            raise ValueError(
                f"{v} minutes is more than a day; use {DEFAULT_BLOCK_END_MARGIN_MINUTES} unless jobs need a longer stop"
            )
        return v


class NodeGroup:
    """One Auto Scaling group: a role, a size and (optionally) its Capacity Block."""

    def __init__(self, name: str, role: str, size: int, block: CapacityBlock | None):
        self.name, self.role, self.size, self.block = name, role, size, block

    def __repr__(self) -> str:
        return f"NodeGroup({self.name!r}, {self.role!r}, {self.size}, {self.block and self.block.name!r})"


def node_groups(capacity: CapacityConfig, dedicated: bool = False, host: str | None = None) -> list[NodeGroup]:
    """Nodes per group: the controller group (1 node) first, then workers per block.

    Blocks fill in the order given. `dedicated` (controller.placement): the controller
    is its own on-demand instance, so every block keeps its whole fill. Otherwise the
    controller takes one node from the block named `host` (model/controller.py
    `controller_block`; None: the first block), so a colocated controller shares the
    workers' template settings and image (one GPU node doubles as the controller). The
    host is a name, not a position: dropping another block never moves the controller.
    """
    groups: list[NodeGroup] = []
    blocks = capacity.capacity_blocks
    if not blocks:
        workers = capacity.nodes if dedicated else capacity.nodes - 1
        return [NodeGroup("controller", "controller", 1, None), NodeGroup("workers", "worker", workers, None)]
    host_name = None if dedicated else (host or blocks[0].name)
    hosting = next((b for b in blocks if b.name == host_name), None)
    groups.append(NodeGroup("controller", "controller", 1, hosting))
    remaining = capacity.nodes
    for block in blocks:
        take = min(remaining, block.instance_count)
        remaining -= take
        if block is hosting:
            take = max(take - 1, 0)  # a host with no fill: refused by capacity_problems
        groups.append(NodeGroup(f"block-{block.name}", "worker", take, block))
    return groups


def _block_path(*parts: str | int) -> str:
    return loc_to_path(("capacity", "capacity_blocks", *parts))


def _listed_block_problems(cap: CapacityConfig, zone: str) -> list[tuple[str, str]]:
    """Each block once, by name and reservation, in the network's AZ."""
    problems = []
    blocks = cap.capacity_blocks
    names = [b.name for b in blocks]
    for i, b in enumerate(blocks):
        if names.index(b.name) != i:
            problems.append((_block_path(i, "name"), f"duplicate block name '{b.name}'; give each block its own name"))
        if [x.reservation_id for x in blocks].index(b.reservation_id) != i:
            problems.append(
                (
                    _block_path(i, "reservation_id"),
                    f"reservation {b.reservation_id} is listed twice; list each block once",
                )
            )
        if b.availability_zone != zone:
            problems.append(
                (
                    _block_path(i, "availability_zone"),
                    f"block is in {b.availability_zone} but the cluster subnet is in {zone}; EFA peers must share one subnet and AZ, so use blocks from one AZ and set network.availability_zone to it",
                )
            )
    return problems


def capacity_problems(
    cap: CapacityConfig, zone: str, dedicated: bool = False, host: str | None = None
) -> list[tuple[str, str]]:
    """The blocks against each other, the network's AZ (`zone`) and the node count.

    `dedicated`, `host`: the controller's placement (node_groups)."""
    problems = _listed_block_problems(cap, zone)
    blocks = cap.capacity_blocks
    if not blocks:
        return problems
    held = sum(b.instance_count for b in blocks)
    if cap.nodes > held:
        problems.append(
            (
                loc_to_path(("capacity", "nodes")),
                f"{cap.nodes} nodes requested but the capacity blocks hold {held}; lower capacity.nodes or add a block",
            )
        )
    if cap.placement_group:
        problems.append(
            (
                loc_to_path(("capacity", "placement_group")),
                "Capacity Blocks are already co-located and do not take a placement group; remove it",
            )
        )
    problems += _empty_block_problems(cap, dedicated, host)
    return problems


def _empty_block_problems(cap: CapacityConfig, dedicated: bool, host: str | None) -> list[tuple[str, str]]:
    """Filling blocks in order must leave no block empty: an empty ASG in a paid block is
    almost always a mistake in the stack file. A block hosting the controller whose only
    node is the controller is fully used; a host that gets no node at all cannot host it."""
    blocks = cap.capacity_blocks
    names = [b.name for b in blocks]
    host_name = None if dedicated else (host or names[0])
    if host_name not in names:
        return []  # an unknown controller.block: reported by controller_problems
    problems = []
    remaining = cap.nodes
    for i, b in enumerate(blocks):
        fill = min(remaining, b.instance_count)
        remaining -= fill
        if b.name == host_name and fill == 0:
            problems.append(
                (
                    _block_path(i),
                    f"block '{b.name}' hosts the controller but gets no nodes (blocks fill in the order listed); raise capacity.nodes or set controller.block to a block listed earlier",
                )
            )
        elif fill == 0 and b.name != host_name and (len(blocks) > 1 or dedicated):
            problems.append((_block_path(i), f"block '{b.name}' gets no nodes; remove it or raise capacity.nodes"))
    return problems


def block_date_problems(cap: CapacityConfig) -> list[tuple[str, str]]:
    """Block start and end as EC2 sells them, and the margin only where blocks are."""
    problems = []
    for i, b in enumerate(cap.capacity_blocks):
        if b.end is not None and (b.end.hour, b.end.minute, b.end.second) != (*BLOCK_END_UTC, 0):
            problems.append(
                (
                    _block_path(i, "end"),
                    f"{iso_utc(b.end)} is not a Capacity Block end; blocks end at 11:30 UTC: copy the end date EC2 shows for {b.reservation_id}",
                )
            )
        if b.start is not None and b.end is not None:
            if b.end <= b.start:
                problems.append(
                    (
                        _block_path(i, "end"),
                        f"{iso_utc(b.end)} is not after start {iso_utc(b.start)}; copy both dates EC2 shows for {b.reservation_id}",
                    )
                )
            elif (b.end - b.start).total_seconds() <= cap.block_end_margin_minutes * 60:
                problems.append(
                    (
                        _block_path(i, "end"),
                        f"the block is not longer than capacity.block_end_margin_minutes ({cap.block_end_margin_minutes}): its nodes would be stopped before they start",
                    )
                )
        elif (b.start is None) != (b.end is None):
            missing, given = ("start", "end") if b.start is None else ("end", "start")
            problems.append(
                (_block_path(i, missing), f"required with {given}; copy both dates EC2 shows for {b.reservation_id}")
            )
    if not cap.capacity_blocks and "block_end_margin_minutes" in cap.model_fields_set:
        problems.append(
            (loc_to_path(("capacity", "block_end_margin_minutes")), "only used with Capacity Blocks; remove it")
        )
    return problems
