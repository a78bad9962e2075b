"""The live check before a colocated controller moves: which groups to read, and the verdict.

The stack file cannot say where the live controller runs (dropping its block from the
list moves it without any key naming the new host), so both the program
(infra/preflight.py, through the provider's data sources) and `python3 -m ops preflight`
(ops/facts.py, one DescribeAutoScalingGroups call) read two groups by their fixed names:
the controller group, whose GpuClusterBlock tag names the block it follows, and the group
of the block that would host it. What they read goes into the one pure rule,
model/controller.py `controller_move_problem`, so both refuse a move in the same words.
"""

from __future__ import annotations

from dataclasses import dataclass

from model.capacity import CapacityBlock
from model.config import ClusterConfig
from model.controller import controller_block, controller_move_problem
from model.preflight import asg_name
from model.schedule import BlockSchedule


@dataclass(frozen=True)
class LiveGroup:
    """What the check needs of a live Auto Scaling group."""

    block: str | None  # its GpuClusterBlock tag (the block it follows, or `on-demand`)
    desired: int


@dataclass(frozen=True)
class MoveLookup:
    """The groups to read for `host`, the block a colocated controller would live in."""

    host: CapacityBlock
    host_group: str  # the node group's name, e.g. "block-a"
    controller_asg: str
    host_asg: str


def move_lookup(cfg: ClusterConfig) -> MoveLookup | None:
    """None: nothing can move into a block (dedicated or on-demand controller)."""
    host = controller_block(cfg.controller, cfg.capacity)
    block = next((b for b in cfg.capacity.capacity_blocks if b.name == host), None)
    if block is None:
        return None
    names = {g.name: asg_name(cfg.aws_name_base, g.name) for g in cfg.node_groups()}
    host_group = f"block-{block.name}"
    return MoveLookup(block, host_group, names["controller"], names[host_group])


def move_problem(
    cfg: ClusterConfig,
    lookup: MoveLookup,
    schedule: BlockSchedule,
    controller: LiveGroup | None,
    host: LiveGroup | None,
) -> tuple[str, str] | None:
    """The refusal for what was read (`controller` None: no controller group yet, a first
    deployment; `host` None: no group for the host block yet)."""
    if controller is None:
        return None
    size = None if host is None else host.desired
    return controller_move_problem(
        cfg.controller, cfg.capacity, lookup.host, controller.block, size, schedule.of(lookup.host_group).size_now
    )
