"""ops/aws.py: throttling is retried by botocore's standard retry mode; errors read as one line.

botocore's Stubber answers in the `before-call` event, above the retry layer, so a
stubbed Throttling reply is never retried. These tests answer one layer lower
(`before-send`, the raw HTTP reply) so the real retry handler and the real response
parser run, with the same client configuration the CLI uses.
"""

from __future__ import annotations

import botocore.endpoint
import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ClientError

from ops.aws import OpsError, Session, call, describe_error
from ops.cluster import cluster_groups
from ops.facts import describe_blocks
from tests.support.ops_stubs import Aws, context, fake_client

EC2_THROTTLED = (
    503,
    b"<Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>Request limit exceeded."
    b"</Message></Error></Errors><RequestID>r1</RequestID></Response>",
)
EC2_OK = (
    200,
    b'<DescribeCapacityReservationsResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">'
    b"<requestId>r2</requestId><capacityReservationSet><item>"
    b"<capacityReservationId>cr-0123456789abcdef0</capacityReservationId><state>active</state>"
    b"<instanceType>p5.48xlarge</instanceType><availabilityZone>us-east-2b</availabilityZone>"
    b"<totalInstanceCount>2</totalInstanceCount><reservationType>capacity-block</reservationType>"
    b"</item></capacityReservationSet></DescribeCapacityReservationsResponse>",
)
ASG_THROTTLED = (
    400,
    b"<ErrorResponse><Error><Type>Sender</Type><Code>Throttling</Code><Message>Rate exceeded"
    b"</Message></Error><RequestId>r3</RequestId></ErrorResponse>",
)
ASG_OK = (
    200,
    b'<DescribeAutoScalingGroupsResponse xmlns="http://autoscaling.amazonaws.com/doc/2011-01-01/">'
    b"<DescribeAutoScalingGroupsResult><AutoScalingGroups/></DescribeAutoScalingGroupsResult>"
    b"<ResponseMetadata><RequestId>r4</RequestId></ResponseMetadata></DescribeAutoScalingGroupsResponse>",
)


class _Raw:
    def __init__(self, body: bytes):
        self.body = body

    def stream(self, **_):
        yield self.body


def http_replies(client, event: str, replies: list[tuple[int, bytes]]) -> list[str]:
    """Answer each HTTP send of `event` with the next reply; return the sent request bodies."""
    sent: list[str] = []

    def answer(request, **_):
        sent.append(request.body.decode() if isinstance(request.body, bytes) else str(request.body))
        status, body = replies.pop(0)
        return AWSResponse(request.url, status, {"Content-Type": "text/xml"}, _Raw(body))

    client.meta.events.register(event, answer)
    return sent


@pytest.fixture
def no_backoff(monkeypatch):
    slept: list[float] = []
    monkeypatch.setattr(botocore.endpoint.time, "sleep", slept.append)
    return slept


def test_throttled_ec2_call_is_retried_then_succeeds(no_backoff):
    ec2 = fake_client("ec2", "us-east-2")
    sent = http_replies(ec2, "before-send.ec2.DescribeCapacityReservations", [EC2_THROTTLED, EC2_THROTTLED, EC2_OK])
    blocks = describe_blocks(ec2, ["cr-0123456789abcdef0"])
    assert blocks["cr-0123456789abcdef0"].state == "active"
    assert blocks["cr-0123456789abcdef0"].total_instance_count == 2
    assert len(sent) == 3 and all("CapacityReservationId.1=cr-0123456789abcdef0" in b for b in sent)
    assert len(no_backoff) == 2  # backed off before each retry


def test_throttled_autoscaling_call_is_retried_through_the_ops_code(no_backoff):
    aws = Aws()
    client = fake_client("autoscaling", "us-east-2")
    http_replies(client, "before-send.auto-scaling.DescribeAutoScalingGroups", [ASG_THROTTLED, ASG_OK])
    ctx = context(aws)
    ctx.session = Session("us-east-2", factory=lambda service, region: client)
    assert cluster_groups(ctx, "dev") == []
    assert len(no_backoff) == 1


def test_still_throttled_after_every_attempt_is_one_clear_line(no_backoff):
    ec2 = fake_client("ec2", "us-east-2")
    sent = http_replies(ec2, "before-send.ec2.DescribeCapacityReservations", [EC2_THROTTLED] * 8)
    with pytest.raises(OpsError) as err:
        call(
            ec2,
            "describe_capacity_reservations",
            "reading the Capacity Blocks",
            CapacityReservationIds=["cr-0123456789abcdef0"],
        )
    assert len(sent) == 8  # RETRY_CONFIG: standard mode, 8 attempts
    assert str(err.value) == (
        "reading the Capacity Blocks: DescribeCapacityReservations still throttled after "
        "retries; wait a minute and run again"
    )


def err(code: str, message: str, op: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message}}, op)


@pytest.mark.parametrize(
    "error, expected",
    [
        (
            err("AccessDeniedException", "User: x is not authorized", "GetServiceQuota"),
            "reading: access denied to GetServiceQuota; grant it to your AWS identity (User: x is not authorized)",
        ),
        (
            err("UnauthorizedOperation", "", "DescribeInstances"),
            "reading: access denied to DescribeInstances; grant it to your AWS identity",
        ),
        (
            err("InvalidInstanceID.NotFound", "The instance ID 'i-1' does not exist", "DescribeInstances"),
            "reading: InvalidInstanceID.NotFound: The instance ID 'i-1' does not exist",
        ),
        (
            err("InsufficientInstanceCapacity", "no capacity", "PurchaseCapacityBlock"),
            "reading: PurchaseCapacityBlock failed: InsufficientInstanceCapacity: no capacity",
        ),
    ],
)
def test_error_lines(error, expected):
    assert describe_error(error, "reading") == expected
