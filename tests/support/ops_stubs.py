"""Stubbed AWS for the ops tests: real botocore clients behind botocore's Stubber.

Every stubbed request is validated against the service model (parameter names,
types, required members) and every stubbed reply against the output shape, so a
misspelt parameter or an invented reply field fails the test.
"""

from __future__ import annotations

import functools
import io
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
from botocore.stub import Stubber

from ops.aws import Session, client_config
from ops.context import Context

REGION = "us-east-2"
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


@functools.cache
def _session() -> boto3.session.Session:
    # One session for every stubbed client: its loader caches the parsed service models
    # and endpoint data, which a fresh session per client re-read (most of an ops test's
    # time). Each client, and so each Stubber, is still its own.
    return boto3.session.Session()


def fake_client(service: str, region: str) -> Any:
    return _session().client(
        service,
        region_name=region,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=client_config(service),
    )


class FakeClock:
    """Time moves only when the code sleeps; records every sleep."""

    def __init__(self, now: datetime = NOW):
        self.t = 0.0
        self.start = now
        self.sleeps: list[float] = []

    def now(self) -> datetime:
        return self.start + timedelta(seconds=self.t)

    def monotonic(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.t += seconds


class Aws:
    """One Stubber per service; `session()` hands the stubbed clients to the code."""

    def __init__(self, region: str = REGION):
        self.region = region
        self.clients: dict[str, Any] = {}
        self.stubbers: dict[str, Stubber] = {}

    def stub(self, service: str) -> Stubber:
        if service not in self.stubbers:
            client = fake_client(service, self.region)
            self.clients[service] = client
            self.stubbers[service] = Stubber(client)
            self.stubbers[service].activate()
        return self.stubbers[service]

    def factory(self, service: str, region: str) -> Any:
        assert region == self.region, f"client for {region}, expected {self.region}"
        self.stub(service)
        return self.clients[service]

    def session(self, region: str | None = None) -> Session:
        return Session(region or self.region, factory=self.factory)

    def done(self) -> None:
        for s in self.stubbers.values():
            s.assert_no_pending_responses()


def context(
    aws: Aws, clock: FakeClock | None = None, answers: list[str] | None = None, interactive: bool = False
) -> Context:
    answers = list(answers or [])
    prompts: list[str] = []

    def prompt(text: str) -> str:
        prompts.append(text)
        return answers.pop(0)

    ctx = Context(
        session=aws.session(),
        out=io.StringIO(),
        err=io.StringIO(),
        clock=clock or FakeClock(),
        prompt=prompt,
        interactive=interactive,
    )
    ctx.prompts = prompts  # type: ignore[attr-defined]
    return ctx


def reservation(
    rid: str = "cr-0123456789abcdef0",
    state: str = "active",
    instance_type: str = "p5.48xlarge",
    az: str = "us-east-2b",
    count: int = 2,
    rtype: str = "capacity-block",
    start: datetime = NOW - timedelta(days=1),
    end: datetime = NOW + timedelta(days=6),
) -> dict[str, Any]:
    return {
        "CapacityReservationId": rid,
        "InstanceType": instance_type,
        "InstancePlatform": "Linux/UNIX",
        "AvailabilityZone": az,
        "TotalInstanceCount": count,
        "AvailableInstanceCount": count,
        "State": state,
        "StartDate": start,
        "EndDate": end,
        "ReservationType": rtype,
    }


# --- a deployed dev cluster: two groups in one block --------------------------------

CR = "cr-0123456789abcdef0"


def asg_instance(iid: str, state: str = "InService", health: str = "Healthy", version: str = "3") -> dict[str, Any]:
    return {
        "InstanceId": iid,
        "AvailabilityZone": "us-east-2b",
        "LifecycleState": state,
        "HealthStatus": health,
        "ProtectedFromScaleIn": False,
        "InstanceType": "p5.48xlarge",
        "LaunchTemplate": {
            "LaunchTemplateId": "lt-0123456789abcdef0",
            "LaunchTemplateName": "gpu-cluster-dev",
            "Version": version,
        },
    }


def asg(
    group: str,
    instances: list[dict[str, Any]],
    desired: int = 1,
    block: str | None = CR,
    base: str = "dev",
    tags: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A group as DescribeAutoScalingGroups gives it, tagged GpuClusterName=dev and `tags`."""
    name = f"gpu-cluster-{base}-{group}"
    g: dict[str, Any] = {
        "AutoScalingGroupName": name,
        "MinSize": desired,
        "MaxSize": desired,
        "DesiredCapacity": desired,
        "DefaultCooldown": 300,
        "AvailabilityZones": ["us-east-2b"],
        "HealthCheckType": "EC2",
        "CreatedTime": NOW,
        "Instances": instances,
        "LaunchTemplate": {"LaunchTemplateId": "lt-0123456789abcdef0", "Version": "3"},
        "Tags": [
            {"Key": k, "Value": v, "ResourceId": name, "ResourceType": "auto-scaling-group", "PropagateAtLaunch": True}
            for k, v in {"GpuClusterName": "dev", **(tags or {})}.items()
        ],
    }
    if block:
        g["CapacityReservationSpecification"] = {
            "CapacityReservationPreference": "capacity-reservations-only",
            "CapacityReservationTarget": {"CapacityReservationIds": [block]},
        }
    return g


# The image the instances were launched from (Pulumi.dev.yaml's example image.ami_id).
IMAGE_ID = "ami-0a1b2c3d4e5f60718"


def ec2_instance(iid: str, ip: str, group: str, state: str = "running", image: str = IMAGE_ID) -> dict[str, Any]:
    return {
        "InstanceId": iid,
        "ImageId": image,
        "PrivateIpAddress": ip,
        "State": {"Code": 16, "Name": state},
        "Tags": [
            {"Key": "GpuClusterName", "Value": "dev"},
            {"Key": "aws:autoscaling:groupName", "Value": f"gpu-cluster-dev-{group}"},
        ],
    }


def stub_ssm(
    aws: Aws,
    instance_id: str,
    commands: list[str],
    comment: str,
    timeout: int,
    stdout: str,
    status: str = "Success",
    code: int = 0,
    pending: int = 0,
    command_id: str = "11111111-2222-3333-4444-555555555555",
) -> None:
    """SendCommand, then `pending` not-yet-visible/in-progress polls, then the result."""
    ssm = aws.stub("ssm")
    ssm.add_response(
        "send_command",
        {"Command": {"CommandId": command_id}},
        {
            "InstanceIds": [instance_id],
            "DocumentName": "AWS-RunShellScript",
            "Comment": comment,
            "TimeoutSeconds": timeout,
            "Parameters": {"commands": commands},
        },
    )
    key = {"CommandId": command_id, "InstanceId": instance_id}
    for n in range(pending):
        if n == 0:
            ssm.add_client_error("get_command_invocation", "InvocationDoesNotExist", "", expected_params=key)
        else:
            ssm.add_response("get_command_invocation", {**key, "Status": "InProgress"}, key)
    ssm.add_response(
        "get_command_invocation",
        {**key, "Status": status, "ResponseCode": code, "StandardOutputContent": stdout, "StandardErrorContent": ""},
        key,
    )


def stub_controller(aws: Aws, instance_id: str = "i-0c000000000000001", base: str = "dev") -> None:
    aws.stub("autoscaling").add_response(
        "describe_auto_scaling_groups",
        {"AutoScalingGroups": [asg("controller", [asg_instance(instance_id)], base=base)]},
        {"AutoScalingGroupNames": [f"gpu-cluster-{base}-controller"]},
    )
