"""`health`: the node health program Slurm runs on every node (nodeside/health.py).

Slurm's `HealthCheckProgram` runs on each slurmd every `HealthCheckInterval` seconds,
on the nodes in the states `HealthCheckNodeState` names [SLURM-HEALTH]. Our program runs
cheap checks only (seconds: GPU count, PCIe link, XID events, ECC and row remaps, EFA
ports, /fsx, NVMe, munge, slurmd, clock, DCGM level 1) and drains a failing node with a
reason naming the check and its evidence (docs/health.md). Deep diagnostics (DCGM level
2/3, minutes) are never on this path: the controller runs them on idle nodes on a
schedule (`dcgm_idle`, model/dcgm.py), and `ops health NODE --level 2` on request.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from model.base import Strict
from model.dcgm import DcgmIdleConfig

# Slurm kills a health program that has not finished within 60 seconds [SLURM-HEALTH];
# the program bounds each tool call so the whole run stays far below that.
SLURM_HEALTH_KILL_SECONDS = 60

# Slurm also names NONDRAINED_IDLE; Debian's 22.05 accepts it but reads it back as ANY
# (tests/daemons/test_slurm_oracle.py), so it is not offered: IDLE is the portable choice.
NodeState = Literal["ANY", "IDLE", "ALLOC", "MIXED"]

# An IPv4 address or a DNS name, and an optional port: what the clock check's SNTP query takes.
_REFERENCE = re.compile(
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?::[0-9]{1,5})?"
)


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

    dcgm_idle: DcgmIdleConfig = Field(
        DcgmIdleConfig(),
        description="Deep DCGM diagnostics (level 2/3) on idle nodes, on a schedule, in a reservation (docs/health.md).",
    )

    clock_reference: str = Field(
        "",
        json_schema_extra={"doc_default": "`''` (chrony)"},
        description=(
            "NTP server `host[:port]` the clock check measures each node's offset against by SNTP (e.g."
            " 169.254.169.123, the Amazon Time Sync Service); empty: ask the node's chrony (chronyc tracking),"
            " else timedatectl."
        ),
    )

    @field_validator("clock_reference")
    @classmethod
    def _reference(cls, v: str) -> str:
        if v and not _REFERENCE.fullmatch(v):
            raise ValueError(
                f"'{v}' is not host[:port]; use an address or host name with an optional port, e.g. 169.254.169.123"
            )
        host, _, port = v.partition(":")
        if port and not 1 <= int(port) <= 65535:
            raise ValueError(f"port {port} is outside 1..65535; e.g. 169.254.169.123:123")
        return v

    def node_state_value(self) -> str:
        """HealthCheckNodeState: the states, then CYCLE when asked, comma-separated."""
        states = list(dict.fromkeys(self.node_states))
        if "ANY" in states:
            states = ["ANY"]  # ANY already covers every other state
        return ",".join([*states, *(["CYCLE"] if self.cycle else [])])
