"""FSx for Lustre: the shared /fsx (images, data, checkpoints, Slurm state, status).

Placed in the cluster subnet with the nodes' security group (whose self rules cover
the Lustre ports, see infra/security.py), and created only after those rules: FSx
refuses creation while port 988 is closed [FSX-SG-FAIL], and a dependency on the group
alone lets the engine create the file system and the rules at the same moment. LZ4 compression is on: it costs the clients
nothing and cuts stored bytes for checkpoints and datasets. Lustre 2.15 is the version
the Ubuntu 24.04 client packages speak [FSX-CLIENT].

EFA-enabled FSx is not used: it can only be set at creation, needs PERSISTENT_2 with a
metadata configuration, an EFA-capable Lustre client set up for EFA on every node, and
it then blocks later throughput changes [FSX-EFA]. Its benefit starts above
~10 GB/s of file traffic, beyond what this cluster's default sizes deliver; the nodes'
EFA bandwidth is kept for NCCL. Without EFA, PERSISTENT_2 needs no metadata
configuration (FSx then provisions metadata IOPS automatically).

Data safety (PERSISTENT types): Pulumi `protect` by default, so a preview that would
delete or replace the file system fails (`fsx.protect: false` opts out); automatic daily
backups kept `fsx.backup_retention_days` (default 7; 0 only with
`fsx.allow_no_backups: true`); a final backup when the file system is deleted (the
provider skips it unless told otherwise [TF-FSX]); tags copied to backups so a backup
says which cluster it belongs to. SCRATCH types have no backups at all [FSX-SCRATCH]:
no retention, no final backup (FSx would refuse the delete), and no protect by default.
A PERSISTENT file system linked to S3 (`fsx.data_repository`) takes no backups either
[FSX-CREATEBACKUP]: the config refuses a retention for it, and it skips the final
backup FSx cannot take of it; the bucket is the durable copy, named in the
`GpuClusterDataRepository` tag. It stays protected.
Which edits replace the file system, and how they are refused: model/fsx_identity.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from infra.component import Component
from model import tags as node_tags
from model.fsx import FsxConfig
from model.fsx_identity import LUSTRE_VERSION, STORAGE_TYPE, copy_tags_to_backups, import_path

# UTC, HH:MM: 03:00 is outside the 11:30 UTC block changes and, for most regions, outside
# working hours; the backup window is 30 minutes long.
DAILY_BACKUP_START = "03:00"


@dataclass
class FileSystemArgs:
    cluster_name: str
    fsx: FsxConfig
    subnet_id: pulumi.Input[str]
    security_group_id: pulumi.Input[str]
    tags: dict[str, str] = field(default_factory=dict)
    # The security-group rules that open the Lustre ports (NodeSecurityGroup.self_rules).
    port_rules: Sequence[pulumi.Resource] = ()


class FileSystem(Component):
    """Outputs: file_system_id, dns_name, mount_name."""

    TYPE = "gpu-cluster:index:FileSystem"
    file_system_id: pulumi.Output[str]
    dns_name: pulumi.Output[str]
    mount_name: pulumi.Output[str]

    def __init__(self, name: str, args: FileSystemArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(name, opts)
        cfg = args.fsx
        persistent = cfg.persistent
        # allow_replace is the stack file's explicit yes to losing /fsx: it lifts the
        # pin check (model/fsx_identity.py) and protect for that `pulumi up`.
        self.protected = cfg.protected and not cfg.allow_replace
        repo = cfg.data_repository
        # PERSISTENT_1 and SCRATCH_2 link S3 through import/export paths on the file
        # system itself; PERSISTENT_2 only through a data repository association.
        s3_path = import_path(cfg)
        # 0 rather than None on a linked PERSISTENT type: an explicit 0 turns off
        # backups an earlier, unlinked config asked for [FSX-CREATEFS-LUSTRE]; None would
        # leave them as they are. The config refuses anything else for it.
        retention = (cfg.backup_retention_days if cfg.backed_up else 0) if persistent else None
        tags = {**args.tags, "Name": f"{args.cluster_name}-fsx"}
        if repo is not None:
            tags[node_tags.DATA_REPOSITORY] = "s3://" + repo.s3_uri.removeprefix("s3://").split("/")[0]
        fs = aws.fsx.LustreFileSystem(
            f"{name}-lustre",
            deployment_type=cfg.deployment_type,
            storage_type=STORAGE_TYPE,
            storage_capacity=cfg.storage_capacity_gib,
            per_unit_storage_throughput=cfg.per_unit_storage_throughput if persistent else None,
            subnet_ids=args.subnet_id,  # a single subnet id in pulumi-aws 7.x [PA-SDK]
            security_group_ids=[args.security_group_id],
            data_compression_type="LZ4",
            file_system_type_version=LUSTRE_VERSION,
            import_path=s3_path,
            export_path=s3_path,
            auto_import_policy="NEW_CHANGED_DELETED" if s3_path else None,
            automatic_backup_retention_days=retention,
            daily_automatic_backup_start_time=DAILY_BACKUP_START if retention else None,
            copy_tags_to_backups=copy_tags_to_backups(cfg) or None,
            # FSx takes a final backup only of a persistent file system not linked to
            # S3; backups cannot be enabled on a linked one [FSX-DELETE-API].
            skip_final_backup=not cfg.backed_up,
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self, protect=self.protected, depends_on=list(args.port_rules)),
        )
        if repo is not None and cfg.deployment_type == "PERSISTENT_2":
            events = ["NEW", "CHANGED", "DELETED"]
            aws.fsx.DataRepositoryAssociation(
                f"{name}-s3",
                file_system_id=fs.id,
                data_repository_path=repo.s3_uri,
                file_system_path=repo.file_system_path,
                batch_import_meta_data_on_create=True,
                s3=aws.fsx.DataRepositoryAssociationS3Args(
                    auto_import_policy=aws.fsx.DataRepositoryAssociationS3AutoImportPolicyArgs(events=events),
                    auto_export_policy=aws.fsx.DataRepositoryAssociationS3AutoExportPolicyArgs(events=events),
                ),
                tags=args.tags,
                opts=self.child,
            )
        self.file_system_id = fs.id
        self.dns_name = fs.dns_name
        self.mount_name = fs.mount_name
        self.register_outputs({"file_system_id": fs.id, "dns_name": fs.dns_name, "mount_name": fs.mount_name})
