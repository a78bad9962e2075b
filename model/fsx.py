"""`fsx`: the FSx for Lustre file system mounted at /fsx, its backups and its S3 link."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from model import aws_rules
from model.base import Strict
from model.paths import loc_to_path

# FSx automatic backup retention, days (0 disables them) [BOTO-FSX].
MAX_BACKUP_RETENTION_DAYS = 90
# FSx for Lustre storage increments, GiB [BOTO-FSX].
_FSX_INCREMENT = {"SCRATCH_1": 3600, "SCRATCH_2": 2400, "PERSISTENT_1": 2400, "PERSISTENT_2": 2400}
# Per-unit storage throughput, MB/s/TiB, SSD storage [BOTO-FSX].
_FSX_THROUGHPUT = {"PERSISTENT_1": (50, 100, 200), "PERSISTENT_2": (125, 250, 500, 1000)}

FsxDeployment = Literal["SCRATCH_1", "SCRATCH_2", "PERSISTENT_1", "PERSISTENT_2"]


class DataRepository(Strict):
    s3_uri: str = Field(description="s3://bucket[/prefix] linked to the file system.")
    file_system_path: str = Field("/data", description="Path inside /fsx the bucket appears at.")

    @field_validator("s3_uri")
    @classmethod
    def _s3(cls, v: str) -> str:
        m = aws_rules.S3_URI.match(v)
        if not m:
            raise ValueError(f"'{v}' is not an S3 URI; use 's3://bucket-name/prefix'")
        problem = aws_rules.s3_bucket_problem(m.group(1))
        if problem:
            raise ValueError(
                f"{problem}, so FSx cannot link '{v}'; use the name of an existing bucket: 's3://bucket-name/prefix'"
            )
        return v

    @field_validator("file_system_path")
    @classmethod
    def _path(cls, v: str) -> str:
        dots = aws_rules.dot_segment_problem(v)
        if dots:  # '/data/../.gpu-cluster' passes the prefix check below and is our state directory
            raise ValueError(dots)
        if not re.match(r"^/[A-Za-z0-9._/-]+$", v) or v == "/" or v.startswith("/.gpu-cluster"):
            raise ValueError(
                f"'{v}' is not a usable path; use an absolute path such as '/data' (not '/' or '/.gpu-cluster')"
            )
        return v


class FsxIdentity(Strict):
    """What the file system was created with: every value whose change replaces it.

    The program exports the current values as the `fsx_identity` stack output; pinning
    them here (`fsx.pinned`) after the first `pulumi up` makes a later edit of any of
    them fail before anything is touched (model/fsx_identity.py).
    """

    cluster_name: str = Field(
        description="Cluster name (in the logical names of the file system and its security group)."
    )
    deployment_type: FsxDeployment = Field(description="FSx deployment type.")
    storage_type: str = Field(description="FSx storage type.")
    file_system_type_version: str = Field(description="Lustre version.")
    subnet: str = Field(description="Subnet id, or 'created:<az>:<vpc_cidr>' for the subnet the stack creates.")
    storage_capacity_gib: int = Field(description="Storage capacity, GiB (may grow, never shrink).")
    copy_tags_to_backups: bool = Field(description="Set only at creation.")
    s3_import_path: str | None = Field(None, description="Import/export path (S3 link of PERSISTENT_1, SCRATCH_2).")


class FsxConfig(Strict):
    deployment_type: FsxDeployment = Field("PERSISTENT_2", description="FSx for Lustre deployment type.")
    storage_capacity_gib: int = Field(1200, description="Storage capacity, GiB (1200, 2400, then type's increment).")
    per_unit_storage_throughput: int | None = Field(250, description="MB/s/TiB; PERSISTENT types only.")
    data_repository: DataRepository | None = Field(
        None,
        description="Optional S3 data repository; FSx then takes no backups (needs backup_retention_days: 0, allow_no_backups: true).",
    )
    protect: bool | None = Field(
        None,
        description="Pulumi `protect`: a preview that would delete or replace the file system fails (default: true for PERSISTENT types).",
    )
    backup_retention_days: int = Field(
        7,
        ge=0,
        le=MAX_BACKUP_RETENTION_DAYS,
        description="Automatic daily backups kept, days (PERSISTENT types not linked to S3; 0 needs allow_no_backups).",
    )
    allow_no_backups: bool = Field(
        False,
        description="Opt-out that lets backup_retention_days be 0 (required with data_repository: FSx backs up no file system linked to S3).",
    )
    allow_replace: bool = Field(
        False, description="Let an edit of a pinned value replace the file system (its data is lost)."
    )
    pinned: FsxIdentity | None = Field(
        None, description="Values the file system was created with (copy of the `fsx_identity` stack output)."
    )

    @property
    def persistent(self) -> bool:
        return self.deployment_type.startswith("PERSISTENT")

    @property
    def protected(self) -> bool:
        return self.persistent if self.protect is None else self.protect

    @property
    def backed_up(self) -> bool:
        """FSx backs up only persistent file systems that are not linked to S3
        [FSX-SCRATCH] [FSX-CREATEBACKUP]; a linked one relies on its bucket."""
        return self.persistent and self.data_repository is None


def _throughput_problem(fsx: FsxConfig) -> tuple[str, str] | None:
    dt, tput = fsx.deployment_type, fsx.per_unit_storage_throughput
    allowed = _FSX_THROUGHPUT.get(dt)
    path = loc_to_path(("fsx", "per_unit_storage_throughput"))
    tput_set = "per_unit_storage_throughput" in fsx.model_fields_set
    if allowed is None:
        if tput is not None and tput_set:
            return (path, f"{dt} has no per-unit throughput (only PERSISTENT types take one); remove it")
        return None
    values = ", ".join(map(str, allowed))
    if tput is None:
        return (path, f"required for {dt} (null given); use one of {values} MB/s/TiB")
    if tput in allowed:
        return None
    if tput_set:
        return (path, f"{tput} MB/s/TiB is not allowed for {dt}; use one of {values}")
    # The default only fails because of the deployment type the user chose.
    return (
        loc_to_path(("fsx", "deployment_type")),
        f"{dt} does not take the default per_unit_storage_throughput of {tput} MB/s/TiB; "
        f"add fsx.per_unit_storage_throughput: one of {values}",
    )


def fsx_problems(fsx: FsxConfig) -> list[tuple[str, str]]:
    """Storage size and throughput the deployment type takes, and its S3 link."""
    problems = []
    dt, cap_gib = fsx.deployment_type, fsx.storage_capacity_gib
    inc = _FSX_INCREMENT[dt]
    if cap_gib < 1200 or (cap_gib not in (1200, 2400) and cap_gib % inc != 0):
        problems.append(
            (
                loc_to_path(("fsx", "storage_capacity_gib")),
                f"{cap_gib} GiB is not allowed for {dt}; use 1200, 2400 or a multiple of {inc}",
            )
        )
    throughput = _throughput_problem(fsx)
    if throughput is not None:
        problems.append(throughput)
    if fsx.data_repository is not None and dt.startswith("SCRATCH_1"):
        problems.append(
            (
                loc_to_path(("fsx", "data_repository")),
                "SCRATCH_1 data repositories use import paths we do not manage; use PERSISTENT_2 or SCRATCH_2",
            )
        )
    return problems


def _persistent_backup_problem(fsx: FsxConfig) -> tuple[str, str] | None:
    linked = fsx.data_repository is not None
    if linked and fsx.backup_retention_days > 0:
        # AWS takes no automatic, user or final backup of a linked file system
        # [FSX-CREATEBACKUP]: asking for them fails at AWS after FSx exists.
        default = "" if "backup_retention_days" in fsx.model_fields_set else " (the default)"
        return (
            loc_to_path(("fsx", "backup_retention_days")),
            f"{fsx.backup_retention_days} days{default} asks for backups, but FSx backs up no file system "
            "linked to S3 (fsx.data_repository is set), so AWS would fail its backups, or the create or "
            "delete that asks for them; the bucket is the durable copy: set backup_retention_days: 0 and allow_no_backups: true, "
            "or remove data_repository to keep FSx backups",
        )
    if fsx.backup_retention_days == 0 and not fsx.allow_no_backups:
        return (
            loc_to_path(("fsx", "backup_retention_days")),
            "0 is right for a file system linked to S3 (FSx backs those up not at all; the bucket is the "
            "durable copy): add fsx.allow_no_backups: true to accept that"
            if linked
            else "0 turns automatic backups off: a deleted or replaced file system cannot be restored; use 1-90, or add fsx.allow_no_backups: true to accept that",
        )
    if fsx.allow_no_backups and fsx.backup_retention_days > 0:
        return (
            loc_to_path(("fsx", "allow_no_backups")),
            f"backups are on ({fsx.backup_retention_days} days); remove allow_no_backups",
        )
    return None


def fsx_backup_problems(fsx: FsxConfig) -> list[tuple[str, str]]:
    """Backups only where FSx takes them: persistent file systems not linked to S3."""
    if fsx.persistent:
        problem = _persistent_backup_problem(fsx)
        return [] if problem is None else [problem]
    return [
        (
            loc_to_path(("fsx", key)),
            f"{fsx.deployment_type} file systems have no backups (FSx backs up PERSISTENT types only); remove it, or use PERSISTENT_2",
        )
        for key in ("backup_retention_days", "allow_no_backups")
        if key in fsx.model_fields_set
    ]
