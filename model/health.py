"""`health`: the node health program Slurm runs on every node (nodeside/health.py).

Slurm's `HealthCheckProgram` runs on each slurmd every `HealthCheckInterval` seconds,
on the nodes in the states `HealthCheckNodeState` names [SLURM-HEALTH]. Our program runs
cheap checks only (seconds: GPU count, PCIe link, XID events, ECC and row remaps, EFA
ports, /fsx, NVMe, munge, slurmd, clock, DCGM level 1) and drains a failing node with a
reason naming the check and its evidence (docs/health.md). Deep diagnostics (DCGM level
2/3, minutes) are never on this path: `ops health NODE --level 2` runs them on request.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from model.base import Strict

# Slurm kills a health program that has not finished within 60 seconds [SLURM-HEALTH];
# the program bounds each tool call so the whole run stays far below that.
SLURM_HEALTH_KILL_SECONDS = 60

# Slurm also names NONDRAINED_IDLE; Debian's 22.05 accepts it but reads it back as ANY
# (tests/daemons/test_slurm_oracle.py), so it is not offered: IDLE is the portable choice.
NodeState = Literal["ANY", "IDLE", "ALLOC", "MIXED"]


class HealthConfig(Strict):
    enabled: bool = Field(
        True, description="Run the node health program from Slurm (HealthCheckProgram); false leaves it out."
    )
    interval_seconds: int = Field(
        300,
        ge=30,
        le=86400,
        description="Seconds between runs on each node (HealthCheckInterval): a fault drains its node within one interval.",
    )
    node_states: tuple[NodeState, ...] = Field(
        ("ANY",),
        min_length=1,
        json_schema_extra={"doc_default": "`ANY`"},
        description="Node states the program runs in (HealthCheckNodeState), e.g. only IDLE to leave busy nodes alone.",
    )
    cycle: bool = Field(
        False,
        description="Spread the runs over the interval instead of running on every node at once (HealthCheckNodeState CYCLE).",
    )
    dcgm_level1: bool = Field(True, description="Run `dcgmi diag -r 1` (seconds) in each run on nodes that have dcgmi.")
    nvme_min_free_percent: int = Field(
        5, ge=0, le=90, description="Node-local NVMe below this much free space fails the NVMe check."
    )
    clock_max_offset_ms: int = Field(
        100, ge=1, le=60000, description="Clock offset from NTP (chronyc tracking) above this fails the clock check."
    )

    def node_state_value(self) -> str:
        """HealthCheckNodeState: the states, then CYCLE when asked, comma-separated."""
        states = list(dict.fromkeys(self.node_states))
        if "ANY" in states:
            states = ["ANY"]  # ANY already covers every other state
        return ",".join([*states, *(["CYCLE"] if self.cycle else [])])
