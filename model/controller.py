"""`controller`: where slurmctld runs: on one node of a block, or on its own small instance.

`block` (the default): the controller is one GPU node of the cluster, launched from the
workers' template settings into a Capacity Block (or on demand), so it lives and ends
with that block. With several blocks the stack names the block that hosts it
(`controller.block`): a position-based rule ("the first block") would move the
controller's slot into another block when the first one is dropped from the list, and
the receiving group would shrink by one, which makes Auto Scaling terminate one of its
running workers, chosen by the group's termination policy and not by Slurm.
A rule derived from the dates (say "the block that ends last") moves it when a later
block is bought. Only a name in the stack file stays where it is when the block list
changes; moving the controller is then a config edit whose error message says what it costs.

`dedicated`: a small on-demand CPU instance (no GPU, no EFA, no block) in the same subnet
and security group, booting the same image and user data from its own launch template.
It runs slurmctld only (no slurmd: it takes no jobs), keeps the queue across blocks,
and takes no slot from any block.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from model.base import Strict
from model.capacity import CapacityBlock, CapacityConfig
from model.catalog import CATALOG
from model.paths import loc_to_path
from model.tags import ON_DEMAND

# Current-generation general-purpose x86 (4 vCPU, 16 GiB): slurmctld, munged and the
# agent loop for a few thousand nodes fit in it; x86 because it boots the cluster's image
# (the x86_64 Deep Learning AMI, model/image.py).
DEFAULT_INSTANCE_TYPE = "m7i.xlarge"
PLACEMENTS = ("block", "dedicated")

# EC2 instance type names: family letters, generation digit(s), attribute letters (with an
# optional -flex suffix), a dot, the size [EC2-TYPES].
_TYPE = re.compile(r"^(?P<family>[a-z]+)(?P<gen>[0-9]+)(?P<attrs>[a-z]*)(?:-flex)?\.(?P<size>[0-9]*[a-z]+[0-9]*)$")
# Accelerated computing families (GPU, Trainium, Inferentia, Gaudi, FPGA, video
# transcoding) [EC2-TYPES]: a paid accelerator the controller would never use; the
# Capacity Block types among them also refuse on-demand launches in most accounts.
_ACCELERATED = ("p", "g", "trn", "inf", "dl", "f", "vt")


def instance_type_problem(
    value: str,
    why: str = "a dedicated controller runs slurmctld only and takes no jobs",
    example: str = DEFAULT_INSTANCE_TYPE,
) -> str | None:
    """Why `value` cannot be a small CPU node's type (a dedicated controller's, `why`
    says what it runs; a login node's), with the fix; None if it can."""
    m = _TYPE.match(value)
    if m is None:
        return f"'{value}' is not an EC2 instance type name; use e.g. '{example}'"
    if value in CATALOG or m["family"] in _ACCELERATED:
        return f"'{value}' is an accelerated (GPU/EFA) instance type; {why}: use a small CPU type, e.g. '{example}'"
    if "g" in m["attrs"]:
        return (
            f"'{value}' is a Graviton (arm64) type, but every node boots the cluster's "
            f"x86_64 image; use an x86 type, e.g. '{example}'"
        )
    return None


class ControllerConfig(Strict):
    placement: Literal["block", "dedicated"] = Field(
        "block",
        description="`block`: one GPU node of a block doubles as the controller (it ends with that block); `dedicated`: a small on-demand CPU instance that outlives blocks (no slurmd, takes no block slot).",
    )
    instance_type: str = Field(
        DEFAULT_INSTANCE_TYPE,
        description="With placement `dedicated`: the controller's instance type (a small x86 CPU type; no GPU/accelerated types).",
    )
    block: str | None = Field(
        None,
        description="With placement `block` and two or more Capacity Blocks (required then): the block whose group gives one node to the controller.",
    )

    @field_validator("instance_type")
    @classmethod
    def _type(cls, v: str) -> str:
        problem = instance_type_problem(v)
        if problem:
            raise ValueError(problem)
        return v

    @property
    def dedicated(self) -> bool:
        return self.placement == "dedicated"


def controller_block(ctl: ControllerConfig, cap: CapacityConfig) -> str | None:
    """The name of the block hosting a colocated controller; None: dedicated or on demand.

    One block: that block (whether or not `controller.block` names it). Several: the
    named one (controller_problems refuses a missing or unknown name before this runs).
    """
    blocks = cap.capacity_blocks
    if ctl.dedicated or not blocks:
        return None
    if ctl.block is not None:
        return ctl.block
    return blocks[0].name if len(blocks) == 1 else None


def _p(key: str) -> str:
    return loc_to_path(("controller", key))


def controller_problems(ctl: ControllerConfig, cap: CapacityConfig) -> list[tuple[str, str]]:
    """Keys that only mean something with the other placement, and the hosting block."""
    problems = []
    names = [b.name for b in cap.capacity_blocks]
    if ctl.dedicated:
        if ctl.block is not None:
            problems.append(
                (_p("block"), "only used with placement: block (a dedicated controller is in no block); remove it")
            )
        return problems
    if "instance_type" in ctl.model_fields_set:
        problems.append(
            (
                _p("instance_type"),
                "only used with placement: dedicated (a colocated controller is one of the cluster's GPU nodes); remove it or set controller.placement: dedicated",
            )
        )
    if ctl.block is not None and not names:
        problems.append((_p("block"), "only used with Capacity Blocks; remove it"))
    elif ctl.block is not None and ctl.block not in names:
        problems.append(
            (
                _p("block"),
                f"names block '{ctl.block}', which is not in capacity.capacity_blocks ({', '.join(names)}); "
                "the controller moves only on purpose: set controller.block to a listed block (its group gives "
                "one node to the controller, so Auto Scaling terminates one of that block's running workers unless "
                "the block has a free slot) or set controller.placement: dedicated (recommended: it outlives blocks)",
            )
        )
    elif ctl.block is None and len(names) > 1:
        problems.append(
            (
                _p("block"),
                f"required with {len(names)} Capacity Blocks: name the block whose group gives one node to the "
                f"controller (e.g. controller.block: {names[0]}), so that dropping a block from the list never moves "
                "the controller into a running block's group; or set controller.placement: dedicated (recommended: it outlives blocks)",
            )
        )
    return problems


def controller_move_problem(
    ctl: ControllerConfig,
    cap: CapacityConfig,
    host: CapacityBlock,
    live_block: str | None,
    live_host_size: int | None,
    host_size_now: int,
) -> tuple[str, str] | None:
    """A move of a colocated controller into `host` that would terminate a running worker.

    The config alone cannot see where the live controller runs: going from blocks [a, b]
    (host a) to [b] alone makes b the host without any key naming it. So the program
    reads the live groups (infra/preflight.py `controller_move_problems`): `live_block`
    is the GpuClusterBlock tag of the live controller group (the block it follows, or
    `on-demand`; None: no controller group, a first deployment), `live_host_size` the
    live desired size of `host`'s group (None: no such group yet), `host_size_now` the
    size this run declares for it. A desired size below the group's current one makes
    Auto Scaling terminate instances chosen by its termination policy, not by Slurm
    [ASG-TERM]: that is refused before anything changes.
    """
    if live_block is None or live_block == host.name or live_host_size is None:
        return None
    if live_host_size <= host_size_now:
        return None  # the host's group does not shrink (not started yet, or a free slot)
    if live_block == ON_DEMAND:
        source = "its own instance (the live controller group is in no block)"
        keep = "keep controller.placement: dedicated"
    else:
        source = f"block '{live_block}' (where the live controller group runs)"
        listed = any(b.name == live_block for b in cap.capacity_blocks)
        keep = (
            f"keep controller.block: {live_block} until block '{live_block}' ends"
            if listed
            else f"list block '{live_block}' again with controller.block: {live_block} if it has not ended"
        )
    how = "controller.block names it" if ctl.block is not None else "it is the only block left"
    return (
        _p("block"),
        f"the controller would move from {source} into block '{host.name}' ({how}), whose group runs "
        f"{live_host_size} nodes: giving one of them to the controller shrinks it to {host_size_now}, and Auto "
        f"Scaling terminates a running worker of block '{host.name}' chosen by its termination policy, not by "
        f"Slurm. Nothing was changed; choose one: {keep}, set controller.block to a block that has not "
        "started, or set controller.placement: dedicated (recommended: a small instance that outlives blocks "
        "and takes no block slot)",
    )
