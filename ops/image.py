"""The node image: resolve the DLAMI parameter to an AMI id, describe it, judge it.

Shared by `pin --image` (what to pin) and `preflight` (is the pinned id usable here).
The rule is the program's own: an Ubuntu 22.04 image is refused because its Slurm 21.08
has no dynamic nodes (`slurmd -Z` came in 22.05), the same regex `model/image.py`
applies to the SSM parameter and the program applies to the pinned AMI's name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from model import preflight
from model.pins import CLOUDWATCH_AGENT_VERSION, PRODUCT, SLURM_SERIES
from nodeside import bake
from ops.aws import OpsError, call, error_code

# Every catalog instance type (p4d, p4de, p5, p5e, p5en, p6-b200) has x86_64 CPUs;
# an arm64 image does not boot on them.

# The README's check: FSx's Lustre client repository builds a module per kernel, and
# trails new kernels; a node whose kernel has none cannot mount /fsx [FSX-CLIENT].
LUSTRE_CHECK = 'uname -r; apt-cache policy "lustre-client-modules-$(uname -r)"'


@dataclass(frozen=True)
class Image:
    ami_id: str
    name: str
    description: str
    creation_date: str
    architecture: str
    deprecation_time: str | None = None
    tags: dict[str, str] = field(default_factory=dict)


def resolve_parameter(ssm: Any, parameter: str) -> str:
    """The AMI id the public SSM parameter names today."""
    reply = call(ssm, "get_parameter", f"reading SSM parameter {parameter}", Name=parameter)
    value = str(reply["Parameter"]["Value"])
    if not value.startswith("ami-"):
        raise OpsError(
            f"SSM parameter {parameter} holds {value!r}, not an AMI id; set image.ssm_parameter to a "
            "parameter that names an AMI"
        )
    return value


def describe_image(ec2: Any, ami_id: str) -> Image | None:
    """The image, or None when EC2 does not know it in this region. Deprecated images
    still launch by id, so they are included."""
    try:
        images = call(ec2, "describe_images", f"describing image {ami_id}", ImageIds=[ami_id], IncludeDeprecated=True)[
            "Images"
        ]
    except OpsError as err:
        # EC2 answers an unknown id with an error, not an empty list.
        if isinstance(err.__cause__, ClientError) and error_code(err.__cause__) == "InvalidAMIID.NotFound":
            return None
        raise
    if not images:
        return None
    img = images[0]
    return Image(
        ami_id=img["ImageId"],
        name=img.get("Name", ""),
        description=img.get("Description", ""),
        creation_date=img.get("CreationDate", ""),
        architecture=img.get("Architecture", ""),
        deprecation_time=img.get("DeprecationTime"),
        tags={t["Key"]: t.get("Value", "") for t in img.get("Tags", [])},
    )


def stack_pins() -> dict[str, str]:
    """The pins every node of this repository checks (cluster.env), as a bake records them."""
    return {
        "SLURM_SERIES": SLURM_SERIES,
        "ENROOT_VERSION": PRODUCT.enroot_version,
        "PYXIS_VERSION": PRODUCT.pyxis_version,
        "DOWNLOAD_SHA256": PRODUCT.cluster_env(),
        "CLOUDWATCH_AGENT_VERSION": CLOUDWATCH_AGENT_VERSION,
    }


def baked_record(img: Image) -> dict | None:
    """What the image's tags say it was baked with (nodeside/bake.py), None: not baked."""
    return bake.recorded_from_tags(img.tags)


def manifest_problem(img: Image) -> tuple[preflight.Severity, str] | None:
    """(severity, message) when the image's manifest tags disagree with the stack's pins
    (an error: its nodes' step 20 refuses them) or it has none (a warning: a plain image
    installs everything at boot)."""
    recorded = baked_record(img)
    if recorded is None:
        return (
            "warning",
            f"{img.ami_id} is not a baked image (no GpuClusterImageManifest tag): every node installs Slurm, munge, "
            "Enroot, Pyxis and the Lustre client at boot, minutes each through the NAT; bake one with "
            "`python3 -m ops bake --stack <stack> --bucket <bucket>`",
        )
    problems = bake.pin_problems(recorded, stack_pins())
    if problems:
        return (
            "error",
            f"{img.ami_id} was baked for other pins ({'; '.join(problems)}): step 20 on its nodes refuses it; "
            "bake a new image (`python3 -m ops bake`) and pin it",
        )
    return None


def image_refusal(img: Image) -> str | None:
    """Why the program would refuse this image, or None."""
    return preflight.image_refusal(img.ami_id, img.name, img.description, img.architecture)
