"""`slurm`: the default partition and its job time limit."""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from model.base import Strict

# Slurm partition and block names become Slurm identifiers and node features.
SLURM_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,31}$")


class SlurmConfig(Strict):
    partition: str = Field("train", description="Default Slurm partition name.")
    default_time_minutes: int = Field(
        60, ge=1, le=43200, description="Time limit of a job submitted without --time (partition DefaultTime)."
    )

    @field_validator("partition")
    @classmethod
    def _partition(cls, v: str) -> str:
        if not SLURM_NAME.match(v) or v.upper() == "DEFAULT":
            raise ValueError(
                f"'{v}' is not a valid Slurm partition name; use letters, digits, '-' or '_' (not 'DEFAULT')"
            )
        return v
