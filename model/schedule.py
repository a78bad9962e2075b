"""When each node group runs: a Capacity Block's group follows the block's dates.

A group created at full size days before its block starts fails every launch until
then, and Auto Scaling may put a group that keeps failing (most commonly for over 24
hours) into administrative suspension [ASG-SUSPEND]: at the block start nothing would
launch. So a group whose block has not started is created at zero, and scheduled
actions scale it to its size at the start and back to zero `block_end_margin_minutes`
before the end, ahead of EC2's own terminations 30 minutes before the end [ASG-CB]
[CB-USE]. On-demand groups have no schedule.

Time enters once: `cluster_schedule(cfg, now)` builds one `BlockSchedule` per run (every
group's size now and its actions), and the groups (infra/nodes.py) and the stack outputs
(infra/cluster.py) both read that object. `now` is passed in (read once by
infra/stack.py; a fixed time in plans and tests), so the same config always declares the
same resources for the same `now`.

Who owns a group's size (docs/lifecycle.md): the program declares min = max = desired
from `now`, and `Pulumi.yaml` sets `options: refresh: always` [P-PROJECT], so every
preview and up first reads the real sizes and actions. The provider sends sizes only when
they differ from the stored state [TF-ASG]; after a refresh the stored state is the
group's real size, so a scheduled action that resized the group (or one that already ran
and was deleted by Auto Scaling) can never leave the engine believing a size the group
does not have.

The action rules (Auto Scaling refuses a start time in the past [ASG-PUT-SCHED]):
  - scale-out: declared only when the block starts later than now + CREATION_LEAD; a
    block starting sooner (or already started) is declared at full size now and gets no
    scale-out action. Its launches are refused until the start and Auto Scaling retries
    them; that lasts at most CREATION_LEAD, far below the ~24 h after which Auto Scaling
    may suspend a failing group [ASG-SUSPEND].
  - scale-in: declared while its time is later than now + CREATION_LEAD. Within the lead
    the program cannot tell an action that already exists unchanged (no request is sent)
    from a new one (a request that could reach Auto Scaling after its time), so it refuses
    the run (`schedule_problems`) instead of risking a half-applied update: nothing
    changes and the existing action fires. After the time the action has run and Auto
    Scaling deleted it; the block is over and must leave the config.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from model.capacity import CapacityBlock, NodeGroup, iso_utc
from model.config import ClusterConfig
from model.paths import ROOT

# How long before a scheduled action's time the program stops declaring it as new. A
# first `pulumi up` creates the actions only after the file system: the launch template
# waits for the FSx endpoint and the groups for the template, and FSx for Lustre creation
# commonly takes 10-20 minutes (AWS gives no bound). 45 minutes covers a slow creation
# plus the rest of the update; the cost of a longer lead is only launches refused (and
# retried) for that long before a block starts, far below Auto Scaling's ~24 h [ASG-SUSPEND].
CREATION_LEAD = timedelta(minutes=45)


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
    """One group at `now` (the rules: this module's docstring)."""
    block = group.block
    if block is None:
        return GroupSchedule(group.size, None, None, None)
    if block.start is None or block.end is None:
        raise ValueError(f"block {block.name} has no start/end; deploy_problems() refuses this config")
    started = block.start <= now + CREATION_LEAD
    scale_in = block.end - timedelta(minutes=margin_minutes)
    return GroupSchedule(
        size_now=group.size if started else 0,
        scale_out_at=None if started else block.start,
        # schedule_problems refuses a run with a scale-in within the lead; None here is
        # only reached by callers that skip it (the component tests).
        scale_in_at=scale_in if scale_in > now + CREATION_LEAD else None,
        block_end=block.end,
    )


@dataclass(frozen=True)
class BlockSchedule:
    """Every group's schedule at one `now`: computed once per run, read by the groups and
    the stack outputs. Hashable, so a caller can key on it (the timeline model does)."""

    now: datetime
    margin_minutes: int
    groups: tuple[tuple[str, GroupSchedule], ...]

    def of(self, group_name: str) -> GroupSchedule:
        for name, sched in self.groups:
            if name == group_name:
                return sched
        raise KeyError(f"no schedule for group {group_name!r}; build it from the same node groups")


def block_schedule(groups: Sequence[NodeGroup], margin_minutes: int, now: datetime) -> BlockSchedule:
    return BlockSchedule(now, margin_minutes, tuple((g.name, group_schedule(g, margin_minutes, now)) for g in groups))


def cluster_schedule(cfg: ClusterConfig, now: datetime) -> BlockSchedule:
    """The one schedule of a run: `cfg`'s node groups at `now`."""
    return block_schedule(cfg.node_groups(), cfg.capacity.block_end_margin_minutes, now)


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
        problem = _stop_problem(b, margin, now)
        if problem:
            problems.append((f"{base}.end", problem))
    return problems


def _stop_problem(b: CapacityBlock, margin: int, now: datetime) -> str | None:
    """A block whose scale-in is past (the block is over) or within CREATION_LEAD."""
    assert b.end is not None
    stop = b.end - timedelta(minutes=margin)
    ends = (
        f"block {b.reservation_id} ends at {iso_utc(b.end)} and its nodes stop at {iso_utc(stop)} "
        f"(capacity.block_end_margin_minutes {margin})"
    )
    move = "move to the next block: replace this entry with the new block (README, moving to the next block)"
    if stop <= now:
        return f"{ends}, which is past at {iso_utc(now)}; {move}"
    if stop <= now + CREATION_LEAD:
        # Declaring the scale-in now could send its request after its time (Auto Scaling
        # refuses a past start time [ASG-PUT-SCHED]); refusing changes nothing and the
        # existing action still fires.
        lead = int(CREATION_LEAD.total_seconds() // 60)
        return (
            f"{ends}, less than {lead} minutes after {iso_utc(now)}: a scale-in action created now could "
            f"reach Auto Scaling after its time, so this run changes nothing; the existing action still "
            f"stops the nodes. Run again after {iso_utc(stop)} with this entry removed ({move}), or extend "
            "the block and set its new end"
        )
    return None
