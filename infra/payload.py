"""The user-data payload: a private bucket and the content-addressed node-files object.

EC2 takes at most 16 KB of user data [EC2-UD]; the node files are about twice that
gzipped, so the renderer packs everything except cluster.env and the fetcher into one
tar.gz (`NodeFiles.s3_payload`) and the user data fetches it with the instance role
(docs/node-contract.md). The program stores it in a private bucket of the stack under
its sha256, so a new payload is a new object and the launch template version that
names it never points at other bytes.

Beside it, one object under a fixed key (`BlockEndsObject`, model/block_ends.py) holds
each declared block's current end: updated in place by every `pulumi up`, so running
nodes learn an extended block's new end without new tags or a restart.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from infra.component import Component
from model.block_ends import BLOCK_ENDS_KEY
from model.cluster_tags import object_tags

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


class PayloadBucket(Component):
    """Private bucket (all public access blocked; S3 encrypts at rest by default).

    Outputs: bucket_name, bucket_arn.
    """

    TYPE = "gpu-cluster:index:PayloadBucket"
    bucket_name: pulumi.Output[str]
    bucket_arn: pulumi.Output[str]

    def __init__(self, name: str, args: PayloadBucketArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(name, opts)
        bucket = aws.s3.Bucket(
            f"{name}-payload",
            bucket_prefix=f"gpu-cluster-{args.cluster_name}-",
            force_destroy=True,  # only rendered payloads live here; `pulumi destroy` must not stall
            tags=args.tags,
            opts=self.child,
        )
        aws.s3.BucketPublicAccessBlock(
            f"{name}-payload",
            bucket=bucket.id,
            block_public_acls=True,
            block_public_policy=True,
            ignore_public_acls=True,
            restrict_public_buckets=True,
            opts=self.child,
        )
        self.bucket_name = bucket.bucket
        self.bucket_arn = bucket.arn
        self.register_outputs({"bucket_name": bucket.bucket, "bucket_arn": bucket.arn})


@dataclass
class PayloadObjectArgs:
    bucket_name: pulumi.Input[str]
    s3_payload: pulumi.Input  # Output[(sha256 hex, tar.gz bytes)] from NodeFiles.s3_payload
    tags: dict[str, str] = field(default_factory=dict)


class PayloadObject(Component):
    """The payload object. Outputs: object_arn, key."""

    TYPE = "gpu-cluster:index:PayloadObject"
    object_arn: pulumi.Output[str]
    key: pulumi.Output[str]

    def __init__(self, name: str, args: PayloadObjectArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(name, opts)
        payload = pulumi.Output.from_input(args.s3_payload)
        key = payload.apply(lambda p: payload_key(p[0]))
        obj = aws.s3.BucketObjectv2(
            f"{name}-payload",
            bucket=args.bucket_name,
            key=key,
            content_base64=payload.apply(lambda p: base64.b64encode(p[1]).decode("ascii")),
            content_type="application/gzip",
            # S3 refuses an object with more than 10 tags [S3-OBJ-TAGS]; the bucket
            # above carries them all.
            tags=object_tags(args.tags),
            opts=self.child,
        )
        # Built from the object's own outputs, so whatever uses them (the role policy, the
        # launch template's user data) waits for the upload.
        self.key = obj.key
        self.object_arn = pulumi.Output.all(obj.bucket, obj.key).apply(lambda v: f"arn:aws:s3:::{v[0]}/{v[1]}")
        self.register_outputs({"object_arn": self.object_arn, "key": obj.key})


@dataclass
class BlockEndsObjectArgs:
    bucket_name: pulumi.Input[str]
    document: str  # model.block_ends.block_ends_document(cfg): byte-stable JSON
    tags: dict[str, str] = field(default_factory=dict)


class BlockEndsObject(Component):
    """The published block ends (model/block_ends.py). Outputs: object_arn, key.

    The key never changes, so an extension is an in-place update of this object (the
    engine diffs `content` only), never a replacement the nodes could miss.
    """

    TYPE = "gpu-cluster:index:BlockEndsObject"
    object_arn: pulumi.Output[str]
    key: pulumi.Output[str]

    def __init__(self, name: str, args: BlockEndsObjectArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(name, opts)
        obj = aws.s3.BucketObjectv2(
            f"{name}-block-ends",
            bucket=args.bucket_name,
            key=BLOCK_ENDS_KEY,
            content=args.document,
            content_type="application/json",
            tags=args.tags,
            opts=self.child,
        )
        self.key = obj.key
        self.object_arn = pulumi.Output.all(obj.bucket, obj.key).apply(lambda v: f"arn:aws:s3:::{v[0]}/{v[1]}")
        self.register_outputs({"object_arn": self.object_arn, "key": obj.key})
