"""`repair`: what the controller's repair agent does with a node drained for hardware.

The health program (nodeside/health.py) and the validation gates drain a failing node
with the evidence; the repair agent on the controller (nodeside/repair.py, run from the
agent loop by nodeside/lib/repair.sh) then acts on the drain by this policy
(docs/health.md, "Automatic repair"):

- `auto`: a node whose fault means the hardware (health action `replace`: GPU count,
  PCIe link, hardware XIDs, ECC row-remap failure, EFA, DCGM; or a gate's NO-GO) is
  replaced through its Auto Scaling group; one whose fault a reset usually clears (health
  action `reset`: /fsx, munge, slurmd, clock, reset XIDs) is replaced only when it is
  still drained `reset_grace_minutes` later (the health program resumes it if it
  recovers by itself);
- `replace`: both kinds are replaced at once;
- `isolate`: the node is kept out of service for good (the drain is renamed, so the
  health program no longer resumes it) and reported; an operator replaces it
  (`ops replace`);
- `none`: the agent does nothing; the health program drains and resumes its own drains.

A replacement is `TerminateInstanceInAutoScalingGroup` without decrementing the desired
capacity [ASG-TERMINATE]: the group launches a new instance from the same template, which
registers drained and takes jobs only once the join gate passes it. The limits hold for
the whole cluster. Drains by operators, block ends, `ops replace` or failed boots are
never acted on.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from model.base import Strict

Policy = Literal["auto", "replace", "isolate", "none"]
# Policies under which the agent terminates instances: only then does the controller's
# role get the permission to (infra/iam.py repair_policy).
REPLACING = ("auto", "replace")


class RepairConfig(Strict):
    policy: Policy = Field(
        "auto",
        description=(
            "What the controller's repair agent does with a node drained for hardware (docs/health.md):"
            " `auto` replaces hardware faults at once and reset-class faults that persist"
            " `reset_grace_minutes`; `replace` replaces both at once; `isolate` keeps the node out of"
            " service for an operator; `none` leaves drains to the health program."
        ),
    )
    max_replacements_per_hour: int = Field(
        2, ge=1, le=100, description="At most this many replacements in any 60 minutes (cluster-wide)."
    )
    max_nodes_out: int = Field(
        2,
        ge=1,
        le=1000,
        description=("Never more than this many nodes out at once: replaced and not yet back through the join gate."),
    )
    repeat_window_minutes: int = Field(
        1440,
        ge=10,
        le=10080,
        description=(
            "A replacement that fails again for hardware within this many minutes of its predecessor's"
            " replacement is isolated and reported, not replaced again."
        ),
    )
    reset_grace_minutes: int = Field(
        30,
        ge=0,
        le=1440,
        description="With policy `auto`: how long a reset-class drain (/fsx, munge, clock, ...) may last before the node is replaced.",
    )
    job_grace_minutes: int = Field(
        5,
        ge=0,
        le=1440,
        description=(
            "How long jobs still running on a node drained for hardware may go on before the agent requeues"
            " them (`scontrol requeue`); a job that cannot be requeued is waited for."
        ),
    )

    @property
    def replaces(self) -> bool:
        """Whether the agent terminates instances (and the controller's role may)."""
        return self.policy in REPLACING
