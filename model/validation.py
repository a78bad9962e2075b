"""`validation`: the first-boot validation job that gates the cluster (GO / NO-GO)."""

from __future__ import annotations

from pydantic import Field, field_validator

from model import aws_rules
from model.base import Strict


class ValidationConfig(Strict):
    enabled: bool = Field(True, description="Submit the first-boot validation job on the controller.")
    container_image: str = Field(
        "nvcr.io#nvidia/pytorch:26.08-py3",
        description="Training image for the in-container check: Enroot form `[USER@][REGISTRY#]IMAGE[:TAG]` (or `@DIGEST`), or an absolute .sqsh path ('' skips it).",
    )
    time_limit_minutes: int = Field(60, ge=5, le=720, description="Slurm time limit of the validation job.")
    baseline_margin: float = Field(
        0.10, gt=0, lt=1, allow_inf_nan=False, description="Drop vs baseline that turns a run NO-GO."
    )
    level_margin: float = Field(
        0.10,
        gt=0,
        lt=1,
        allow_inf_nan=False,
        description=(
            "With the network topology known: a level of pairs (sharing a layer-2 node, a top node, none) whose"
            " median all-reduce figure is more than this fraction below the same-leaf median is flagged in the"
            " report (docs/validation.md)."
        ),
    )
    wait_for_nodes_minutes: int = Field(
        30, ge=1, le=240, description="How long the controller waits for nodes to be idle."
    )
    join_timeout_minutes: int = Field(
        30,
        ge=5,
        le=240,
        description=(
            "Bound of the join gate, the shorter run on nodes that register into a running cluster (a new"
            " block, a replacement): single-node checks and a pair test against one healthy node in service,"
            " from submission (waiting for that partner included) to verdict; a newcomer not passed by then"
            " stays drained."
        ),
    )

    @field_validator("container_image")
    @classmethod
    def _image(cls, v: str) -> str:
        problem = aws_rules.container_image_problem(v)
        if problem:
            raise ValueError(problem)
        return v
