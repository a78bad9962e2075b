"""The controller agents' AWS client (nodeside/aws_client.py): one line per failed call,
the endpoint swap the lanes use, the region from instance metadata, and the nodes' boto3
pinned to the versions these tests' botocore models come from."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber

from localcluster import imds
from nodeside import aws_client

TOP = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def session() -> boto3.session.Session:
    return boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing")


def test_endpoint_override_follows_the_service_id_rule():
    env = {"AWS_ENDPOINT_URL_AUTO_SCALING": "http://127.0.0.1:9/asg", "AWS_ENDPOINT_URL": "http://127.0.0.1:9/any"}
    assert aws_client.endpoint_for("Auto Scaling", env) == "http://127.0.0.1:9/asg"
    assert aws_client.endpoint_for("EC2", env) == "http://127.0.0.1:9/any"
    assert aws_client.endpoint_for("EC2", {}) is None


def test_client_takes_the_endpoint_from_the_environment(session, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL_AUTO_SCALING", "http://127.0.0.1:8123")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    asg = aws_client.client("autoscaling", region="us-east-2", session=session)
    ec2 = aws_client.client("ec2", region="us-east-2", session=session)
    assert asg.meta.endpoint_url == "http://127.0.0.1:8123"
    assert ec2.meta.endpoint_url == "https://ec2.us-east-2.amazonaws.com"
    assert asg.meta.config.retries == {"mode": "standard", "total_max_attempts": 5}


@pytest.mark.parametrize(
    ("service", "operation", "action"),
    [
        ("autoscaling", "TerminateInstanceInAutoScalingGroup", "autoscaling:TerminateInstanceInAutoScalingGroup"),
        ("ec2", "DescribeInstanceTopology", "ec2:DescribeInstanceTopology"),
        ("secretsmanager", "GetSecretValue", "secretsmanager:GetSecretValue"),
        # signed and reached as `monitoring`, granted as `cloudwatch:` (infra/logs.py)
        ("cloudwatch", "PutMetricData", "cloudwatch:PutMetricData"),
        ("logs", "PutLogEvents", "logs:PutLogEvents"),
    ],
)
def test_iam_action_is_the_name_a_policy_grants(session, service, operation, action):
    assert aws_client.iam_action(aws_client.client(service, region="us-east-2", session=session), operation) == action


def test_denied_call_names_the_iam_action_the_role_lacks(session):
    asg = aws_client.client("autoscaling", region="us-east-2", session=session)
    with Stubber(asg) as stub:
        stub.add_client_error(
            "terminate_instance_in_auto_scaling_group",
            service_error_code="AccessDenied",
            service_message="User: arn:aws:sts::1:assumed-role/c/i-1 is not authorized\nto perform this",
            http_status_code=403,
            expected_params={"InstanceId": "i-0abc", "ShouldDecrementDesiredCapacity": False},
        )
        with pytest.raises(aws_client.AwsCallError) as err:
            aws_client.call(
                asg, "TerminateInstanceInAutoScalingGroup", InstanceId="i-0abc", ShouldDecrementDesiredCapacity=False
            )
    e = err.value
    assert (e.denied, e.throttled, e.code) == (True, False, "AccessDenied")
    assert str(e) == (
        "autoscaling:TerminateInstanceInAutoScalingGroup: access denied (AccessDenied): the instance role lacks "
        "autoscaling:TerminateInstanceInAutoScalingGroup: User: arn:aws:sts::1:assumed-role/c/i-1 is not authorized to perform this"
    )


def test_throttled_and_other_refusals_are_one_line_each(session, monkeypatch):
    monkeypatch.setenv("GPU_CLUSTER_AWS_MAX_ATTEMPTS", "3")
    ec2 = aws_client.client("ec2", region="us-east-2", session=session)
    with Stubber(ec2) as stub:
        stub.add_client_error("describe_instance_topology", "RequestLimitExceeded", "Request limit exceeded.")
        stub.add_client_error("describe_instance_topology", "InvalidInstanceID.Malformed", 'Invalid id: "x"')
        with pytest.raises(aws_client.AwsCallError) as throttled:
            aws_client.call(ec2, "DescribeInstanceTopology")
        with pytest.raises(aws_client.AwsCallError) as other:
            list(aws_client.pages(ec2, "DescribeInstanceTopology", "Instances", InstanceIds=["x"]))
    assert throttled.value.throttled and str(throttled.value) == (
        "ec2:DescribeInstanceTopology: throttled (RequestLimitExceeded) after 3 attempts: Request limit exceeded."
    )
    assert str(other.value) == 'ec2:DescribeInstanceTopology: InvalidInstanceID.Malformed: Invalid id: "x"'


def test_pages_follows_next_tokens(session):
    ec2 = aws_client.client("ec2", region="us-east-2", session=session)
    with Stubber(ec2) as stub:
        stub.add_response(
            "describe_instance_topology",
            {"Instances": [{"InstanceId": "i-1", "NetworkNodes": ["nn-a", "nn-b", "nn-c"]}], "NextToken": "t1"},
            {"InstanceIds": ["i-1", "i-2"]},
        )
        stub.add_response(
            "describe_instance_topology",
            {"Instances": [{"InstanceId": "i-2", "NetworkNodes": ["nn-a", "nn-b", "nn-d"]}]},
            {"InstanceIds": ["i-1", "i-2"], "NextToken": "t1"},
        )
        got = list(aws_client.pages(ec2, "DescribeInstanceTopology", "Instances", InstanceIds=["i-1", "i-2"]))
    assert [i["InstanceId"] for i in got] == ["i-1", "i-2"]


def test_an_operation_this_botocore_does_not_know_is_named(session):
    ec2 = aws_client.client("ec2", region="us-east-2", session=session)
    with pytest.raises(aws_client.AwsCallError, match=r"^ec2:DescribeNothing: UnknownOperation: "):
        aws_client.call(ec2, "DescribeNothing")


def test_region_comes_from_instance_metadata_v2(monkeypatch):
    handler = type(
        "H",
        (imds.Handler,),
        {
            "tree": imds.metadata_tree(
                {
                    "instance_id": "i-1",
                    "local_ipv4": "10.0.0.1",
                    "local_hostname": "n",
                    "availability_zone": "eu-west-1c",
                }
            ),
            "tokens": {},
            "log_path": None,
        },
    )
    server = imds.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        monkeypatch.delenv("AWS_REGION", raising=False)
        monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
        monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
        assert aws_client.node_region() == "eu-west-1"
        monkeypatch.setenv("AWS_REGION", "us-west-2")
        assert aws_client.node_region() == "us-west-2"
    finally:
        server.shutdown()


def test_the_nodes_boto3_is_exactly_the_locked_one():
    r = subprocess.run(
        [sys.executable, str(TOP / "scripts/aws-requirements.py"), "--check"], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    text = (TOP / "nodeside/conf/aws-requirements.txt").read_text()
    assert f"boto3=={boto3.__version__} " in text
    import botocore

    assert f"botocore=={botocore.__version__} " in text
