"""What a config must satisfy to be deployed, beyond being well-formed.

`parse_config` accepts configs the renderer and the local cluster use (no block dates,
no pinned image); `pulumi up` needs more: block dates for the schedule, a pinned image,
and no edit that would replace the file system. Pure: `now` and `region` come in.
"""

from __future__ import annotations

from datetime import datetime

from model.config import ClusterConfig
from model.fsx_identity import replacement_problems
from model.paths import ROOT
from model.schedule import schedule_problems


def image_problems(cfg: ClusterConfig, region: str) -> list[tuple[str, str]]:
    """A node replaced next month must boot the image the running nodes booted: with
    `resolve:ssm:` EC2 reads the parameter at each launch, and a newer DLAMI may carry a
    kernel the FSx Lustre client repository has no module for yet."""
    img = cfg.image
    if img.ami_id or img.allow_unpinned:
        return []
    return [
        (
            f"{ROOT}.image.ami_id",
            "required to deploy: pin the image so every node, including replacements, boots the same kernel; "
            f"`python3 -m ops pin --stack <stack> --image` resolves {img.ssm_parameter} in {region} and prints "
            "the image.ami_id line (or set image.allow_unpinned: true to boot whatever the parameter names at "
            "each launch)",
        )
    ]


def deploy_problems(cfg: ClusterConfig, now: datetime, region: str) -> list[tuple[str, str]]:
    return schedule_problems(cfg, now) + image_problems(cfg, region) + replacement_problems(cfg)
