"""Which edits replace the file system, and the guard that refuses them.

FSx for Lustre cannot change some settings in place: the provider replaces the file
system when any of these change ([TF-FSX] `ForceNew`): `subnet_ids`,
`security_group_ids`, `deployment_type`, `storage_type`, `file_system_type_version`,
`copy_tags_to_backups`, `import_path`/`export_path`, and a storage decrease (any
storage change on SCRATCH_1). A replacement is a new, empty /fsx: Slurm state,
checkpoints and baselines are gone. The security group is replaced (and with it FSx)
when its VPC or description changes, and every resource moves to a new URN when the
cluster is renamed, because logical names carry the cluster name.

The program cannot see what the live file system was created with (Pulumi state is not
readable from inside the program), so the stack file carries it: after the first
`pulumi up`, `fsx.pinned` gets a copy of the `fsx_identity` stack output. From then on
an edit of a pinned value is refused before any resource is declared, unless the stack
file says `fsx.allow_replace: true`. Without a pin, Pulumi's `protect` (on by default
for PERSISTENT types) still fails a preview that would delete the file system, with a
less specific message.
"""

from __future__ import annotations

from model.config import ClusterConfig
from model.fsx import FsxConfig, FsxIdentity
from model.paths import ROOT

LUSTRE_VERSION = "2.15"  # what the Ubuntu 24.04 Lustre client packages speak
STORAGE_TYPE = "SSD"
COPY_TAGS_TO_BACKUPS = True


def subnet_source(cfg: ClusterConfig) -> str:
    """The subnet FSx lives in: an existing id, or the one the stack creates (a new AZ
    or VPC CIDR means a new subnet)."""
    net = cfg.network
    return net.subnet_id or f"created:{net.availability_zone}:{net.vpc_cidr}"


def import_path(fsx: FsxConfig) -> str | None:
    """The S3 link set on the file system itself (PERSISTENT_1, SCRATCH_2); PERSISTENT_2
    links through a data repository association, which can change without replacement."""
    repo = fsx.data_repository
    if repo is not None and fsx.deployment_type in ("PERSISTENT_1", "SCRATCH_2"):
        return repo.s3_uri
    return None


def copy_tags_to_backups(fsx: FsxConfig) -> bool:
    """Whether the file system is created copying its tags to backups. SCRATCH types
    have no backups. FSx does not accept the flag on a file system created linked to a
    data repository [FSX-CREATEFS-LUSTRE], so a PERSISTENT_1 with an import path goes
    without. A PERSISTENT_2 keeps it even when linked: it is created before its data
    repository association, and the flag is fixed at creation while the association
    comes and goes in place, so linking or unlinking S3 must not change it (that would
    replace the file system). It does nothing while linked: FSx takes no backups then."""
    return COPY_TAGS_TO_BACKUPS and fsx.persistent and import_path(fsx) is None


def fsx_identity(cfg: ClusterConfig) -> FsxIdentity:
    """The values the file system would be created with from this config."""
    return FsxIdentity(
        cluster_name=cfg.name,
        deployment_type=cfg.fsx.deployment_type,
        storage_type=STORAGE_TYPE,
        file_system_type_version=LUSTRE_VERSION,
        subnet=subnet_source(cfg),
        storage_capacity_gib=cfg.fsx.storage_capacity_gib,
        copy_tags_to_backups=copy_tags_to_backups(cfg.fsx),
        s3_import_path=import_path(cfg.fsx),
    )


def _config_key(cfg: ClusterConfig, field: str) -> str:
    """The key an operator edits to change `field` (program constants: the pin itself)."""
    if field == "subnet":
        return "network.subnet_id" if cfg.network.subnet_id else "network"
    return {
        "cluster_name": "name",
        "deployment_type": "fsx.deployment_type",
        "storage_capacity_gib": "fsx.storage_capacity_gib",
        "s3_import_path": "fsx.data_repository",
    }.get(field, f"fsx.pinned.{field}")


def _replaces(field: str, old: object, new: object, deployment_type: str) -> bool:
    if field == "storage_capacity_gib":
        # Growing is done in place; shrinking is not possible, and SCRATCH_1 cannot
        # change its size at all [TF-FSX].
        return new < old or (deployment_type == "SCRATCH_1" and new != old)  # type: ignore[operator]
    return old != new


def replacement_problems(cfg: ClusterConfig) -> list[tuple[str, str]]:
    """`path: message` for every pinned value this config would change; none without a
    pin, or when `fsx.allow_replace` allows the change (which is refused when nothing
    changes, so it is not left on: it also turns protect off)."""
    pinned = cfg.fsx.pinned
    if pinned is None:
        return []
    now = fsx_identity(cfg)
    replaced = [
        f for f in FsxIdentity.model_fields if _replaces(f, getattr(pinned, f), getattr(now, f), now.deployment_type)
    ]
    if "s3_import_path" in replaced and "copy_tags_to_backups" in replaced:
        # Linking or unlinking an import path flips copy_tags_to_backups with it: one
        # edit (fsx.data_repository), one refusal, not a second one at the pin.
        replaced.remove("copy_tags_to_backups")
    if cfg.fsx.allow_replace:
        if replaced:
            return []
        # Left on after the replacement, it would keep protect off for good.
        return [
            (
                f"{ROOT}.fsx.allow_replace",
                "nothing pinned changes, so nothing is replaced; remove it (it also "
                "turns Pulumi protect off), and re-pin fsx.pinned if you just replaced "
                "the file system",
            )
        ]
    problems = []
    for field in replaced:
        old, new = getattr(pinned, field), getattr(now, field)
        key = _config_key(cfg, field)
        problems.append(
            (
                f"{ROOT}.{key}",
                f"the file system was created with {field} {old!r} (fsx.pinned) and this config gives {new!r}; "
                "FSx cannot change that in place, so `pulumi up` would replace the file system and lose /fsx "
                "(Slurm state, checkpoints, baselines). Revert the edit; or take a backup, set "
                "fsx.allow_replace: true for one `pulumi up`, then copy the new `fsx_identity` stack output "
                "into fsx.pinned and remove allow_replace",
            )
        )
    return problems
