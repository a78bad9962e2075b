"""The block ends the program publishes beside the payload (model/block_ends.py, D3):
an in-place object under a fixed key, byte-stable content, readable by the node role
(exactly that key), and named to the nodes in cluster.env."""

from __future__ import annotations

import json

import pulumi

from infra.iam import object_read_policy
from infra.payload import BlockEndsObject, BlockEndsObjectArgs
from model.block_ends import BLOCK_ENDS_KEY, block_ends_document, block_ends_uri
from model.config import parse_config
from tests.support.mocks import run_component, run_program, valid_raw

OBJECT = "aws:s3/bucketObjectv2:BucketObjectv2"
POLICY = "aws:iam/rolePolicy:RolePolicy"


def two_blocks() -> dict:
    raw = valid_raw()
    raw["capacity"]["nodes"] = 4
    raw["capacity"]["capacity_blocks"].append(
        {
            "name": "b",
            "reservation_id": "cr-0fedcba9876543210",
            "instance_count": 2,
            "availability_zone": "us-east-2b",
            "start": "2026-12-08T11:30:00Z",
            "end": "2026-12-22T11:30:00Z",
        }
    )
    raw["controller"] = {"block": "a"}  # two blocks name the controller's host block
    return raw


def test_the_document_is_byte_stable_and_holds_each_blocks_end_and_id():
    text = block_ends_document(parse_config(two_blocks()))
    assert text == (
        "{\n"
        '  "blocks": {\n'
        '    "a": {\n'
        '      "end": "2026-12-08T11:30:00Z",\n'
        '      "reservation_id": "cr-0123456789abcdef0"\n'
        "    },\n"
        '    "b": {\n'
        '      "end": "2026-12-22T11:30:00Z",\n'
        '      "reservation_id": "cr-0fedcba9876543210"\n'
        "    }\n"
        "  },\n"
        '  "cluster": "t1",\n'
        '  "format": 1\n'
        "}\n"
    )
    # An extension changes only that block's end.
    raw = two_blocks()
    raw["capacity"]["capacity_blocks"][0]["end"] = "2026-12-15T11:30:00Z"
    assert json.loads(block_ends_document(parse_config(raw)))["blocks"]["a"]["end"] == "2026-12-15T11:30:00Z"
    assert block_ends_uri("bucket-1") == "s3://bucket-1/blocks/ends.json"


def test_the_object_has_a_fixed_key_so_an_extension_updates_it_in_place():
    def program():
        obj = BlockEndsObject("c1", BlockEndsObjectArgs(bucket_name="bucket-1", document='{"x": 1}\n'))
        return pulumi.Output.all(obj.object_arn, obj.key)

    run = run_component(program)
    obj = run.inputs(OBJECT, "c1-block-ends")
    assert obj == {
        "bucket": "bucket-1",
        "key": BLOCK_ENDS_KEY,
        "content": '{"x": 1}\n',
        "contentType": "application/json",
        "tags": {},
    }
    assert run.value == [f"arn:aws:s3:::bucket-1/{BLOCK_ENDS_KEY}", BLOCK_ENDS_KEY]
    assert run.parent_type(OBJECT, "c1-block-ends") == "gpu-cluster:index:BlockEndsObject"


def test_the_program_publishes_the_ends_the_controller_role_reads_and_cluster_env_names():
    raw = two_blocks()
    run = run_program(raw)
    cfg = parse_config(raw)
    obj = run.inputs(OBJECT, "t1-block-ends")
    assert (obj["key"], obj["content"]) == (BLOCK_ENDS_KEY, block_ends_document(cfg))
    assert obj["tags"] == {"GpuClusterName": "t1"}  # S3 takes at most 10 tags per object
    bucket = obj["bucket"]
    payload = run.inputs(OBJECT, "t1-payload")
    # Only the controller's agent loop reads the ends (nodeside/lib/block-end.sh
    # block_end_fetch, run from block_end_tick on the controller): its role alone may.
    ends = json.loads(run.inputs(POLICY, "t1-controller-block-ends")["policy"])
    assert ends == {
        "Version": "2012-10-17",
        "Statement": [
            {"Action": "s3:GetObject", "Effect": "Allow", "Resource": f"arn:aws:s3:::{bucket}/{BLOCK_ENDS_KEY}"}
        ],
    }
    assert run.inputs(POLICY, "t1-controller-block-ends")["role"] == run.inputs(POLICY, "t1-controller-payload")["role"]
    for role in ("t1", "t1-controller"):
        assert json.loads(run.inputs(POLICY, f"{role}-payload")["policy"]) == {
            "Version": "2012-10-17",
            "Statement": [
                {"Action": "s3:GetObject", "Effect": "Allow", "Resource": f"arn:aws:s3:::{bucket}/{payload['key']}"}
            ],
        }
    policies = sorted(r["name"] for r in run.resources if r["type"] == POLICY)
    assert policies == [
        "t1-controller-block-ends",
        "t1-controller-logs",
        "t1-controller-metrics",
        "t1-controller-payload",
        "t1-controller-repair",
        "t1-controller-topology",
        "t1-logs",
        "t1-payload",
    ]
    env = run.node_files.files["/etc/gpu-cluster/cluster.env"].decode().splitlines()
    assert [ln for ln in env if ln.startswith("BLOCK_ENDS_")] == [
        f"BLOCK_ENDS_URI=s3://{bucket}/{BLOCK_ENDS_KEY}",
        "BLOCK_ENDS_REGION=us-east-2",
        "BLOCK_ENDS_INTERVAL=300",
    ]
    assert run.value["block_ends_uri"] == f"s3://{bucket}/{BLOCK_ENDS_KEY}"  # stack output, for operators


def test_an_on_demand_stack_publishes_nothing_and_keeps_its_bytes():
    raw = valid_raw()
    del raw["capacity"]["capacity_blocks"]
    run = run_program(raw)
    assert not [r for r in run.resources if r["name"].endswith("-block-ends")]
    env = run.node_files.files["/etc/gpu-cluster/cluster.env"].decode()
    assert "BLOCK_ENDS_" not in env and "block_ends_uri" not in run.value
    policy = json.loads(run.inputs(POLICY, "t1-payload")["policy"])
    assert isinstance(policy["Statement"][0]["Resource"], str)
    policies = sorted(r["name"] for r in run.resources if r["type"] == POLICY)
    assert policies == [
        "t1-controller-logs",
        "t1-controller-metrics",
        "t1-controller-payload",
        "t1-controller-repair",
        "t1-controller-topology",
        "t1-logs",
        "t1-payload",
    ]


def test_object_read_policy_names_one_exact_object():
    doc = json.loads(object_read_policy("arn:aws:s3:::b/blocks/ends.json"))
    assert doc == {
        "Version": "2012-10-17",
        "Statement": [{"Action": "s3:GetObject", "Effect": "Allow", "Resource": "arn:aws:s3:::b/blocks/ends.json"}],
    }
