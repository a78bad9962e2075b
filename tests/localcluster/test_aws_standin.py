"""The lanes' AWS stand-in (localcluster/aws_standin.py), driven by real boto3 clients:
botocore serializes each request and parses each answer, so a request the service model
would refuse, or an answer that does not fit the output shape, shows here."""

from __future__ import annotations

import datetime as dt

import boto3
import pytest

from localcluster.aws_standin import AwsStandin, StandinError
from nodeside import aws_client

START = dt.datetime(2026, 12, 2, 4, 0, tzinfo=dt.UTC)


def _handlers():
    seen: list[tuple[str, dict]] = []

    def terminate(p):
        seen.append(("terminate", p))
        if p["InstanceId"] == "i-gone":
            raise StandinError(
                "ValidationError", "Instance Id not found - No managed instance found for instance ID: i-gone"
            )
        return {
            "Activity": {
                "ActivityId": "act-1",
                "AutoScalingGroupName": "dev-block-a",
                "Cause": "terminated by the repair agent",
                "StartTime": START,
                "StatusCode": "InProgress",
                "Progress": 0,
            }
        }

    def groups(p):
        seen.append(("groups", p))
        raise StandinError("Throttling", "Rate exceeded")

    def topology(p):
        seen.append(("topology", p))
        if "NextToken" not in p:
            return {
                "Instances": [
                    {"InstanceId": "i-1", "InstanceType": "p5.48xlarge", "NetworkNodes": ["nn-1", "nn-2", "nn-3"]}
                ],
                "NextToken": "page2",
            }
        return {"Instances": [{"InstanceId": "i-2", "NetworkNodes": ["nn-1", "nn-2", "nn-4"]}]}

    handlers = {
        ("autoscaling", "TerminateInstanceInAutoScalingGroup"): terminate,
        ("autoscaling", "DescribeAutoScalingGroups"): groups,
        ("ec2", "DescribeInstanceTopology"): topology,
    }
    return handlers, seen


@pytest.fixture
def standin(tmp_path):
    """Serving on loopback, for boto3 clients."""
    handlers, seen = _handlers()
    s = AwsStandin(handlers, tmp_path / "aws").start()
    s.seen = seen
    yield s
    s.stop()


@pytest.fixture
def offline(tmp_path):
    """Not serving: requests handed to `answer` directly."""
    handlers, _ = _handlers()
    return AwsStandin(handlers, tmp_path / "aws")


@pytest.fixture
def clients(standin, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL_EC2", standin.url)
    monkeypatch.setenv("AWS_ENDPOINT_URL_AUTO_SCALING", standin.url)
    monkeypatch.setenv("GPU_CLUSTER_AWS_MAX_ATTEMPTS", "2")
    session = boto3.session.Session(aws_access_key_id="lane", aws_secret_access_key="lane")
    return (
        aws_client.client("autoscaling", region="us-east-2", session=session),
        aws_client.client("ec2", region="us-east-2", session=session),
    )


def test_query_protocol_request_and_answer_round_trip(standin, clients):
    asg, _ = clients
    out = aws_client.call(
        asg, "TerminateInstanceInAutoScalingGroup", InstanceId="i-1", ShouldDecrementDesiredCapacity=False
    )
    assert out["Activity"]["StatusCode"] == "InProgress"
    assert out["Activity"]["StartTime"] == START
    assert standin.seen == [("terminate", {"InstanceId": "i-1", "ShouldDecrementDesiredCapacity": False})]
    assert standin.refused() == []


def test_ec2_protocol_lists_and_pages(standin, clients):
    _, ec2 = clients
    got = list(aws_client.pages(ec2, "DescribeInstanceTopology", "Instances", InstanceIds=["i-1", "i-2"]))
    assert [(i["InstanceId"], i["NetworkNodes"]) for i in got] == [
        ("i-1", ["nn-1", "nn-2", "nn-3"]),
        ("i-2", ["nn-1", "nn-2", "nn-4"]),
    ]
    assert [p for _, p in standin.seen] == [
        {"InstanceIds": ["i-1", "i-2"]},
        {"InstanceIds": ["i-1", "i-2"], "NextToken": "page2"},
    ]


def test_handler_refusals_reach_the_caller_as_aws_errors(standin, clients):
    asg, _ = clients
    with pytest.raises(aws_client.AwsCallError) as err:
        aws_client.call(
            asg, "TerminateInstanceInAutoScalingGroup", InstanceId="i-gone", ShouldDecrementDesiredCapacity=False
        )
    assert err.value.code == "ValidationError" and "i-gone" in str(err.value)
    with pytest.raises(aws_client.AwsCallError) as throttled:
        aws_client.call(asg, "DescribeAutoScalingGroups", AutoScalingGroupNames=["dev-block-a"])
    assert throttled.value.throttled
    assert [k for k, _ in standin.seen].count("groups") == 2  # standard mode retried once (max 2 attempts)
    assert standin.refused() == []  # AWS's refusals, not the model's


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ("Action=TerminateInstanceInAutoScalingGroup&Version=2011-01-01&InstanceId=i-1", "MissingParameter"),
        (
            "Action=TerminateInstanceInAutoScalingGroup&Version=2011-01-01&InstanceId=i-1"
            "&ShouldDecrementDesiredCapacity=false&Bogus=1",
            "ValidationError",
        ),
        (
            "Action=TerminateInstanceInAutoScalingGroup&Version=2011-01-01&InstanceId=i-1"
            "&ShouldDecrementDesiredCapacity=maybe",
            "InvalidParameterValue",
        ),
        ("Action=DescribeInstanceTopology&Version=2016-11-15&MaxResults=1000", "InvalidParameterValue"),
        ("Action=DescribeInstanceTopology&Version=2016-11-15&InstanceIds.member.1=i-1", "UnknownParameter"),
        ("Action=TerminateInstances&Version=2016-11-15&InstanceId.1=i-1", "InvalidAction"),
        ("Action=NoSuchThing&Version=2016-11-15", "InvalidAction"),
        ("Action=DescribeInstanceTopology&Version=1999-01-01", "InvalidAction"),
    ],
)
def test_requests_the_model_refuses_are_refused_and_recorded(offline, body, code):
    status, xml = offline.answer(body)
    assert status == 400
    assert f"<Code>{code}</Code>" in xml
    (refused,) = offline.refused()
    assert refused["error"] == code


def test_an_unsigned_request_is_refused(offline):
    status, xml = offline.answer("Action=DescribeInstanceTopology&Version=2016-11-15", signed=False)
    assert status == 403 and "<Code>MissingAuthenticationToken</Code>" in xml
    assert offline.refused()[0]["error"] == "MissingAuthenticationToken"


def test_a_handler_answer_outside_the_output_shape_is_a_failure(tmp_path):
    s = AwsStandin({("ec2", "DescribeInstanceTopology"): lambda p: {"Instance": []}}, tmp_path)
    status, xml = s.answer("Action=DescribeInstanceTopology&Version=2016-11-15")
    assert status == 500 and "<Code>InternalFailure</Code>" in xml and "'Instance'" in xml
    assert s.refused()[0]["error"] == "InternalFailure"
