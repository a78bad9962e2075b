"""Payload components (private bucket, content-addressed object) and the one render call."""

from __future__ import annotations

import base64

import pulumi

from infra.cluster import render_node_files
from infra.payload import PayloadBucket, PayloadBucketArgs, PayloadObject, PayloadObjectArgs
from model.config import parse_config
from tests.support.mocks import run_component, valid_raw
from userdata.render import FsxEndpoint, render_userdata

TAGS = {"GpuClusterName": "c1"}


def test_payload_bucket_is_private():
    run = run_component(lambda: PayloadBucket("c1", PayloadBucketArgs(cluster_name="c1", tags=TAGS)).bucket_name)
    assert run.custom() == [
        ("aws:s3/bucket:Bucket", "c1-payload"),
        ("aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock", "c1-payload"),
    ]
    bucket = run.inputs("aws:s3/bucket:Bucket", "c1-payload")
    assert bucket == {"bucketPrefix": "gpu-cluster-c1-", "forceDestroy": True, "tags": TAGS}
    pab = run.inputs("aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock", "c1-payload")
    assert pab == {
        "bucket": run.value,
        "blockPublicAcls": True,
        "blockPublicPolicy": True,
        "ignorePublicAcls": True,
        "restrictPublicBuckets": True,
    }
    for typ, name in run.custom():
        assert run.parent_type(typ, name) == "gpu-cluster:index:PayloadBucket"


def test_payload_object_is_content_addressed():
    def program():
        obj = PayloadObject("c1", PayloadObjectArgs(bucket_name="bucket-1", s3_payload=("ab" * 32, b"\x1f\x8bdata")))
        return pulumi.Output.all(obj.object_arn, obj.key)

    run = run_component(program)
    obj = run.inputs("aws:s3/bucketObjectv2:BucketObjectv2", "c1-payload")
    assert obj["bucket"] == "bucket-1"
    assert obj["key"] == f"payload/{'ab' * 32}.tar.gz"
    assert base64.b64decode(obj["contentBase64"]) == b"\x1f\x8bdata"
    assert obj["contentType"] == "application/gzip"
    assert run.value == [f"arn:aws:s3:::bucket-1/payload/{'ab' * 32}.tar.gz", f"payload/{'ab' * 32}.tar.gz"]
    assert run.parent_type("aws:s3/bucketObjectv2:BucketObjectv2", "c1-payload") == "gpu-cluster:index:PayloadObject"


def test_node_files_rendered_once_from_fsx_endpoint_and_payload_bucket():
    cfg = parse_config(valid_raw())
    run = run_component(
        lambda: render_node_files(
            cfg, cfg.spec, pulumi.Output.from_input("fs-1.fsx"), "mnt1", pulumi.Output.from_input("bucket-1")
        )
    )
    want = render_userdata(
        cfg,
        cfg.spec,
        FsxEndpoint("fs-1.fsx", "mnt1"),
        "s3://bucket-1/payload/{sha256}.tar.gz",
        block_ends_uri="s3://bucket-1/blocks/ends.json",  # a stack with blocks: model/block_ends.py
    )
    assert run.value.user_data == want.user_data
    assert run.value.s3_payload == want.s3_payload


def test_payload_object_carries_at_most_ten_tags():
    """S3 takes at most 10 tags per object [S3-OBJ-TAGS]; the config accepts 44 user tags
    (50 minus the program's). The object gets GpuClusterName, then the user's tags in key
    order until 10; the bucket keeps them all."""
    from model.cluster_tags import MAX_OBJECT_TAGS
    from tests.support.mocks import run_program

    raw = valid_raw()
    raw["tags"] = {f"team-{i:02d}": f"v{i}" for i in range(44)}
    run = run_program(raw)
    objects = run.of_type("aws:s3/bucketObjectv2:BucketObjectv2")
    # Every object the program writes (the payload, the published block ends) is within S3's limit.
    assert objects and all(len(o["inputs"].get("tags") or {}) <= 10 for o in objects)
    (obj,) = [o for o in objects if o["inputs"]["key"].startswith("payload/")]
    tags = obj["inputs"]["tags"]
    assert len(tags) == MAX_OBJECT_TAGS == 10
    assert sorted(tags) == ["GpuClusterName", *(f"team-{i:02d}" for i in range(9))]
    assert tags["GpuClusterName"] == "t1"
    (bucket,) = run.of_type("aws:s3/bucket:Bucket")
    assert len(bucket["inputs"]["tags"]) == 45


def test_object_tags_keeps_small_sets_whole():
    from model.cluster_tags import object_tags

    tags = {"team": "ml", "GpuClusterName": "c1", "cost-center": "42"}
    assert object_tags(tags) == {"GpuClusterName": "c1", "cost-center": "42", "team": "ml"}
    assert list(object_tags(tags)) == ["GpuClusterName", "cost-center", "team"]
