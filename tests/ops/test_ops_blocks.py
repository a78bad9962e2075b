"""`python3 -m ops find-blocks`: offerings, the exact stack-file snippet, a guarded purchase."""

from __future__ import annotations

import json

from ops.cli import main
from tests.support.block_offerings import ARGS, END, EXPECTED, OFF1, OFF2, START, stub_offerings
from tests.support.ops_stubs import Aws, context


def run(aws: Aws, *extra: str, answers=None, interactive=False):
    ctx = context(aws, answers=answers, interactive=interactive)
    rc = main([*ARGS, *extra], ctx=ctx, session_for=aws.session)
    aws.done()
    return rc, ctx.out.getvalue(), ctx.err.getvalue(), ctx


def test_offerings_table_and_exact_snippet():
    aws = Aws()
    stub_offerings(aws)
    rc, out, _, _ = run(aws)
    assert rc == 0
    assert out == (
        "OFFERING              START (UTC)           END (UTC)             AZ          COUNT  UPFRONT FEE\n"
        "cb-0123456789abcdef0  2026-12-08T11:30:00Z  2026-12-15T11:30:00Z  us-east-2b  4      42336.00 USD\n"
        "cb-0fedcba9876543210  2026-12-09T11:30:00Z  2026-12-16T11:30:00Z  us-east-2a  4      41000.00 USD\n"
        "\n"
        "Stack-file snippet for cb-0123456789abcdef0 (under gpu-cluster:cluster.capacity; network.availability_zone "
        "must be us-east-2b):\n"
        "capacity_blocks:\n"
        "  - name: a\n"
        "    reservation_id: cr-...   # the id --purchase prints; offerings have no reservation id yet\n"
        "    instance_count: 4\n"
        "    availability_zone: us-east-2b\n"
        "    start: '2026-12-08T11:30:00Z'\n"
        "    end: '2026-12-15T11:30:00Z'\n"
        "\n"
        "Buy it with --purchase cb-0123456789abcdef0. A Capacity Block purchase cannot be cancelled or refunded: you "
        "pay the whole upfront fee even if you never launch an instance.\n"
    )


def test_show_picks_the_snippet_and_json_lists_all():
    aws = Aws()
    stub_offerings(aws)
    rc, out, _, _ = run(aws, "--show", OFF2, "--name", "b", "--json")
    doc = json.loads(out)
    assert rc == 0
    assert [o["offering_id"] for o in doc["offerings"]] == [OFF1, OFF2]
    assert doc["chosen"]["offering_id"] == OFF2 and doc["chosen"]["upfront_fee"] == "41000.00"
    assert doc["snippet"].splitlines()[1:3] == [
        "  - name: b",
        "    reservation_id: cr-...   # the id --purchase prints; offerings have no reservation id yet",
    ]
    assert "availability_zone: us-east-2a" in doc["snippet"] and "purchased" not in doc


def test_purchase_after_typing_the_offering_id():
    aws = Aws()
    stub_offerings(aws)
    aws.stub("ec2").add_response(
        "purchase_capacity_block",
        {
            "CapacityReservation": {
                "CapacityReservationId": "cr-0aaaabbbbccccdddd",
                "State": "payment-pending",
                "InstanceType": "p5.48xlarge",
                "AvailabilityZone": "us-east-2b",
                "TotalInstanceCount": 4,
                "StartDate": START,
                "EndDate": END,
            }
        },
        {"CapacityBlockOfferingId": OFF1, "InstancePlatform": "Linux/UNIX"},
    )
    rc, out, err, ctx = run(aws, "--purchase", OFF1, answers=[OFF1], interactive=True)
    assert rc == 0
    assert ctx.prompts == [f"Type the offering id ({OFF1}) to buy it, anything else to stop: "]
    assert "cannot be cancelled or refunded" in err
    assert (
        "Bought cb-0123456789abcdef0: reservation cr-0aaaabbbbccccdddd (payment-pending). Under "
        "gpu-cluster:cluster.capacity in Pulumi.<stack>.yaml:\n"
        "capacity_blocks:\n  - name: a\n    reservation_id: cr-0aaaabbbbccccdddd\n    instance_count: 4\n"
        "    availability_zone: us-east-2b\n    start: '2026-12-08T11:30:00Z'\n    end: '2026-12-15T11:30:00Z'\n"
    ) in out


def test_wrong_answer_buys_nothing():
    aws = Aws()
    stub_offerings(aws)  # no purchase stubbed: a PurchaseCapacityBlock call would fail the test
    rc, _, err, _ = run(aws, "--purchase", OFF1, answers=["yes"], interactive=True)
    assert rc == 1
    assert err.splitlines()[-1] == "gpu-cluster-ops find-blocks: not confirmed; nothing was bought"


def test_no_terminal_and_no_flag_refuses():
    aws = Aws()
    stub_offerings(aws)
    rc, _, err, ctx = run(aws, "--purchase", OFF1)
    assert rc == 2 and ctx.prompts == []
    assert err.splitlines()[-1] == (
        "gpu-cluster-ops find-blocks: refusing to buy without confirmation: run in a "
        "terminal and type the offering id, or pass --yes-i-understand-no-refund"
    )


def test_flag_buys_without_prompt():
    aws = Aws()
    stub_offerings(aws)
    aws.stub("ec2").add_response(
        "purchase_capacity_block",
        {
            "CapacityReservation": {
                "CapacityReservationId": "cr-0aaaabbbbccccdddd",
                "State": "scheduled",
                "StartDate": START,
                "EndDate": END,
            }
        },
        {"CapacityBlockOfferingId": OFF2, "InstancePlatform": "Linux/UNIX"},
    )
    rc, out, _, ctx = run(aws, "--purchase", OFF2, "--yes-i-understand-no-refund", "--json")
    doc = json.loads(out)
    assert rc == 0 and ctx.prompts == []
    assert doc["purchased"] == {
        "reservation_id": "cr-0aaaabbbbccccdddd",
        "state": "scheduled",
        "start": "2026-12-08T11:30:00Z",
        "end": "2026-12-15T11:30:00Z",
    }


def test_unknown_offering_and_no_offering():
    aws = Aws()
    stub_offerings(aws)
    rc, _, err, _ = run(aws, "--purchase", "cb-0000000000000000f", "--yes-i-understand-no-refund")
    assert rc == 1 and "is not among the current offerings" in err
    aws = Aws()
    aws.stub("ec2").add_response("describe_capacity_block_offerings", {"CapacityBlockOfferings": []}, EXPECTED)
    rc, out, _, _ = run(aws)
    assert rc == 1
    assert out == (
        "no Capacity Block offering for 4 x p5.48xlarge for 7 days in this range; try other dates, fewer "
        "instances or a shorter duration\n"
    )


def test_durations_aws_does_not_sell_are_refused_before_any_call():
    aws = Aws()
    ctx = context(aws)
    rc = main(
        ["find-blocks", "--instance-type", "p5.48xlarge", "--count", "4", "--days", "15", "--region", "us-east-2"],
        ctx=ctx,
        session_for=aws.session,
    )
    assert rc == 2
    assert ctx.err.getvalue().strip() == (
        "gpu-cluster-ops find-blocks: --days 15: blocks last 1-14 days, or a multiple of 7 days up to 182"
    )


def test_access_denied_on_search():
    aws = Aws()
    aws.stub("ec2").add_client_error(
        "describe_capacity_block_offerings",
        "UnauthorizedOperation",
        "You are not authorized to perform this operation.",
        expected_params=EXPECTED,
    )
    rc, _, err, _ = run(aws)
    assert rc == 3
    assert err.strip() == (
        "gpu-cluster-ops find-blocks: searching Capacity Block offerings: access denied to "
        "DescribeCapacityBlockOfferings; grant it to your AWS identity (You are not authorized to "
        "perform this operation.)"
    )


def test_purchased_snippet_is_accepted_by_the_config_schema():
    import yaml

    from model.config import parse_config
    from ops.blocks import snippet

    text = snippet("a", 4, "us-east-2b", "2026-12-08T11:30:00Z", "2026-12-15T11:30:00Z", "cr-0aaaabbbbccccdddd")
    cfg = parse_config(
        {
            "name": "dev",
            "instance_type": "p5.48xlarge",
            "network": {"availability_zone": "us-east-2b", "subnet_id": "subnet-0a1b2c3d4e5f60718"},
            "capacity": {"nodes": 4, **yaml.safe_load(text)},
        }
    )
    block = cfg.capacity.capacity_blocks[0]
    assert (block.reservation_id, block.instance_count) == ("cr-0aaaabbbbccccdddd", 4)
    assert getattr(block, "start", START) == START and getattr(block, "end", END) == END
