"""`image`: the one AMI every node boots, pinned or read from an SSM parameter."""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from model.base import Strict, aws_id
from model.paths import loc_to_path

DLAMI_SSM_PARAMETER = "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-24.04/latest/ami-id"
# Ubuntu 22.04 ships Slurm 21.08, which has no dynamic nodes (`slurmd -Z` came in
# 22.05), and cannot load Enroot's AppArmor profile: every node would fail to join.
UNSUPPORTED_UBUNTU = re.compile(r"ubuntu[-_ ]?22[.-]04", re.IGNORECASE)


class ImageConfig(Strict):
    ami_id: str | None = Field(
        None, description="Pinned AMI id every node boots (required to deploy unless allow_unpinned)."
    )
    ssm_parameter: str = Field(DLAMI_SSM_PARAMETER, description="Public SSM parameter the pinned AMI id was read from.")
    allow_unpinned: bool = Field(
        False, description="Boot whatever AMI ssm_parameter names at each launch (replacements may get another kernel)."
    )

    @field_validator("ami_id")
    @classmethod
    def _ami(cls, v: str | None) -> str | None:
        return (
            v
            if v is None
            else aws_id("ami", v, "an AMI id", "use 'ami-0123...' or omit it to use the DLAMI SSM parameter")
        )

    @field_validator("ssm_parameter")
    @classmethod
    def _ssm(cls, v: str) -> str:
        if not v.startswith("/"):
            raise ValueError(f"'{v}' is not an SSM parameter path; it must start with '/'")
        if UNSUPPORTED_UBUNTU.search(v):
            raise ValueError(
                f"'{v}' is an Ubuntu 22.04 image: its Slurm 21.08 has no dynamic nodes (slurmd -Z came in 22.05) and its AppArmor cannot load Enroot's profile; use the Ubuntu 24.04 DLAMI parameter '{DLAMI_SSM_PARAMETER}'"
            )
        return v


def image_pin_problems(image: ImageConfig) -> list[tuple[str, str]]:
    """A pinned image and the opt-out of pinning exclude each other."""
    if image.ami_id and image.allow_unpinned:
        return [
            (
                loc_to_path(("image", "allow_unpinned")),
                "image.ami_id pins the image already; remove allow_unpinned or ami_id",
            )
        ]
    return []
