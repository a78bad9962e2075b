"""When each node group runs: a Capacity Block's group follows the block's dates.

A group created at full size days before its block starts fails every launch until
then, and Auto Scaling may put a group that keeps failing (most commonly for over 24
hours) into administrative suspension [ASG-SUSPEND]: at the block start nothing would
launch. So a group whose block has not started is created at zero, and scheduled
actions scale it to its size at the start and back to zero `block_end_margin_minutes`
before the end, ahead of EC2's own terminations 30 minutes before the end [ASG-CB]
[CB-USE]. On-demand groups have no schedule.

`now` is passed in (read once by infra/stack.py; a fixed time in plans and tests), so
the same config always declares the same resources for the same `now`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from model.capacity import NodeGroup, iso_utc
from model.config import ClusterConfig
from model.paths import ROOT

# Auto Scaling refuses a scheduled action whose start time is in the past, and a
# preview runs minutes before the update that creates the action: a block that starts
# within this lead is treated as started (its group is declared at full size and
# launches succeed from the start), and a block whose scale-in falls within it is over.
SCHEDULE_LEAD = timedelta(minutes=10)


@dataclass(frozen=True)
class GroupSchedule:
    size_now: int  # min = max = desired declared for the group now
    scale_out_at: datetime | None  # scheduled action to the group's size (block not started)
    scale_in_at: datetime | None  # scheduled action to zero (end minus margin)
    block_end: datetime | None

    @property
    def block_end_iso(self) -> str | None:
        return iso_utc(self.block_end) if self.block_end is not None else None


def group_schedule(group: NodeGroup, margin_minutes: int, now: datetime) -> GroupSchedule:
    block = group.block
    if block is None:
        return GroupSchedule(group.size, None, None, None)
    if block.start is None or block.end is None:
        raise ValueError(f"block {block.name} has no start/end; deploy_problems() refuses this config")
    started = block.start <= now + SCHEDULE_LEAD
    scale_in = block.end - timedelta(minutes=margin_minutes)
    return GroupSchedule(
        size_now=group.size if started else 0,
        scale_out_at=None if started else block.start,
        scale_in_at=scale_in if scale_in > now + SCHEDULE_LEAD else None,
        block_end=block.end,
    )


def schedule_problems(cfg: ClusterConfig, now: datetime) -> list[tuple[str, str]]:
    """Blocks the program cannot schedule: dates missing, or the block already over."""
    problems = []
    margin = cfg.capacity.block_end_margin_minutes
    for i, b in enumerate(cfg.capacity.capacity_blocks):
        base = f"{ROOT}.capacity.capacity_blocks[{i}]"
        lookup = (
            f"`aws ec2 describe-capacity-reservations --capacity-reservation-ids {b.reservation_id} "
            "--query 'CapacityReservations[0].[StartDate,EndDate]'`"
        )
        for key in ("start", "end"):
            if getattr(b, key) is None:
                problems.append(
                    (
                        f"{base}.{key}",
                        f"required to deploy: the block's group scales out at its start "
                        f"and to zero before its end; copy the block's {key.title()}Date "
                        f"from {lookup} as '2026-12-08T11:30:00Z'",
                    )
                )
        if b.end is None:
            continue
        stop = b.end - timedelta(minutes=margin)
        if stop <= now + SCHEDULE_LEAD:
            problems.append(
                (
                    f"{base}.end",
                    f"block {b.reservation_id} ends at {iso_utc(b.end)} and its nodes stop "
                    f"at {iso_utc(stop)} (capacity.block_end_margin_minutes {margin}), "
                    f"which is past at {iso_utc(now)}; move to the next block: replace "
                    "this entry with the new block (README, moving to the next block)",
                )
            )
    return problems
