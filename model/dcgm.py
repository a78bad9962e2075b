"""`health.dcgm_idle`: deep DCGM diagnostics (level 2 or 3) on idle nodes, on a schedule.

Level 2 stresses the GPUs for about 2.5-10.5 minutes, level 3 for longer [DCGM-DIAG]: too
long for the health program (Slurm kills it at 60 s), the boot or the replacement path.
The controller's agent loop (nodeside/dcgm_idle.py) runs them on nodes that have been
idle a while: it first takes a short Slurm reservation on the node (refused by Slurm if a
job landed there meanwhile), so no job can start on it while its GPUs are stressed, then
runs the diagnostic there as a batch job inside the reservation. A failure drains the
node with `gpu-cluster dcgm: level N: ...`, which the repair agent treats as hardware. A
run yields when jobs wait for nodes: it is cancelled and tried again later, so it never
holds work back for more than one agent pass (docs/health.md, "Deep diagnostics").
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from model.base import Strict

# Reservation and job bounds per level, minutes: over the published run times [DCGM-DIAG]
# (level 2 up to about 10.5 minutes; level 3 several times that).
DEFAULT_TIME_LIMIT = {2: 20, 3: 60}


class DcgmIdleConfig(Strict):
    level: Literal[0, 2, 3] = Field(
        2,
        description=(
            "DCGM run level for idle nodes (`dcgmi diag -r LEVEL`, in a reservation on the node);"
            " 0 turns the scheduled runs off (`ops health NODE --level N` still runs one on request)."
        ),
    )
    every_hours: int = Field(
        24, ge=1, le=8760, description="Run on each node at most once in this many hours (after its last run)."
    )
    idle_minutes: int = Field(
        30,
        ge=0,
        le=10080,
        description="Only on a node idle at least this long (Slurm's LastBusyTime): never just after a job or a boot.",
    )
    max_nodes: int = Field(1, ge=1, le=1000, description="At most this many nodes in a deep diagnostic at once.")
    time_limit_minutes: int | None = Field(
        None,
        ge=5,
        le=600,
        json_schema_extra={"doc_default": "20 (level 2), 60 (level 3)"},
        description="Bound of one run (the reservation's length and the job's time limit); a run past it is cancelled without a verdict.",
    )

    def limit_minutes(self) -> int:
        if self.time_limit_minutes is not None:
            return self.time_limit_minutes
        return DEFAULT_TIME_LIMIT.get(self.level, 20)
