"""`root_volume`: the encrypted gp3 root volume of every node."""

from __future__ import annotations

from pydantic import Field

from model import aws_rules
from model.base import Strict
from model.paths import loc_to_path


class RootVolumeConfig(Strict):
    size_gib: int = Field(512, ge=100, le=16384, description="gp3 root volume size, GiB (DLAMI needs >= 100).")
    iops: int = Field(3000, ge=3000, le=16000, description="gp3 IOPS.")
    throughput_mibps: int = Field(250, ge=125, le=1000, description="gp3 throughput, MiB/s.")


def root_volume_problems(rv: RootVolumeConfig) -> list[tuple[str, str]]:
    """gp3 throughput is bounded by the provisioned IOPS [EBS-GP3]."""
    need = aws_rules.gp3_min_iops(rv.throughput_mibps)
    if rv.iops >= need:
        return []
    most = int(rv.iops * aws_rules.GP3_MIBPS_PER_IOPS)
    iops_note = "" if "iops" in rv.model_fields_set else " (the default)"
    # Name the key the user wrote: throughput unless only iops was set.
    key = "iops" if "throughput_mibps" not in rv.model_fields_set else "throughput_mibps"
    return [
        (
            loc_to_path(("root_volume", key)),
            f"{rv.throughput_mibps} MiB/s of gp3 throughput needs at least {need} IOPS (gp3 allows "
            f"{aws_rules.GP3_MIBPS_PER_IOPS} MiB/s per provisioned IOPS) but root_volume.iops is "
            f"{rv.iops}{iops_note}; raise root_volume.iops to {need} or lower root_volume.throughput_mibps to {most}",
        )
    ]
