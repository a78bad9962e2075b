"""The lanes' DescribeInstanceTopology (localcluster/topology_standin.py) behind the AWS
stand-in, called by the controller's own refresh (nodeside/topology.py) through real
boto3: every request is checked against botocore's EC2 model by the stand-in, pages
follow NextToken, and the API's own refusals are kept."""

from __future__ import annotations

import json

import boto3
import pytest

from localcluster import topology_standin as ts
from localcluster.aws_standin import AwsStandin
from nodeside import aws_client, topology


@pytest.fixture
def ec2(tmp_path, monkeypatch):
    standin = AwsStandin(ts.handlers(tmp_path / "aws"), tmp_path / "aws").start()
    monkeypatch.setenv("AWS_ENDPOINT_URL_EC2", standin.url)
    monkeypatch.setenv("GPU_CLUSTER_AWS_MAX_ATTEMPTS", "1")
    session = boto3.session.Session(aws_access_key_id="lane", aws_secret_access_key="lane")
    yield standin, aws_client.client("ec2", region="us-east-2", session=session)
    standin.stop()


def test_the_refresh_reads_the_lanes_placements_page_by_page(tmp_path, ec2):
    standin, client = ec2
    for serial, iid in enumerate(["i-0000000000000000a", "i-0000000000000000b", "i-0000000000000000c"]):
        ts.place(tmp_path / "aws", iid, ts.lane_network_nodes(serial))
    got = topology.describe(
        topology.aws_pages(client),
        ["i-0000000000000000a", "i-0000000000000000b", "i-0000000000000000c", "i-0000000000000000d"],
    )
    assert sorted(got) == ["i-0000000000000000a", "i-0000000000000000b", "i-0000000000000000c"]
    assert got["i-0000000000000000b"]["NetworkNodes"][-1] == "nn-0c0ffee000000111"
    calls = [r for r in standin.requests() if r["action"] == "DescribeInstanceTopology"]
    assert [r["params"].get("NextToken") for r in calls] == [None, "2"]  # two pages
    assert all("MaxResults" not in r["params"] for r in calls)
    assert standin.refused() == []


def test_the_apis_own_refusals(tmp_path, ec2):
    _, client = ec2
    with pytest.raises(aws_client.AwsCallError, match="InvalidParameterCombination"):
        aws_client.call(client, "DescribeInstanceTopology", InstanceIds=["i-0000000000000000a"], MaxResults=5)
    with pytest.raises(aws_client.AwsCallError, match="at most 100 instance IDs"):
        aws_client.call(client, "DescribeInstanceTopology", InstanceIds=[f"i-{n:017x}" for n in range(101)])


def test_a_moved_instance_is_answered_where_it_now_is(tmp_path):
    ts.place(tmp_path, "i-1", ["a", "b", "c"])
    ts.place(tmp_path, "i-1", ["a", "b", "d"])
    answer = ts.handlers(tmp_path)[("ec2", "DescribeInstanceTopology")]({"InstanceIds": ["i-1"]})
    assert answer["Instances"][0]["NetworkNodes"] == ["a", "b", "d"]
    assert json.loads((tmp_path / "topology.json").read_text())["i-1"]["NetworkNodes"] == ["a", "b", "d"]
