"""`slurm`: the default partition, more partitions, and the stack's own slurm.conf settings.

Partitions. Nodes are dynamic (userdata/slurm_conf.py): slurm.conf names no node, and a
partition takes nodes either with `Nodes=ALL` or through a NodeSet that selects
registered nodes by feature [SLURM-DYN]. Every node carries the feature
`block-<its block>` (`block-on-demand` without Capacity Blocks), so a partition over some
blocks is `Nodes=` one NodeSet per block, `NodeSet=ns-block-<b> Feature=block-<b>` (a
NodeSet takes one feature). The default partition (`slurm.partition`) keeps every node.

Custom settings (`slurm.custom_settings`): slurm.conf keys the program does not write
itself, each checked against what Slurm 23.11 (the nodes' Slurm) accepts
(model/slurm_keys.py: the key, and its value where the table knows the value's type or
words); a key the program writes (PROGRAM_KEYS, kept equal to the renderer's output by
tests/userdata/test_slurm_custom.py) is refused with the config key that controls it.

Topology. `topology: tree` (the default) has the controller read EC2's network topology of
the cluster's instances and keep Slurm's topology.conf current (nodeside/topology.py,
docs/topology.md); jobs then land under as few network nodes as their size allows, and
the job templates ask for one leaf (`--switches=1`) for at most `switches_wait_minutes`.
`none` leaves the topology plugin out.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from model.base import Strict
from model.paths import loc_to_path

# Slurm partition and block names become Slurm identifiers and node features.
SLURM_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,31}$")
MAX_MINUTES = 43200

# Every slurm.conf key the program writes (userdata/slurm_conf.py, the accounting lines
# of userdata/accounting_files.py, the health lines), and what sets it; plus the line
# keys the program owns. Compared without regard to case, as Slurm compares keys.
PROGRAM_KEYS: dict[str, str] = {
    **{
        k: "the program (userdata/slurm_conf.py)"
        for k in [
            "ClusterName",
            "SlurmctldHost",
            "SlurmUser",
            "AuthType",
            "MpiDefault",
            "ProctrackType",
            "TaskPlugin",
            "SelectType",
            "SelectTypeParameters",
            "GresTypes",
            "DefCpuPerGPU",
            "MaxNodeCount",
            "TreeWidth",
            "ReturnToService",
            "JobRequeue",
            "PropagateResourceLimitsExcept",
            "PlugStackConfig",
            "StateSaveLocation",
            "SlurmdSpoolDir",
            "SlurmctldPidFile",
            "SlurmdPidFile",
            "SlurmctldLogFile",
            "SlurmdLogFile",
            "SlurmctldDebug",
            "SlurmdDebug",
            "SlurmctldTimeout",
            "SlurmdTimeout",
            "MinJobAge",
            "MailProg",
            "JobCompType",
            "JobCompLoc",
        ]
    },
    **{k: "health" for k in ("HealthCheckProgram", "HealthCheckInterval", "HealthCheckNodeState")},
    **{
        k: "accounting"
        for k in [
            "AccountingStorageType",
            "AccountingStorageHost",
            "AccountingStoragePort",
            "AccountingStorageEnforce",
            "AccountingStorageTRES",
            "JobAcctGatherType",
            "JobAcctGatherFrequency",
            "PriorityType",
        ]
    },
    **{
        k: "accounting.priority"
        for k in [
            "PriorityDecayHalfLife",
            "PriorityMaxAge",
            "PriorityWeightFairshare",
            "PriorityWeightAge",
            "PriorityWeightJobSize",
            "PriorityWeightPartition",
            "PriorityWeightQOS",
        ]
    },
    **{k: "slurm.partitions" for k in ("PartitionName", "NodeSet")},
    # (SchedulerParameters stays the stack's: the program adds max_switch_wait to it,
    # userdata/slurm_conf.py with_max_switch_wait)
    "TopologyPlugin": "slurm.topology",
    **{k: "the dynamic nodes (slurmd -Z --conf)" for k in ("NodeName", "DownNodes", "FrontendName")},
    "Include": "the program (one slurm.conf on every node)",
}


class PartitionConfig(Strict):
    name: str = Field(description="Partition name.")
    blocks: tuple[str, ...] = Field(
        (),
        description="Capacity Blocks whose nodes it holds (`on-demand` without blocks); empty: every node.",
    )
    max_time_minutes: int | None = Field(
        None, ge=1, le=MAX_MINUTES, description="MaxTime: the longest time limit a job may ask for (none: unlimited)."
    )
    default_time_minutes: int | None = Field(
        None, ge=1, le=MAX_MINUTES, description="DefaultTime; defaults to slurm.default_time_minutes."
    )

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _partition_name(v)


def _partition_name(v: str) -> str:
    if not SLURM_NAME.match(v) or v.upper() == "DEFAULT":
        raise ValueError(f"'{v}' is not a valid Slurm partition name; use letters, digits, '-' or '_' (not 'DEFAULT')")
    return v


class SlurmConfig(Strict):
    partition: str = Field("train", description="Default Slurm partition name.")
    default_time_minutes: int = Field(
        60, ge=1, le=MAX_MINUTES, description="Time limit of a job submitted without --time (partition DefaultTime)."
    )
    partitions: tuple[PartitionConfig, ...] = Field(
        (), description="More partitions beside the default one: per block, or a debug partition with a short MaxTime."
    )
    custom_settings: dict[str, str | int] = Field(
        default_factory=dict,
        description="Extra slurm.conf settings (keys the program does not write; checked against Slurm 23.11).",
    )
    topology: Literal["tree", "none"] = Field(
        "tree",
        description=(
            "Network topology Slurm places jobs by: `tree` (topology/tree built by the controller from EC2's"
            " DescribeInstanceTopology and refreshed as nodes join or leave, docs/topology.md) or `none`"
            " (no topology plugin)."
        ),
    )
    switches_wait_minutes: int = Field(
        15,
        ge=0,
        le=1440,
        description=(
            "How long a job template waits for nodes under one network leaf (`#SBATCH --switches=1@<this>`)"
            " before it runs across leaves; 0 drops the line."
        ),
    )

    @field_validator("partition")
    @classmethod
    def _partition(cls, v: str) -> str:
        return _partition_name(v)


def _p(*keys: str | int) -> str:
    return loc_to_path(("slurm", *keys))


def slurm_problems(slurm: SlurmConfig, block_names: list[str]) -> list[tuple[str, str]]:
    """Partitions (names, blocks, time limits) and custom settings."""
    problems = _partition_problems(slurm, block_names)
    problems += _custom_problems(slurm.custom_settings)
    return problems


def _partition_problems(slurm: SlurmConfig, block_names: list[str]) -> list[tuple[str, str]]:
    problems = []
    known = block_names or ["on-demand"]
    seen = {slurm.partition.lower(): "slurm.partition"}
    for i, part in enumerate(slurm.partitions):
        if part.name.lower() in seen:
            problems.append((_p("partitions", i, "name"), f"'{part.name}' is already {seen[part.name.lower()]}"))
        seen.setdefault(part.name.lower(), f"slurm.partitions[{i}]")
        for j, block in enumerate(part.blocks):
            if block not in known:
                problems.append(
                    (
                        _p("partitions", i, "blocks", j),
                        f"'{block}' is not a block of this stack ({', '.join(known)}); name one of them",
                    )
                )
        default = part.default_time_minutes or slurm.default_time_minutes
        if part.max_time_minutes is not None and default > part.max_time_minutes:
            problems.append(
                (
                    _p("partitions", i, "default_time_minutes"),
                    f"DefaultTime {default} is above this partition's MaxTime {part.max_time_minutes}: "
                    "set default_time_minutes at or below max_time_minutes",
                )
            )
    return problems


def _custom_problems(settings: dict[str, str | int]) -> list[tuple[str, str]]:
    from model.slurm_keys import table_23_11

    table = table_23_11()
    owned = {k.lower(): why for k, why in PROGRAM_KEYS.items()}
    problems = []
    for key, value in settings.items():
        path = _p("custom_settings", key)
        text = str(value)
        if key.lower() in owned:
            problems.append((path, f"{key} is written by the program (set by {owned[key.lower()]}); remove it here"))
            continue
        if not text or any(c in text for c in "\n#") or (" " in text and not text.startswith('"')):
            problems.append((path, f"'{text}' cannot be one slurm.conf value (empty, a newline, '#', or a blank)"))
            continue
        why = table.value_problem("slurm.conf", key, text)
        if why:
            problems.append((path, f"Slurm {table.version} refuses it: {why}"))
    return problems


def partition_lines(slurm: SlurmConfig) -> list[str]:
    """NodeSet and PartitionName lines of `slurm.partitions` (the default partition's
    line is userdata/slurm_conf.py partition_line)."""
    lines, nodesets = [], []
    for part in slurm.partitions:
        for block in part.blocks:
            if block not in nodesets:
                nodesets.append(block)
                lines.append(f"NodeSet=ns-block-{block} Feature=block-{block}")
    for part in slurm.partitions:
        nodes = ",".join(f"ns-block-{b}" for b in part.blocks) if part.blocks else "ALL"
        max_time = part.max_time_minutes if part.max_time_minutes is not None else "INFINITE"
        default = part.default_time_minutes or slurm.default_time_minutes
        lines.append(f"PartitionName={part.name} Nodes={nodes} DefaultTime={default} MaxTime={max_time} State=UP")
    return lines
