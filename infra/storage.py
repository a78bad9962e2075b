"""FSx for Lustre: the shared /fsx (images, data, checkpoints, Slurm state, status).

Placed in the cluster subnet with the nodes' security group (whose self rules cover
the Lustre ports, see infra/security.py). LZ4 compression is on: it costs the clients
nothing and cuts stored bytes for checkpoints and datasets. Lustre 2.15 is the version
the Ubuntu 24.04 client packages speak (FACTS 4.5).

EFA-enabled FSx is not used: it can only be set at creation, needs PERSISTENT_2 with a
metadata configuration, an EFA-capable Lustre client set up for EFA on every node, and
it then blocks later throughput changes (FACTS 4.2). Its benefit starts above
~10 GB/s of file traffic, beyond what this cluster's default sizes deliver; the nodes'
EFA bandwidth is kept for NCCL. Without EFA, PERSISTENT_2 needs no metadata
configuration (FSx then provisions metadata IOPS automatically).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from model.config import FsxConfig

LUSTRE_VERSION = "2.15"


def split_s3_uri(s3_uri: str) -> tuple[str, str]:
    """('bucket', 'prefix' without slashes) of an s3:// URI."""
    rest = s3_uri.removeprefix("s3://")
    bucket, _, prefix = rest.partition("/")
    return bucket, prefix.strip("/")


@dataclass
class FileSystemArgs:
    cluster_name: str
    fsx: FsxConfig
    subnet_id: pulumi.Input[str]
    security_group_id: pulumi.Input[str]
    tags: dict[str, str] = field(default_factory=dict)


class FileSystem(pulumi.ComponentResource):
    """Outputs: file_system_id, dns_name, mount_name."""

    file_system_id: pulumi.Output[str]
    dns_name: pulumi.Output[str]
    mount_name: pulumi.Output[str]

    def __init__(self, name: str, args: FileSystemArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-cluster:index:FileSystem", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        cfg = args.fsx
        persistent = cfg.deployment_type.startswith("PERSISTENT")
        repo = cfg.data_repository
        # PERSISTENT_1 and SCRATCH_2 link S3 through import/export paths on the file
        # system itself; PERSISTENT_2 only through a data repository association.
        legacy_link = repo is not None and cfg.deployment_type in ("PERSISTENT_1", "SCRATCH_2")
        fs = aws.fsx.LustreFileSystem(
            f"{name}-lustre",
            deployment_type=cfg.deployment_type,
            storage_type="SSD",
            storage_capacity=cfg.storage_capacity_gib,
            per_unit_storage_throughput=cfg.per_unit_storage_throughput if persistent else None,
            subnet_ids=args.subnet_id,  # a single subnet id in pulumi-aws 7.x (FACTS 6.5)
            security_group_ids=[args.security_group_id],
            data_compression_type="LZ4",
            file_system_type_version=LUSTRE_VERSION,
            import_path=repo.s3_uri if legacy_link else None,
            export_path=repo.s3_uri if legacy_link else None,
            auto_import_policy="NEW_CHANGED_DELETED" if legacy_link else None,
            tags={**args.tags, "Name": f"{args.cluster_name}-fsx"},
            opts=child,
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
                opts=child,
            )
        self.file_system_id = fs.id
        self.dns_name = fs.dns_name
        self.mount_name = fs.mount_name
        self.register_outputs({"file_system_id": fs.id, "dns_name": fs.dns_name, "mount_name": fs.mount_name})


# --- User-data payload -----------------------------------------------------------
# EC2 takes at most 16 KB of user data. When the rendered node files outgrow the inline
# budget, the renderer moves them into a tar.gz (`NodeFiles.s3_payload`) and the user
# data fetches it with the instance role (docs/node-contract.md). The program stores it
# in a private bucket of the stack, under a content-addressed key, so a new payload is a
# new object and the launch template version that names it never points at other bytes.

PAYLOAD_PREFIX = "payload/"


def payload_uri_template(bucket_name: str) -> str:
    """The `payload_uri` handed to the renderer; it fills in `{sha256}`."""
    return f"s3://{bucket_name}/{PAYLOAD_PREFIX}{{sha256}}.tar.gz"


def payload_key(sha256: str) -> str:
    return f"{PAYLOAD_PREFIX}{sha256}.tar.gz"


@dataclass
class PayloadBucketArgs:
    cluster_name: str
    tags: dict[str, str] = field(default_factory=dict)


class PayloadBucket(pulumi.ComponentResource):
    """Private bucket (all public access blocked; S3 encrypts at rest by default).

    Outputs: bucket_name, bucket_arn.
    """

    bucket_name: pulumi.Output[str]
    bucket_arn: pulumi.Output[str]

    def __init__(self, name: str, args: PayloadBucketArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-cluster:index:PayloadBucket", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        bucket = aws.s3.Bucket(
            f"{name}-payload", bucket_prefix=f"gpu-cluster-{args.cluster_name}-",
            force_destroy=True,  # only rendered payloads live here; `pulumi destroy` must not stall
            tags=args.tags, opts=child)
        aws.s3.BucketPublicAccessBlock(
            f"{name}-payload", bucket=bucket.id, block_public_acls=True, block_public_policy=True,
            ignore_public_acls=True, restrict_public_buckets=True, opts=child)
        self.bucket_name = bucket.bucket
        self.bucket_arn = bucket.arn
        self.register_outputs({"bucket_name": bucket.bucket, "bucket_arn": bucket.arn})


@dataclass
class PayloadObjectArgs:
    bucket_name: pulumi.Input[str]
    s3_payload: pulumi.Input  # Output[(sha256 hex, tar.gz bytes)] from NodeFiles.s3_payload
    tags: dict[str, str] = field(default_factory=dict)


class PayloadObject(pulumi.ComponentResource):
    """The payload object. Outputs: object_arn, key."""

    object_arn: pulumi.Output[str]
    key: pulumi.Output[str]

    def __init__(self, name: str, args: PayloadObjectArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-cluster:index:PayloadObject", name, None, opts)
        payload = pulumi.Output.from_input(args.s3_payload)
        key = payload.apply(lambda p: payload_key(p[0]))
        obj = aws.s3.BucketObjectv2(
            f"{name}-payload", bucket=args.bucket_name, key=key,
            content_base64=payload.apply(lambda p: base64.b64encode(p[1]).decode("ascii")),
            content_type="application/gzip", tags=args.tags,
            opts=pulumi.ResourceOptions(parent=self))
        # Built from the object's own outputs, so whatever uses them (the role policy, the
        # launch template's user data) waits for the upload.
        self.key = obj.key
        self.object_arn = pulumi.Output.all(obj.bucket, obj.key).apply(lambda v: f"arn:aws:s3:::{v[0]}/{v[1]}")
        self.register_outputs({"object_arn": self.object_arn, "key": obj.key})
