"""`login`: login nodes, where people submit jobs from (optional).

A login node is a small on-demand CPU instance in the cluster's subnet and security
group, booting the same image and user data as every other node from its own launch
template (role `login`, the dedicated controller's template settings: one plain
interface, no EFA, no Capacity Block, its own instance profile). It runs munge (key
through the join path), mounts /fsx, has the cluster's users and the Slurm client
(sbatch, srun, squeue, sacct, and the Pyxis plugin for --container-image), and no
slurmd: it takes no jobs, so a user's build or editor never competes with training.
People reach it through Session Manager as their own user (docs/team.md).
"""

from __future__ import annotations

from pydantic import Field, field_validator

from model.base import Strict
from model.controller import instance_type_problem

DEFAULT_INSTANCE_TYPE = "m7i.large"
# Auto Scaling group and tag value of the login nodes.
GROUP = "login"


class LoginConfig(Strict):
    count: int = Field(0, ge=0, le=10, description="Number of login nodes (0: none).")
    instance_type: str = Field(
        DEFAULT_INSTANCE_TYPE, description="Login nodes' instance type (a small x86 CPU type; no GPU types)."
    )

    @field_validator("instance_type")
    @classmethod
    def _type(cls, v: str) -> str:
        problem = instance_type_problem(v, "a login node runs no jobs", DEFAULT_INSTANCE_TYPE)
        if problem:
            raise ValueError(problem)
        return v
